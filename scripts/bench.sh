#!/usr/bin/env bash
# Regenerate docs/BENCHMARKS.md's figures: start the test servers, run the
# renewal bench with the HTTP rows and the floor on moto, and print its
# Markdown table, punctuality line and histograms; then 10,000 leases in
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
if [ "$pool" = 1 ]; then
  echo
  cargo bench --bench pool --features minio
fi
if [ "$cost" = 1 ]; then
  echo
  bash scripts/stack-cost.sh
fi
