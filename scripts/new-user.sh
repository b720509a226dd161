#!/usr/bin/env bash
# A new user's program (tests/new-user: only what the README shows, the
# dependency line the README gives) builds, and runs twice in a row on one
# directory and, when the test servers are up (BUCKET_LEASE_TEST_MOTO_URL,
# from .ci/tmp/servers.env), twice on moto.
#
# usage: bash scripts/new-user.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# Its own workspace, its own lock file; the build shares this checkout's
# target directory so the crates it has in common are not built twice.
export CARGO_TARGET_DIR="$PWD/target/new-user"
manifest=tests/new-user/Cargo.toml
cargo fmt --manifest-path "$manifest" -- --check
cargo build --manifest-path "$manifest" --locked
bin="$CARGO_TARGET_DIR/debug/bucket-lease-new-user"

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bin" "$dir"
"$bin" "$dir"

if [ -n "${BUCKET_LEASE_TEST_MOTO_URL:-}" ]; then
  url="s3://${BUCKET_LEASE_TEST_BUCKET:-bucket-lease-test}/new-user-$$"
  for _ in 1 2; do
    env -u AWS_PROFILE -u AWS_SESSION_TOKEN \
      AWS_ENDPOINT_URL="$BUCKET_LEASE_TEST_MOTO_URL" \
      AWS_ACCESS_KEY_ID=test-key AWS_SECRET_ACCESS_KEY=test-secret AWS_REGION=us-east-1 \
      AWS_EC2_METADATA_DISABLED=true \
      AWS_CONFIG_FILE=/nonexistent/bucket-lease-new-user/config \
      AWS_SHARED_CREDENTIALS_FILE=/nonexistent/bucket-lease-new-user/credentials \
      "$bin" "$url"
  done
else
  echo "new-user: no test servers configured; ran on a directory only"
fi
