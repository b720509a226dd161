//! A handle that outlives its keeping (`kept.rs`: "a handle outliving its
//! keeper answers from the lease"): a `PooledLease` or a `HeldPrefix`
//! stopped after a clone's stop, the pool's remove or stop, the set's stop,
//! a loss, or a renewal in flight answers what the first stop answered
//! (the loss, never `Ok` for a lease lost or fenced), releases nothing more,
//! and never touches a newer lease of its prefix; a prefix given up is
//! free at once and the set hears of it however it was stopped; and no
//! stop waits forever. Each of the first ten schedules was found failing
//! by a review of the handle, then fixed.

mod sets;
use bucket_lease_core::held_set::{HeldPrefix, SetEvent};
use bucket_lease_core::inspect::break_lease;
use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::{
    clock::TestClock, Contender, HeldSet, HeldSetOptions, KeeperPool, KeptLease, LeaseError,
    PoolOptions, Released, Store,
};
use sets::{options, set, taken, TTL_S};
#[path = "gate/mod.rs"]
mod gate;

use gate::{Gated, When};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PREFIX: &str = "db";
const KEY: &str = "db/LEASE";

/// While our lease is held (its record live, no time passed): an operator
/// breaks it (`bucket-lease break`), another instance takes the prefix over
/// and gives it up again. Our record is now another holder's, released:
/// "taken over and freed since the last renewal", a loss by the docs
/// (`Loss::of_release`).
fn taken_over_and_freed(store: &Arc<MemoryStore>, clock: &TestClock, ours: &str) {
    break_lease(&**store, PREFIX, ours, clock).expect("broken");
    let other = Contender::new(Arc::clone(store) as Arc<dyn Store>, PREFIX, options(clock))
        .with_instance_id("other-host")
        .try_acquire()
        .expect("the broken record is taken over");
    assert_eq!(other.release(), Ok(Released::Freed));
}

fn pool(clock: &TestClock, losses: &Arc<AtomicUsize>) -> KeeperPool {
    let losses = Arc::clone(losses);
    KeeperPool::spawn(
        PoolOptions::new()
            .clock(Arc::new(clock.clone()))
            .on_loss(move |_| {
                losses.fetch_add(1, Ordering::SeqCst);
            }),
    )
    .expect("threads start")
}

fn our_lease(store: &Arc<MemoryStore>, clock: &TestClock) -> bucket_lease_core::Lease {
    Contender::new(Arc::clone(store) as Arc<dyn Store>, PREFIX, options(clock))
        .try_acquire()
        .expect("free")
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

// ---------------------------------------------------------------------
// A lease that ended "taken over and freed": the first stop answers Lost;
// a later stop (a clone's, after the pool's remove or stop) answers Ok.

#[test]
fn pooled_clone_stopped_after_a_stop_that_found_the_lease_lost_answers_lost() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let losses = Arc::new(AtomicUsize::new(0));
    let pool = pool(&clock, &losses);
    let first = pool.add(our_lease(&store, &clock));
    let second = first.clone();
    taken_over_and_freed(&store, &clock, first.lease().instance_id());

    let answer = first.stop();
    assert!(
        matches!(answer, Err(LeaseError::Lost { .. })),
        "the first stop: {answer:?}"
    );
    let again = second.stop();
    assert!(
        matches!(again, Err(LeaseError::Lost { .. })),
        "a clone's stop after the lease was lost must not say it was released: {again:?} \
         (the first stop answered {answer:?})"
    );
    pool.stop();
}

#[test]
fn pooled_lease_stopped_after_the_pools_remove_found_it_lost_answers_lost() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let losses = Arc::new(AtomicUsize::new(0));
    let pool = pool(&clock, &losses);
    let held = pool.add(our_lease(&store, &clock));
    taken_over_and_freed(&store, &clock, held.lease().instance_id());

    let removed = pool.remove(held.id());
    assert!(
        matches!(removed, Some(Err(LeaseError::Lost { .. }))),
        "the remove: {removed:?}"
    );
    wait_for("the loss callback", || losses.load(Ordering::SeqCst) == 1);
    let answer = held.stop();
    assert!(
        matches!(answer, Err(LeaseError::Lost { .. })),
        "stop after the pool's remove answered {removed:?} and the loss callback ran: {answer:?}"
    );
    pool.stop();
}

#[test]
fn pooled_lease_stopped_after_the_pools_stop_found_it_lost_answers_lost() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let losses = Arc::new(AtomicUsize::new(0));
    let pool = pool(&clock, &losses);
    let held = pool.add(our_lease(&store, &clock));
    taken_over_and_freed(&store, &clock, held.lease().instance_id());

    let releases = pool.stop();
    assert!(
        matches!(releases.as_slice(), [(_, Err(LeaseError::Lost { .. }))]),
        "the pool's stop: {releases:?}"
    );
    assert_eq!(
        losses.load(Ordering::SeqCst),
        1,
        "the loss callback ran once"
    );
    let answer = held.stop();
    assert!(
        matches!(answer, Err(LeaseError::Lost { .. })),
        "stop after the pool's stop answered {releases:?}: {answer:?}"
    );
}

#[test]
fn held_prefix_clone_stopped_after_a_stop_that_found_the_lease_lost_answers_lost() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let set = set(&store, &clock, &[PREFIX]);
    taken(&set);
    let first = set.get(PREFIX).expect("held");
    let second = first.clone();
    taken_over_and_freed(&store, &clock, first.lease().instance_id());

    let answer = first.stop();
    assert!(
        matches!(answer, Err(LeaseError::Lost { .. })),
        "the first stop: {answer:?}"
    );
    let again = second.stop();
    assert!(
        matches!(again, Err(LeaseError::Lost { .. })),
        "a clone's stop after the lease was lost must not say it was released: {again:?}"
    );
    set.stop();
}

#[test]
fn held_prefix_stopped_after_the_sets_stop_found_it_lost_answers_lost() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let set = set(&store, &clock, &[PREFIX]);
    taken(&set);
    let held = set.get(PREFIX).expect("held");
    taken_over_and_freed(&store, &clock, held.lease().instance_id());

    let releases = set.stop();
    assert!(
        matches!(releases.as_slice(), [(_, Err(LeaseError::Lost { .. }))]),
        "the set's stop: {releases:?}"
    );
    let answer = held.stop();
    assert!(
        matches!(answer, Err(LeaseError::Lost { .. })),
        "stop after the set's stop answered {releases:?}: {answer:?}"
    );
}

#[test]
fn a_later_stop_answers_the_same_loss_as_the_first() {
    // Broken by an operator: the record names the breaker, who is the
    // holder the first stop reports.
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let losses = Arc::new(AtomicUsize::new(0));
    let pool = pool(&clock, &losses);
    let first = pool.add(our_lease(&store, &clock));
    let second = first.clone();
    break_lease(&*store, PREFIX, first.lease().instance_id(), &clock).expect("broken");
    let answer = first.stop();
    assert!(
        matches!(
            &answer,
            Err(LeaseError::Lost {
                holder: Some(_),
                ..
            })
        ),
        "the first stop: {answer:?}"
    );
    let again = second.stop();
    assert_eq!(
        again, answer,
        "answered by the same rule from how the lease ended"
    );
    pool.stop();
}

// ---------------------------------------------------------------------
// A HeldPrefix's pooled lease stopped behind the set's back.

#[test]
fn a_prefix_whose_pooled_lease_was_stopped_is_taken_again() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let set = set(&store, &clock, &[PREFIX]);
    let (_, first_epoch) = taken(&set);
    let held = set.get(PREFIX).expect("held");
    // Public API: the held prefix's lease as the set's pool keeps it, which
    // is a KeptLease of its own.
    assert_eq!(held.pooled().clone().stop(), Ok(Released::Freed));
    assert!(!held.may_write());
    // The record is free: the set must not list a lease it no longer keeps
    // for ever, nor give up the prefix for good.
    // Steps of an eighth of the TTL: its retry comes within three, and the
    // pool renews the new lease on its way, so no step fences it.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        clock.advance(Duration::from_secs(TTL_S) / 8);
        match set.events().recv_timeout(Duration::from_millis(50)) {
            Ok(SetEvent::Taken { epoch, .. }) => {
                assert!(epoch > first_epoch);
                break;
            }
            Ok(_) => {}
            Err(_) => assert!(
                Instant::now() < until,
                "never taken again; the set still lists it: may_write {:?}, record free: {}",
                set.get(PREFIX).map(|h| h.may_write()),
                String::from_utf8_lossy(&store.peek(KEY).unwrap_or_default())
            ),
        }
    }
    assert!(set.get(PREFIX).expect("held again").may_write());
    set.stop();
}

// ---------------------------------------------------------------------
// HeldPrefix::prefix names the prefix as the set does.

#[test]
fn a_held_prefix_is_found_again_by_its_own_prefix() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let set = set(&store, &clock, &["shards/7/"]);
    let (taken_prefix, _) = taken(&set);
    let held = set.held();
    assert_eq!(held.len(), 1);
    assert_eq!(
        held[0].prefix(),
        taken_prefix,
        "as SetEvent::Taken named it"
    );
    assert!(
        set.get(held[0].prefix()).is_some(),
        "set.get(held.prefix())"
    );
    set.stop();
}

// ---------------------------------------------------------------------
// What held (these pass on bd02e89).

#[test]
fn a_stale_held_prefix_does_not_release_the_lease_taken_again() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let set = set(&store, &clock, &[PREFIX]);
    taken(&set);
    let stale = set.get(PREFIX).expect("held");
    let stale_clone = stale.clone();
    // Given up, then taken again by the set a quarter TTL later.
    assert_eq!(stale.stop(), Ok(Released::Freed));
    match set.events().recv_timeout(Duration::from_secs(20)) {
        Ok(SetEvent::Released { released, .. }) => assert_eq!(released, Ok(Released::Freed)),
        other => panic!("expected Released, got {other:?}"),
    }
    let until = Instant::now() + Duration::from_secs(20);
    let new_epoch = loop {
        clock.advance(Duration::from_secs(TTL_S / 4 + 1));
        if let Ok(event) = set.events().recv_timeout(Duration::from_millis(50)) {
            match event {
                SetEvent::Taken { epoch, .. } => break epoch,
                other => panic!("expected Taken, got {other:?}"),
            }
        }
        assert!(Instant::now() < until, "never taken again");
    };
    let fresh = set.get(PREFIX).expect("held again");
    assert_eq!(fresh.epoch(), new_epoch);
    assert_eq!(stale_clone.stop(), Ok(Released::AlreadyFree));
    assert!(fresh.may_write(), "the new lease is untouched");
    assert!(set.get(PREFIX).is_some());
    // And after a loss and a re-take.
    let before = set.get(PREFIX).expect("held");
    break_lease(&*store, PREFIX, before.lease().instance_id(), &clock).expect("broken");
    clock.advance(Duration::from_secs(TTL_S / 3 + 1));
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        clock.advance(Duration::from_secs(1));
        if let Ok(SetEvent::Taken { .. }) = set.events().recv_timeout(Duration::from_millis(50)) {
            break;
        }
        assert!(Instant::now() < until, "never taken again after the loss");
    }
    let after = set.get(PREFIX).expect("held again");
    assert!(matches!(before.stop(), Err(LeaseError::Lost { .. })));
    assert!(after.may_write(), "the stale stop left the new lease alone");
    assert_eq!(set.stop(), vec![(PREFIX.to_string(), Ok(Released::Freed))]);
}

#[test]
fn a_given_up_prefix_is_free_for_another_set_at_once() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    // Two prefixes, so that a second worker's fair share is one.
    let first = set(&store, &clock, &[PREFIX, "other"]);
    taken(&first);
    taken(&first);
    first.get(PREFIX).expect("held").stop().expect("released");
    assert!(first.get(PREFIX).is_none());
    // No time passes: a set started now takes it on its first attempt.
    let second = set(&store, &clock, &[PREFIX, "other"]);
    taken(&second);
    assert!(second.get(PREFIX).expect("held").may_write());
    first.stop();
    second.stop();
}

#[test]
fn held_prefix_stop_racing_the_sets_stop_answers_once_and_frees() {
    for _ in 0..50 {
        let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
        let set = set(&store, &clock, &[PREFIX]);
        taken(&set);
        let held: HeldPrefix = set.get(PREFIX).expect("held");
        let (answer, releases) = std::thread::scope(|s| {
            let a = s.spawn(move || held.stop());
            let b = s.spawn(move || set.stop());
            (a.join().unwrap(), b.join().unwrap())
        });
        let by_set: Vec<_> = releases.iter().map(|(_, r)| r.clone()).collect();
        let freed = [answer.clone()]
            .into_iter()
            .chain(by_set.clone())
            .filter(|r| *r == Ok(Released::Freed))
            .count();
        assert_eq!(freed, 1, "one release freed it: {answer:?} {by_set:?}");
        assert!(
            answer.is_ok(),
            "held to the end, whoever released it: {answer:?}"
        );
        let record = bucket_lease_core::record::LeaseRecord::parse(&store.peek(KEY).unwrap())
            .expect("a record");
        assert!(record.is_released());
    }
}

#[test]
fn stop_of_a_lease_fenced_by_a_wall_clock_step_is_never_ok() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let losses = Arc::new(AtomicUsize::new(0));
    let pool = pool(&clock, &losses);
    let held = pool.add(our_lease(&store, &clock));
    let clone = held.clone();
    clock.step_wall(Duration::from_secs(TTL_S), true);
    assert!(matches!(held.stop(), Err(LeaseError::Fenced { .. })));
    assert!(matches!(clone.stop(), Err(LeaseError::Fenced { .. })));
    wait_for("the loss callback", || losses.load(Ordering::SeqCst) == 1);
    pool.stop();
    assert_eq!(losses.load(Ordering::SeqCst), 1, "told once");

    let set = set(&store, &clock, &["other"]);
    taken(&set);
    let held = set.get("other").expect("held");
    let clone = held.clone();
    clock.step_wall(Duration::from_secs(TTL_S), true);
    assert!(matches!(held.stop(), Err(LeaseError::Fenced { .. })));
    assert!(matches!(clone.stop(), Err(LeaseError::Fenced { .. })));
    set.stop();
}

// ---------------------------------------------------------------------
// SetEvent::Released says what the stop answered.

#[test]
fn set_event_released_carries_what_the_stop_answered() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let set = set(&store, &clock, &[PREFIX]);
    taken(&set);
    let held = set.get(PREFIX).expect("held");
    break_lease(&*store, PREFIX, held.lease().instance_id(), &clock).expect("broken");
    // The pooled lease (public: `HeldPrefix::pooled`) stopped first; the
    // set hears nothing of it.
    let by_pool = held.pooled().clone().stop();
    assert!(
        matches!(by_pool, Err(LeaseError::Lost { .. })),
        "{by_pool:?}"
    );
    let answer = held.stop();
    assert!(matches!(answer, Err(LeaseError::Lost { .. })), "{answer:?}");
    let event = set.events().recv_timeout(Duration::from_secs(20));
    match event {
        Ok(SetEvent::Released { released, .. }) => assert!(
            matches!(released, Err(LeaseError::Lost { .. })),
            "the event says {released:?}; the stop answered {answer:?}"
        ),
        other => panic!("expected Released, got {other:?}"),
    }
    set.stop();
}

// ---------------------------------------------------------------------
// A stop that waits for ever.

#[test]
fn a_loss_callback_that_stops_its_held_prefix_does_not_hang_the_sets_stop() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let slot: Arc<std::sync::Mutex<Option<HeldPrefix>>> = Arc::default();
    let (answers, answered) = crossbeam_channel::unbounded();
    let in_callback = Arc::clone(&slot);
    let set = HeldSet::spawn(
        Arc::clone(&store) as Arc<dyn Store>,
        [PREFIX.to_string()],
        HeldSetOptions::new(options(&clock)).pool(
            PoolOptions::new()
                .clock(Arc::new(clock.clone()))
                .renewal_threads(0)
                // On a loss, stop the prefix's handle for its end-of-life
                // answer (the handle outlives its keeper: kept.rs).
                .on_loss(move |_| {
                    if let Some(held) = in_callback.lock().unwrap().take() {
                        let _ = answers.send(held.stop());
                    }
                }),
        ),
    )
    .expect("threads start");
    taken(&set);
    let held = set.get(PREFIX).expect("held");
    break_lease(&*store, PREFIX, held.lease().instance_id(), &clock).expect("broken");
    *slot.lock().unwrap() = Some(held);
    // The set's stop releases the lease, finds it broken: a loss, told to
    // the callback, which stops the handle.
    let (stopped_tx, stopped) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = stopped_tx.send(set.stop());
    });
    let releases = stopped
        .recv_timeout(Duration::from_secs(30))
        .expect("the set's stop returns");
    assert!(
        matches!(releases.as_slice(), [(_, Err(LeaseError::Lost { .. }))]),
        "{releases:?}"
    );
    let answer = answered
        .recv_timeout(Duration::from_secs(30))
        .expect("the callback's stop returns");
    assert!(matches!(answer, Err(LeaseError::Lost { .. })), "{answer:?}");
}

// ---------------------------------------------------------------------
// Stops while a renewal is in flight (these pass on bd02e89).

#[test]
fn clone_stop_and_pool_remove_during_a_renewal_in_flight_wait_for_it_and_agree() {
    let (memory, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let store = Gated::new(Arc::clone(&memory));
    let losses = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&losses);
    let pool = KeeperPool::spawn(
        PoolOptions::new()
            .clock(Arc::new(clock.clone()))
            .renewal_threads(1)
            .thread_name("kept")
            .on_loss(move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
            }),
    )
    .expect("threads start");
    let lease = Contender::new(
        Arc::clone(&store) as Arc<dyn Store>,
        PREFIX,
        options(&clock),
    )
    .try_acquire()
    .expect("free");
    let held = pool.add(lease);
    let (a, b) = (held.clone(), held.clone());
    let renewal = store.hold("kept-0", 1, When::After);
    let until = Instant::now() + Duration::from_secs(20);
    // The renewal is due at a third of the TTL.
    while clock.pending_timers() == 0 {
        assert!(Instant::now() < until, "the scheduler never waited");
        std::thread::sleep(Duration::from_millis(5));
    }
    clock.advance(Duration::from_secs(TTL_S / 3));
    renewal.wait_reached();
    let (by_a, by_b, removed) = std::thread::scope(|s| {
        let ta = s.spawn(move || a.stop());
        let tb = s.spawn(move || b.stop());
        let tr = s.spawn(|| pool.remove(held.id()));
        // Give them a moment to queue behind the renewal, then let it land.
        std::thread::sleep(Duration::from_millis(200));
        renewal.open();
        (ta.join().unwrap(), tb.join().unwrap(), tr.join().unwrap())
    });
    let all = [by_a, by_b, removed.unwrap_or(Ok(Released::AlreadyFree))];
    assert!(all.iter().all(Result::is_ok), "{all:?}");
    assert_eq!(
        all.iter().filter(|r| **r == Ok(Released::Freed)).count(),
        all.iter()
            .filter(|r| **r != Ok(Released::AlreadyFree))
            .count(),
        "{all:?}"
    );
    let record = bucket_lease_core::record::LeaseRecord::parse(&memory.peek(KEY).unwrap())
        .expect("a record");
    assert!(record.is_released(), "{record:?}");
    assert!(!held.may_write());
    assert_eq!(held.stop(), Ok(Released::AlreadyFree));
    pool.stop();
    assert_eq!(losses.load(Ordering::SeqCst), 0, "no loss told");
}
