//! Renewals and releases of one lease on several threads, as a second
//! review tried them (issue 28): a release whose look fails after our own
//! renewal moved the record, a keeper that reported `Fenced` while the
//! program's own renewal landed late (each failed before its fix), and
//! schedules that held.

mod gate;

use bucket_lease_core::KeptLease;
use bucket_lease_core::{Event, Keeper, KeeperOptions, LeaseError, Released};
use gate::{secs, spawn_named, When, World, NAME};
use std::sync::Arc;
use std::time::Duration;

/// The schedule of concurrent_calls' second test, but the release's look
/// after its refused write fails (one transient GET failure). Our own
/// renewal moved the record; it is still ours and live. The release
/// answers `Ok(LeftAlone { holder: None })` ("the record was not ours (any
/// more)") instead of the store error its docs promise, so the caller (a
/// Keeper's stop, run_while_held) believes it is not ours and the key stays
/// held by our live record for a full TTL.
#[test]
fn a_release_whose_look_fails_after_our_renewal_moved_the_record_says_left_alone() {
    let w = World::new();
    let lease = w.lease_with_an_unseen_version();
    let r_adopt = w.store.hold("renew", 2, When::Before);
    let x_write = w.store.hold("release", 2, When::Before);
    let x_answer = w.store.hold("release", 2, When::After);
    let released = std::thread::scope(|s| {
        let r = spawn_named(s, "renew", || lease.renew());
        r_adopt.wait_reached(); // the renewal checked Held, about to adopt our record
        let x = spawn_named(s, "release", || lease.release());
        x_write.wait_reached(); // the release read our record, about to free it
        r_adopt.open();
        let _ = r.join().unwrap(); // the renewal's write landed: our record moved
        x_write.open();
        x_answer.wait_reached(); // the release's write was refused on the moved version
        w.memory.fail_next_requests(1); // its look fails
        x_answer.open();
        x.join().unwrap()
    });
    let rec = w.record();
    assert!(
        rec.instance_id == NAME && !rec.is_released(),
        "setup: our record is still live: {rec:?}"
    );
    assert!(
        !matches!(released, Ok(Released::LeftAlone { holder: None, .. })),
        "the release said LeftAlone (not ours any more) while our own record is live; \
         the other process sees: {:?}",
        w.other_process().try_acquire().map(|l| l.epoch())
    );
}

/// Held: a renewal whose answer was lost, then a release: the release
/// finds our record at the unseen version and frees it.
#[test]
fn a_renewal_whose_answer_was_lost_then_a_release_frees_the_record() {
    let w = World::new();
    let lease = w.ours().try_acquire().expect("taken");
    w.memory.lose_next_answers(1);
    lease.renew().expect_err("answer lost");
    assert_eq!(lease.release(), Ok(Released::Freed));
    assert!(w.record().is_released());
    assert!(!lease.may_write());
}

/// Held: a release racing a renewal inside put_retrying's conflict
/// retries, the retry held before it lands (release wins) and after it
/// landed (renewal wins, release swaps again).
#[test]
fn a_release_racing_a_renewal_in_its_conflict_retries_frees_the_record() {
    for when in [When::Before, When::After] {
        let w = World::new();
        let lease = w.ours().try_acquire().expect("taken");
        w.memory.conflict_next_writes(1);
        let retry = w.store.hold("renew", 2, when);
        let released = std::thread::scope(|s| {
            let r = spawn_named(s, "renew", || lease.renew());
            retry.wait_reached();
            let x = spawn_named(s, "release", || lease.release());
            // Before: the release's write lands first, the retry is refused.
            // After: the retry landed; the release is refused on the moved
            // version, reads our record and swaps again.
            let released = x.join().unwrap();
            retry.open();
            let renewed = r.join().unwrap();
            assert!(renewed.is_err(), "{when:?}: {renewed:?}");
            released
        });
        assert_eq!(released, Ok(Released::Freed), "{when:?}");
        assert!(w.record().is_released(), "{when:?}: {:?}", w.record());
        let _ = w.other_process().try_acquire().expect("free to all");
    }
}

/// Held: three threads on one Arc'd lease: a renewal held after it landed
/// (answer late), a release, and a thread dropping its clone; the last
/// drop happens after both. The record ends released, the renewal fails.
#[test]
fn renewal_release_and_drop_on_three_threads() {
    let w = World::new();
    let lease = Arc::new(w.ours().try_acquire().expect("taken"));
    let late = w.store.hold("renew", 1, When::After);
    std::thread::scope(|s| {
        let l1 = Arc::clone(&lease);
        let r = spawn_named(s, "renew", move || l1.renew());
        late.wait_reached();
        let l2 = Arc::clone(&lease);
        let x = spawn_named(s, "release", move || l2.release());
        let l3 = Arc::clone(&lease);
        let d = spawn_named(s, "drop", move || drop(l3));
        d.join().unwrap();
        assert_eq!(x.join().unwrap(), Ok(Released::Freed));
        late.open();
        assert!(r.join().unwrap().is_err());
    });
    drop(lease);
    assert!(w.record().is_released());
}

/// A keeper whose renewal at t=10 s meets the program's own renewal (sent
/// at t=9 s, landed, its answer late until after the write deadline).
/// The keeper retries (RenewalInProgress) and reports Fenced at the
/// deadline, on time. Then the program's renewal answers and the keeper's
/// lease says may_write again, though the keeper has reported Fenced
/// ("writes must stop") and renews no more; it fences again silently 2/3
/// TTL after the manual renewal's start, with no second event. Safe for
/// exclusion (the record was renewed at 9 s), but Keeper::may_write
/// contradicts the event; Holding guards this with stop_seen, Keeper does
/// not. The part up to the fence (on time, 20 s) held. Real-time pacing
/// (30 ms a step) makes the fence instant approximate on a loaded machine.
#[test]
fn keeper_says_may_write_after_reporting_fenced_when_a_manual_renewal_lands_late() {
    let w = World::new();
    let keeper = Keeper::spawn(w.ours().try_acquire().expect("taken"), KeeperOptions::new())
        .expect("keeper");
    let late = w.store.hold("manual", 1, When::After);
    let mut events = Vec::new();
    std::thread::scope(|s| {
        w.clock.advance(secs(9));
        let lease = Arc::clone(keeper.lease());
        let m = spawn_named(s, "manual", move || lease.renew());
        late.wait_reached();
        // 9.5 s .. 21 s, a step at a time so that the keeper's retries run.
        for _ in 1..=24 {
            w.clock.advance(Duration::from_millis(500));
            std::thread::sleep(Duration::from_millis(10));
        }
        loop {
            let e = keeper
                .events()
                .recv_timeout(Duration::from_secs(10))
                .expect("the keeper reports Fenced within 10 s");
            let fenced = e == Event::Fenced;
            events.push(e);
            if fenced {
                break;
            }
        }
        assert!(events.iter().any(|e| matches!(
            e,
            Event::RenewalFailed {
                error: LeaseError::RenewalInProgress { .. },
                ..
            }
        )));
        late.open();
        // Its write landed; the lease, fenced for good, takes nothing of it.
        let manual = m.join().unwrap();
        assert!(
            matches!(manual, Err(LeaseError::Fenced { .. })),
            "{manual:?}"
        );
    });
    assert!(
        !keeper.may_write(),
        "the keeper reported Fenced (\"writes must stop\") and renews no more, yet may_write is \
         true again: {events:?}"
    );
}
