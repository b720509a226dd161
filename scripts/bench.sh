#!/usr/bin/env bash
# Regenerate docs/BENCHMARKS.md's figures: start the test servers, run the
# renewal bench with the HTTP rows and the floor on moto, and print its
# Markdown table, punctuality line and histograms; then renewal as it is
# lived: `bucket-lease-bench` (what `bucket-lease bench` runs) over TLS
# with a 20 ms round trip to a server that closes connections idle for 5 s
# (scripts/wan_proxy.py in front of moto), back to back and then at a 10 s cadence, open loop, side by side
# (`bench --compare`), with the warm-connection goal (cadence p50 at most
# 1.1x the back-to-back p50) said met or missed, and the plot written to
# target/bench-cadence.svg (BUCKET_LEASE_BENCH_CADENCE_SECS, default 120,
# sets the cadence run's length); then 10,000 leases in
# one pool on fs and up to 1,000 on moto (benches/pool.rs, about 3 min)
# unless --no-pool; then the cost of the stack (scripts/stack-cost.sh)
# unless --no-cost.
#
# usage: bash scripts/bench.sh [--no-pool] [--no-cost]
#
# The bench's own settings pass through: BUCKET_LEASE_BENCH_OPS (per batch,
# default 200), BUCKET_LEASE_BENCH_REPS (default 5),
# BUCKET_LEASE_BENCH_LOAD_SECS (default 30), BUCKET_LEASE_BENCH_STRACE=0 (no
# system-call counts).
set -euo pipefail
cd "$(dirname "$0")/.."

pool=1 cost=1
for arg in "$@"; do
  case "$arg" in
    --no-pool) pool=0 ;;
    --no-cost) cost=0 ;;
    *) echo "usage: bash scripts/bench.sh [--no-pool] [--no-cost]" >&2; exit 64 ;;
  esac
done

bash scripts/test-servers.sh start
trap 'bash scripts/test-servers.sh stop' EXIT
set -a
# shellcheck disable=SC1091
. .ci/tmp/servers.env
set +a

echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -sr)"
cargo bench --bench renewal --features minio -- --markdown

echo
echo "## Renewal as it is lived: TLS, a 20 ms round trip, idle connections closed after 5 s"
wan="$PWD/.ci/tmp/wan"
rm -rf "$wan"
mkdir -p "$wan"
# A CA of this run, and a certificate for 127.0.0.1 it signs (nothing kept).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=bench-ca \
  -days 2 -keyout "$wan/ca.key" -out "$wan/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=127.0.0.1 \
  -keyout "$wan/key.pem" -out "$wan/leaf.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > "$wan/ext.cnf"
openssl x509 -req -in "$wan/leaf.csr" -CA "$wan/ca.pem" -CAkey "$wan/ca.key" -CAcreateserial \
  -days 2 -extfile "$wan/ext.cnf" -out "$wan/cert.pem" 2>/dev/null
python3 scripts/wan_proxy.py --upstream "${BUCKET_LEASE_TEST_MOTO_URL#http://}" --delay-ms 10 \
  --idle-close 5 --cert "$wan/cert.pem" --key "$wan/key.pem" --port-file "$wan/port" &
wan_pid=$!
trap 'kill "$wan_pid" 2>/dev/null; bash scripts/test-servers.sh stop' EXIT
for _ in $(seq 50); do [ -s "$wan/port" ] && break; sleep 0.1; done
cargo build --release --features cli --bin bucket-lease-bench
bl() {
  AWS_ENDPOINT_URL="https://127.0.0.1:$(cat "$wan/port")" AWS_CA_BUNDLE="$wan/ca.pem" \
    AWS_ACCESS_KEY_ID=test-key AWS_SECRET_ACCESS_KEY=test-secret AWS_REGION=us-east-1 \
    AWS_EC2_METADATA_DISABLED=true target/release/bucket-lease-bench "$@"
}
url="s3://$BUCKET_LEASE_TEST_BUCKET/bench-wan"
bl -q --iters 5 --renewals 20 --json "$url" > target/bench-back-to-back.json
bl -q --ttl 30 --interval 10s --duration "${BUCKET_LEASE_BENCH_CADENCE_SECS:-120}s" \
  --json --csv target/bench-cadence.csv --plot target/bench-cadence.svg "$url" > target/bench-cadence.json
bl --compare target/bench-back-to-back.json target/bench-cadence.json
python3 - target/bench-back-to-back.json target/bench-cadence.json <<'PY'
import json, sys
back, cad = (json.load(open(p)) for p in sys.argv[1:3])
c = cad["connections"]
print(f"cadence: {cad['renew']['count']} renewals every 10 s: {c.get('kept', 0)} on a kept "
      f"connection, {c.get('new', 0)} on a new one; answers {cad['answers']}; "
      f"{cad['fenced']} would have fenced; clock offset {cad['clock_offset_ms']}")
ratio = cad["renew"]["p50_ms"] / back["renew"]["p50_ms"]
verdict = "met" if ratio <= 1.1 else "MISSED"
print(f"warm-connection goal (cadence p50 <= 1.1x back-to-back p50): {verdict}: "
      f"{cad['renew']['p50_ms']:.1f} ms / {back['renew']['p50_ms']:.1f} ms = {ratio:.2f}x")
PY
if [ "$pool" = 1 ]; then
  echo
  cargo bench --bench pool --features minio
fi
if [ "$cost" = 1 ]; then
  echo
  bash scripts/stack-cost.sh
fi
