#!/usr/bin/env bash
# Build the fully static command (glibc linked in, `+crt-static`) with every
# store, and bucket-lease-bench beside it, check that both are static, and
# run them against moto: take, inspect, release and bench a lease on an
# s3:// URL pointed at the local server (`bench` through the command,
# which runs bucket-lease-bench).
#
# usage: bash scripts/static-build.sh
#
# Uses the servers of .ci/tmp/servers.env when BUCKET_LEASE_TEST_MOTO_URL is
# set; otherwise starts them (scripts/test-servers.sh) and stops them after.
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-gnu
# --target keeps RUSTFLAGS off build scripts and proc macros (they stay
# dynamic host binaries); the static flag applies to the command alone.
RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --release --features cli --target "$target"
bin="${CARGO_TARGET_DIR:-target}/$target/release/bucket-lease"

# The job command and bucket-lease-bench beside it (`bench` runs it).
for program in "$bin" "$bin-bench"; do
  linked=$(ldd "$program" 2>&1 || true)
  case "$linked" in
    *"not a dynamic executable"* | *"statically linked"*) ;;
    *) echo "static-build: $program is not static; ldd says:" >&2; echo "$linked" >&2; exit 1 ;;
  esac
  echo "static-build: $program is static ($(stat -c %s "$program") bytes)"
done

if [ -z "${BUCKET_LEASE_TEST_MOTO_URL:-}" ]; then
  bash scripts/test-servers.sh start
  trap 'bash scripts/test-servers.sh stop' EXIT
  set -a
  # shellcheck disable=SC1091
  . .ci/tmp/servers.env
  set +a
fi

url="s3://${BUCKET_LEASE_TEST_BUCKET:-bucket-lease-test}/static-build-$$"
# Only the local server: fixed test credentials, no profile, no instance
# metadata request.
static() {
  env -u AWS_PROFILE -u AWS_SESSION_TOKEN \
    AWS_ENDPOINT_URL="$BUCKET_LEASE_TEST_MOTO_URL" \
    AWS_ACCESS_KEY_ID=test-key AWS_SECRET_ACCESS_KEY=test-secret AWS_REGION=us-east-1 \
    AWS_EC2_METADATA_DISABLED=true \
    AWS_CONFIG_FILE=/nonexistent/bucket-lease-static/config \
    AWS_SHARED_CREDENTIALS_FILE=/nonexistent/bucket-lease-static/credentials \
    "$bin" "$@"
}

# `run` takes the lease, runs the command while renewing, releases it; the
# command sees the lease's key.
seen=$(static run --ttl 5 "$url" -- sh -c 'echo "$BUCKET_LEASE_KEY"')
[ "$seen" = "static-build-$$/LEASE" ] || { echo "static-build: run gave $seen" >&2; exit 1; }
static inspect --json "$url" | grep -q '"released_at"' \
  || { echo "static-build: inspect does not show the released lease" >&2; exit 1; }
static bench -q --iters 2 --renewals 2 "$url" >/dev/null
echo "static-build: the static command took, renewed, released and benched a lease on moto"
