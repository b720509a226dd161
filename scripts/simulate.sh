#!/usr/bin/env bash
# The deterministic simulation of the lease (the crate bucket-lease-sim in
# sim/, not published), built in release mode.
#
# usage: bash scripts/simulate.sh RUNS [MUTANT]     RUNS seeded runs (seeds 1..RUNS;
#                                                   SIM_FIRST_SEED=N starts at N)
#        bash scripts/simulate.sh --mutants          the mutant names, one a line
#        bash scripts/simulate.sh --replay SEED [MUTANT]   the trace of one run
#        bash scripts/simulate.sh --check-mutants [RUNS]   each mutant found within RUNS (2000),
#                                                          by a seed the real code passes
#        bash scripts/simulate.sh --exhaustive [BOUNDS] [--by-case]   every schedule of a small
#                                                   scope (sim/src/explore.rs); BOUNDS:
#                                                   --preemptions N --faults N --clock-steps N
#                                                   (default 1 1 1, CI's); last line
#                                                   "exhaustive: N schedules, depth D, V violations, S s"
#        bash scripts/simulate.sh --exhaustive [BOUNDS] --check-mutants   each mutant the scope
#                                                   can show found, and after how many schedules
#        bash scripts/simulate.sh --exhaustive [BOUNDS] --replay CASE CHOICES [MUTANT]
#                                                   the trace of one schedule
#
# The last line of a batch is "simulation: R runs, V violations"; the exit
# status is non-zero when V > 0. Each failing seed is printed with the
# command that replays it. The unmutated code is built without the sim
# crate's `mutants` feature; a mutant (and --mutants, --check-mutants) with it,
# in a target directory of its own so the two builds do not evict each other.
set -euo pipefail
cd "$(dirname "$0")/.."

needs_mutants=0
case "${1:-}" in
  --mutants | --check-mutants) needs_mutants=1 ;;
  --exhaustive)
    # A mutant: --check-mutants, or a replay naming one after its choices.
    args=("$@")
    for i in "${!args[@]}"; do
      case "${args[$i]}" in
        --check-mutants) needs_mutants=1 ;;
        --replay) [ -n "${args[$((i + 3))]:-}" ] && needs_mutants=1 ;;
      esac
    done
    ;;
  --replay) [ -n "${3:-}" ] && needs_mutants=1 ;;
  "") echo "usage: bash scripts/simulate.sh RUNS [MUTANT] | --mutants | --replay SEED [MUTANT] | --check-mutants [RUNS] | --exhaustive [BOUNDS] [--by-case | --check-mutants | --replay CASE CHOICES [MUTANT]]" >&2; exit 2 ;;
  *) [ -n "${2:-}" ] && needs_mutants=1 ;;
esac

if [ "$needs_mutants" = 1 ]; then
  features=(--features mutants)
  target="${CARGO_TARGET_DIR:-target}/sim-mutants"
else
  features=()
  target="${CARGO_TARGET_DIR:-target}/sim"
fi
CARGO_TARGET_DIR="$target" cargo build --quiet --release -p bucket-lease-sim \
  ${features[@]+"${features[@]}"} --bin bucket-lease-sim
exec "$target/release/bucket-lease-sim" "$@"
