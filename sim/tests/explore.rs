//! The exhaustive search on the real code: every schedule of two small
//! scopes breaks no invariant, and one schedule replays exactly. The CI
//! scope and the mutants are `bash scripts/simulate.sh --exhaustive` (see
//! its usage).

use bucket_lease_sim::explore::{case_names, replay, search, Bounds};

#[test]
fn every_schedule_of_a_small_scope_breaks_no_invariant() {
    let scopes = [
        Bounds {
            preemptions: 1,
            faults: 0,
            clock_steps: 1,
        },
        Bounds {
            preemptions: 0,
            faults: 1,
            clock_steps: 0,
        },
    ];
    for bounds in scopes {
        let report = search(bounds, None, false).expect("the real code runs");
        assert_eq!(report.violating, 0, "{bounds:?}: {:#?}", report.found);
        assert_eq!(report.cases.len(), case_names().len(), "every case ran");
        assert!(
            report.schedules > 1000,
            "{bounds:?}: only {} schedules",
            report.schedules
        );
    }
}

#[test]
fn one_schedule_replays_one_run() {
    let bounds = Bounds {
        preemptions: 1,
        faults: 1,
        clock_steps: 1,
    };
    for (case, choices) in [(0, "1"), (6, "0000000000000000000001")] {
        let a = replay(case, choices, bounds, None).expect("replays");
        let b = replay(case, choices, bounds, None).expect("replays");
        assert!(a.0.len() > 20, "a trace says what happened");
        assert_eq!(a, b, "case {case}, schedule {choices} replays differently");
        assert!(a.1.is_empty(), "{:?}", a.1);
    }
    assert!(
        replay(0, "9", bounds, None).is_ok_and(|(_, v)| !v.is_empty()),
        "a choice out of range is a replay that did not follow its choices"
    );
}
