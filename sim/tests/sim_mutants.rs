//! The checker must be shown to fail: each reintroduced defect is found by
//! the simulation within 2,000 seeds, on a seed the real code passes
//! (feature `mutants`; one test, since a mutant is switched on for the
//! whole process).

use bucket_lease_sim as sim;

#[test]
fn every_mutant_is_found_within_2000_runs() {
    let names = sim::mutant_names();
    assert_eq!(names.len(), 17);
    for name in names {
        let found = (1..=2000u64).find(|&seed| {
            !sim::run(seed, Some(name), false)
                .expect("a known mutant")
                .violations
                .is_empty()
                && sim::run(seed, None, false).unwrap().violations.is_empty()
        });
        assert!(found.is_some(), "mutant {name} not found in 2000 runs");
    }
    // A store that sends after its deadline is found by the store
    // contract's own check, not only through the deadlines of the lease
    // calls above it.
    let outcome = sim::run(1, Some("store-sends-late"), false).expect("a known mutant");
    assert!(
        outcome
            .violations
            .iter()
            .any(|v| v.starts_with("store contract:")),
        "{:?}",
        outcome.violations
    );
    // And the real code is back once no mutant is named.
    assert!(sim::run(1, None, false).unwrap().violations.is_empty());
}
