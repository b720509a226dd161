#!/usr/bin/env bash
# The deterministic simulation of the lease (the crate bucket-lease-sim in
# sim/, not published), built in release mode.
#
# usage: bash scripts/simulate.sh --ci             what CI runs (scripts/test.sh): 10,000 seeds,
#                                                   each mutant found within 2,000, the exhaustive
#                                                   search at CI's bounds, and each mutant found by
#                                                   it with no preemption
#        bash scripts/simulate.sh RUNS [MUTANT]     RUNS seeded runs (seeds 1..RUNS;
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
# command that replays it. One build serves every use: the sim crate with
# its `mutants` feature, in the `sim` profile (optimised, no whole-program
# LTO). A mutant is switched on at run time by its name; with none named,
# no mutant's branch is taken and the code is the real code.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  --ci)
    self=$0
    echo "== the deterministic simulation: 10,000 seeds on the real code"
    bash "$self" 10000
    echo "== the simulation finds each reintroduced defect within 2,000 seeds"
    bash "$self" --check-mutants 2000
    echo "== the exhaustive search: every schedule of a small scope on the real code"
    bash "$self" --exhaustive
    echo "== the exhaustive search finds each mutant its scope can show, with no preemption"
    bash "$self" --exhaustive --preemptions 0 --faults 1 --clock-steps 1 --check-mutants
    exit 0
    ;;
  "") echo "usage: bash scripts/simulate.sh --ci | RUNS [MUTANT] | --mutants | --replay SEED [MUTANT] | --check-mutants [RUNS] | --exhaustive [BOUNDS] [--by-case | --check-mutants | --replay CASE CHOICES [MUTANT]]" >&2; exit 2 ;;
esac

cargo build --quiet --profile sim -p bucket-lease-sim --features mutants --bin bucket-lease-sim
exec "${CARGO_TARGET_DIR:-target}/sim/bucket-lease-sim" "$@"
