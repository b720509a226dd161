#!/usr/bin/env bash
# The whole test suite, as CI runs it: build every test once, start the
# local S3-compatible servers (installing them on first use) unless the
# caller started them, run every test with those servers required, each
# backend feature on its own, the command's terminal and file:// tests in a
# new PID namespace, the doctests; meanwhile the deterministic simulation at
# idle priority; then each store mutant on the same build.
#
# usage: bash scripts/test.sh
#
# The tests run under cargo-nextest (profile `ci` of .config/nextest.toml):
# each test a process of its own, eight at a time, none retried; the
# backends' tests with each store alone run beside those with every
# feature. The simulation (`bash scripts/simulate.sh --ci`) runs beside
# them too, under SCHED_IDLE: the tests mostly wait on servers, TTLs and
# children, and it takes only the CPU they leave, so their timing is
# theirs. Each step's heading gives the seconds since the suite began.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo nextest --version >/dev/null 2>&1; then
  echo "== installing cargo-nextest, the suite's test runner"
  cargo install --locked cargo-nextest
fi

started=$(date +%s)
# step TITLE: a heading with the seconds since the suite began.
step() {
  echo "== [$(($(date +%s) - started)) s] $*"
}

background_pids=()
logs=()
own_servers=0
cleanup() {
  local status=$? pid
  for pid in ${background_pids[@]+"${background_pids[@]}"}; do
    kill -- -"$pid" 2>/dev/null || true
  done
  rm -f ${logs[@]+"${logs[@]}"}
  if [ "$own_servers" = 1 ]; then
    bash scripts/test-servers.sh stop
  fi
  return "$status"
}
trap cleanup EXIT

# beside NAME COMMAND...: run COMMAND in the background, in a process group
# of its own (so that a failure here stops it), its output kept for
# `collect`. Sets `pid` and `log`.
beside() {
  log=$(mktemp)
  logs+=("$log")
  setsid "$@" >"$log" 2>&1 &
  pid=$!
  background_pids+=("$pid")
}
# collect TITLE PID LOG: wait for a `beside` job, print its output, fail
# as it failed.
collect() {
  local title=$1 pid=$2 log=$3 status=0
  step "$title"
  wait "$pid" || status=$?
  cat "$log"
  if [ "$status" != 0 ]; then
    echo "$title: failed (exit $status); its output is above" >&2
    exit "$status"
  fi
}

step "build: every test with every feature, the backends with each store alone, the simulation"
cargo nextest run --workspace --all-features --cargo-quiet --no-run
for feature in s3 r2 minio fs; do
  cargo nextest run -p bucket-lease-backends --no-default-features --features "$feature" \
    --cargo-quiet --no-run
done
bash scripts/simulate.sh --mutants >/dev/null

# The servers: those already started by the caller (.ci/run starts them
# while it lints, and exports .ci/tmp/servers.env), or ours.
if [ -z "${BUCKET_LEASE_TEST_MOTO_URL:-}" ]; then
  step "the test servers"
  own_servers=1
  bash scripts/test-servers.sh start
  set -a
  # shellcheck disable=SC1091
  . .ci/tmp/servers.env
  set +a
fi
export BUCKET_LEASE_REQUIRE_SERVERS=1
# test-servers.sh installed Chromium: the plot test must not skip.
export BUCKET_LEASE_REQUIRE_CHROMIUM=1

# The simulation at idle priority where the kernel allows it, else at
# nice 19: it takes only the CPU the tests leave.
idle=(chrt --idle 0)
"${idle[@]}" true 2>/dev/null || idle=(nice -n 19)
beside "${idle[@]}" bash scripts/simulate.sh --ci
sim_pid=$pid sim_log=$log

# Each store alone, one after another, beside the tests with every feature:
# R2's profile spaces its writes of a key a second apart, so its pass waits
# far more than it computes.
alone() {
  local feature
  for feature in s3 r2 minio fs; do
    echo "== bucket-lease-backends with only the $feature feature"
    cargo nextest run -p bucket-lease-backends --no-default-features --features "$feature" \
      --cargo-quiet --profile ci --test-threads 4
  done
}
# (setsid runs programs, not functions: a bash of its own runs it, with
# -e, so that a failing pass fails the job, not only the last.)
beside bash -c "set -euo pipefail; $(declare -f alone); alone"
alone_pid=$pid alone_log=$log

step "every test with every feature, against every server"
cargo nextest run --workspace --all-features --cargo-quiet --profile ci
step "the command's terminal and file:// tests as a container's processes (a new PID namespace)"
# There the kernel shows the ids of groups and sessions made outside as 0;
# a CI machine's container found a panic on one that no test here had.
if unshare --pid --fork --mount-proc true 2>/dev/null; then
  unshare --pid --fork --mount-proc \
    cargo nextest run --workspace --all-features --cargo-quiet --profile ci \
    -E 'binary(=cli_tty) | binary(=cli_fs)'
else
  echo "note: skipped: \`unshare --pid --fork --mount-proc\` is not allowed here"
fi
step "doctests, every feature"
cargo test --workspace --all-features --doc
step "the core's internals cannot be named without its feature internals (compile-fail doctests)"
cargo test -p bucket-lease-core --doc

collect "the backends with each store alone, which ran beside" "$alone_pid" "$alone_log"
collect "the simulation (scripts/simulate.sh --ci), which ran beside" "$sim_pid" "$sim_log"
background_pids=()

step "the stores' tests find each reintroduced store defect"
bash scripts/check-store-mutants.sh
step "done"
