//! (Feature `mutants`.) The store contract's own check is shown to fail: a
//! store that sends after its deadline is found by it, not only through
//! the deadlines of the lease calls above it. That each mutant of the
//! catalogue is found within 2,000 seeds, on a seed the real code passes,
//! is `bash scripts/simulate.sh --check-mutants` (in CI, on the optimised
//! build: `bash scripts/simulate.sh --ci`). One test, since a mutant is
//! switched on for the whole process.

use bucket_lease_sim as sim;

#[test]
fn a_store_sending_late_breaks_the_store_contract() {
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
