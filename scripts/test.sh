#!/usr/bin/env bash
# The whole test suite, as CI runs it: start the local S3-compatible servers
# (installing them on first use), run every test with those servers
# required, run each backend feature on its own, stop the servers.
#
# usage: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/test-servers.sh start
trap 'bash scripts/test-servers.sh stop' EXIT
set -a
# shellcheck disable=SC1091
. .ci/tmp/servers.env
set +a
export BUCKET_LEASE_REQUIRE_SERVERS=1
# test-servers.sh installed Chromium: the plot test must not skip.
export BUCKET_LEASE_REQUIRE_CHROMIUM=1

cargo test --workspace --all-features
echo "== the core's internals cannot be named without its feature internals (compile-fail doctests)"
cargo test -p bucket-lease-core --doc
echo "== the command's terminal and file:// tests as a container's processes (a new PID namespace)"
# There the kernel shows the ids of groups and sessions made outside as 0;
# a CI machine's container found a panic on one that no test here had.
if unshare --pid --fork --mount-proc true 2>/dev/null; then
  unshare --pid --fork --mount-proc \
    cargo test -p bucket-lease --all-features --test cli_tty --test cli_fs
else
  echo "note: skipped: \`unshare --pid --fork --mount-proc\` is not allowed here"
fi
for feature in s3 r2 minio fs; do
  echo "== bucket-lease-backends with only the $feature feature"
  cargo test -p bucket-lease-backends --no-default-features --features "$feature"
done

echo "== the deterministic simulation: 10,000 seeds on the real code"
bash scripts/simulate.sh 10000
echo "== the simulation finds each reintroduced defect"
bash scripts/simulate.sh --check-mutants 2000
echo "== the exhaustive search: every schedule of a small scope on the real code"
bash scripts/simulate.sh --exhaustive
echo "== the stores' tests find each reintroduced store defect"
bash scripts/check-store-mutants.sh
