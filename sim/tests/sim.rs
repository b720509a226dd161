//! The deterministic simulation on the real code: a few hundred seeds with
//! no violation, and one seed replaying one run exactly. The long runs and
//! the mutants are `bash scripts/simulate.sh` (see its usage).

use bucket_lease_sim as sim;

#[test]
fn seeded_runs_break_no_invariant() {
    let mut checked = std::collections::BTreeMap::new();
    for seed in 1..=150 {
        let outcome = sim::run(seed, None, false).expect("the real code runs");
        assert!(
            outcome.violations.is_empty(),
            "{}: {:?}\nreplay: bash scripts/simulate.sh --replay {seed}",
            outcome.setup,
            outcome.violations
        );
        for (kind, n) in outcome.checked {
            *checked.entry(kind).or_insert(0) += n;
        }
    }
    // The seeds reach every check: pointers moved, holders crashed, suspect
    // records met, pools of leases kept, one instance id given to two
    // processes, programs holding two values of one key, one taken again
    // after `Fenced`; keepers on the core's driver warmed up, renewed and
    // released.
    for kind in [
        "write windows",
        "pointer states",
        "crash takeovers",
        "suspect takeovers",
        "pooled leases",
        "shared instance ids",
        "jammed pools",
        "program processes",
        "program: two live values on a key",
        "program: re-acquires after Fenced",
        "keeper warm-ups",
        "keeper renewals",
        "keeper releases",
    ] {
        assert!(
            checked.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} in {checked:?}"
        );
    }
}

#[test]
fn one_seed_replays_one_run() {
    for seed in [7, 1234] {
        let a = sim::run(seed, None, true).expect("runs");
        let b = sim::run(seed, None, true).expect("runs");
        assert!(a.trace.len() > 20, "a trace says what happened");
        assert_eq!(a.trace, b.trace, "seed {seed} replays differently");
    }
}

#[test]
fn a_trace_shows_requests_answers_and_windows() {
    let outcome = sim::run(3, None, true).expect("runs");
    let text = outcome.trace.join("\n");
    for needle in [
        " sends #",
        " answer to #",
        "window opens",
        "window closes",
        "wall clock",
    ] {
        assert!(text.contains(needle), "no {needle:?} in the trace");
    }
}
