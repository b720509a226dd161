//! (Feature `mutants`.) The exhaustive search finds each reintroduced
//! defect of the catalogue that its scope can show, within bounds of no
//! preemption, one fault and one clock step; the CI scope's count for
//! each is `bash scripts/simulate.sh --exhaustive --check-mutants`.

use bucket_lease_sim::explore::{out_of_scope, search, Bounds};
use bucket_lease_sim::mutant_names;

/// One test: the mutant switched on is the whole process's.
#[test]
fn the_search_finds_each_mutant_in_its_scope() {
    let bounds = Bounds {
        preemptions: 0,
        faults: 1,
        clock_steps: 1,
    };
    let mut missed = Vec::new();
    for name in mutant_names() {
        if out_of_scope(name).is_some() {
            continue;
        }
        let report = search(bounds, Some(name), true).expect("the mutant runs");
        if report.first.is_none() {
            missed.push(name);
        }
    }
    search(Bounds::default(), None, true).expect("back to the real code");
    assert!(missed.is_empty(), "not found: {missed:?}");
}
