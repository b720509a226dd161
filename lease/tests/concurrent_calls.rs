//! Two threads calling one lease at once, ordered exactly with a store
//! that holds chosen requests (before they reach the store, or after they
//! landed but before their answer returns). Found by review (issue 28):
//! both failed before their fix. On the in-memory store with a test clock.

mod gate;

use bucket_lease_core::{LeaseError, Released};
use gate::{secs, spawn_named, When, World};

/// Renewal B takes its instant at t=5 s and its request is slow to go out;
/// renewal A starts at t=20 s. Before, A landed first with a late answer,
/// B's reconcile wrote its t=5 s body over A's record, and A's answer then
/// dated the fence from 20 s: the holder could write until 40 s while the
/// record expired at 35 s. Now renewals take turns: A sends nothing.
#[test]
fn two_renewals_at_once_never_let_the_holder_write_past_its_record() {
    let w = World::new();
    let lease = w.ours().try_acquire().expect("taken at t=0");
    let b_paused = w.store.hold("renew-b", 1, When::Before);
    std::thread::scope(|s| {
        w.clock.advance(secs(5));
        let b = spawn_named(s, "renew-b", || lease.renew());
        b_paused.wait_reached(); // B took its instant at t=5 s
        w.clock.advance(secs(15));
        let a = spawn_named(s, "renew-a", || lease.renew());
        match a.join().unwrap() {
            Err(e @ LeaseError::RenewalInProgress { .. }) => {
                assert!(e.to_string().contains("one thread at a time"), "{e}");
            }
            other => panic!("A went on beside B: {other:?}"),
        }
        b_paused.open();
        b.join().unwrap().expect("B renews");
    });
    // t=36 s: the record was renewed at 5 s, so it is stale to everyone.
    w.clock.advance(secs(16));
    let other = w
        .other_process()
        .try_acquire()
        .expect("the record is stale by its own stamp");
    assert!(other.may_write());
    assert!(
        !lease.may_write(),
        "two writers: the old holder may still write while the record it left was taken over \
         at epoch {}",
        other.epoch()
    );
}

/// A renewal and a release of one lease at once, after a renewal whose
/// answer was lost (the record is ours at a version the lease does not
/// know). Both are refused on the old version and read the record; the
/// renewal's reconciling write lands between the release's read and its
/// write. Before, the release reported `LeftAlone` naming this very
/// holder, and our record stayed live for a full TTL.
#[test]
fn a_release_racing_a_reconciling_renewal_still_frees_our_record() {
    let w = World::new();
    let lease = w.lease_with_an_unseen_version();
    let r_adopt = w.store.hold("renew", 2, When::Before);
    let x_reread = w.store.hold("release", 2, When::Before);
    let released = std::thread::scope(|s| {
        let r = spawn_named(s, "renew", || lease.renew());
        r_adopt.wait_reached(); // the renewal read our record, about to adopt it
        let x = spawn_named(s, "release", || lease.release());
        x_reread.wait_reached(); // the release read it too, about to free it
        r_adopt.open();
        let _ = r.join().unwrap();
        x_reread.open();
        x.join().unwrap()
    });
    assert!(!lease.may_write());
    assert_eq!(released, Ok(Released::Freed));
    assert!(w.record().is_released(), "{:?}", w.record());
    let other = w
        .other_process()
        .try_acquire()
        .expect("a released record is free to all");
    assert!(other.may_write());
}

/// Control: the same renewals one after the other keep the record ahead
/// of the fence.
#[test]
fn renewals_one_after_another_keep_the_record_ahead_of_the_fence() {
    let w = World::new();
    let lease = w.ours().try_acquire().expect("taken");
    w.clock.advance(secs(5));
    lease.renew().unwrap();
    w.clock.advance(secs(15));
    lease.renew().unwrap();
    w.clock.advance(secs(16));
    assert!(matches!(
        w.other_process().try_acquire(),
        Err(LeaseError::Held { .. })
    ));
    assert!(lease.may_write());
}
