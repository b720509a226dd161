//! The pool's and the keeper's loss contract in the schedules a review
//! found wrong: a remove or stop that waits on a renewal which ends the
//! lease, a lease fenced by a stepped wall clock, two removes of one id.
//! Whatever the timing, a lease that ended never stops as a clean release.
//! Each test names the promise it checks.

use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::pool::{KeeperPool, PoolEvent, PoolOptions};
use bucket_lease_core::record::{format_stamp, LeaseRecord};
use bucket_lease_core::KeptLease;
use bucket_lease_core::{
    clock::Clock, clock::TestClock, store::DeleteMode, store::Object, store::PutOptions,
    store::StoreErrorKind, store::Version, Contender, Event, Keeper, KeeperOptions, Lease,
    LeaseError, LeaseOptions, Loss, Store, StoreError,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TTL_S: u64 = 3;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Wait (in real time, at most `patience`) until `ready()`; whether it was.
fn real_wait(patience: Duration, ready: impl Fn() -> bool) -> bool {
    let until = Instant::now() + patience;
    while !ready() {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// A memory store whose PUTs, while `closed`, wait (in real time) until it
/// opens again, then go through; `waiting` counts the PUTs held now.
#[derive(Debug, Default)]
struct Gate {
    inner: MemoryStore,
    closed: AtomicBool,
    waiting: AtomicUsize,
}

impl Store for Gate {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }
    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        if self.closed.load(Ordering::SeqCst) {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            while self.closed.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(2));
            }
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
        self.inner.put(key, body, options)
    }
    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.inner.delete(key, mode, d)
    }
}

/// A store on a test clock whose PUTs, once `hang` is set, are held until
/// their deadline on that clock and then time out.
#[derive(Debug)]
struct HangUntilDeadline {
    inner: MemoryStore,
    clock: TestClock,
    hang: AtomicBool,
    held: AtomicUsize,
}

impl Store for HangUntilDeadline {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }
    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        if !self.hang.load(Ordering::SeqCst) {
            return self.inner.put(key, body, options);
        }
        if let Some(d) = options.deadline {
            self.held.fetch_add(1, Ordering::SeqCst);
            let _ = self.clock.timer(d).recv();
            self.held.fetch_sub(1, Ordering::SeqCst);
        }
        Err(StoreError::new(StoreErrorKind::Transport, "PUT", key).timed_out())
    }
    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.inner.delete(key, mode, d)
    }
}

/// Whatever a test ends with, the gate opens before the pool is dropped, so
/// a failed assertion cannot leave the pool's stop waiting for ever.
struct Open<'a>(&'a Gate);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.closed.store(false, Ordering::SeqCst);
    }
}

fn take_on(store: &Arc<dyn Store>, prefix: &str, clock: &TestClock) -> Lease {
    let options = LeaseOptions::new(TTL_S).clock(Arc::new(clock.clone()));
    Contender::new(Arc::clone(store), prefix, options)
        .try_acquire()
        .expect("a free prefix is taken")
}

/// Every event seen within `quiet` of real time.
fn drain(events: &crossbeam_channel::Receiver<PoolEvent>, quiet: Duration) -> Vec<PoolEvent> {
    let mut seen = Vec::new();
    while let Ok(e) = events.recv_timeout(quiet) {
        seen.push(e);
    }
    seen
}

/// Module docs of pool.rs: "`remove` of its id, before or after it left,
/// returns the loss". Two `remove` calls of one lost lease while its
/// auto-release is in flight: the scheduler keeps one answer channel per
/// id (`removers.insert` replaces the first), so the first caller is
/// answered `None` ("the pool does not hold it") at once, while the lease
/// is still in the pool, and never hears of the loss.
#[test]
fn two_removes_of_a_lost_lease_while_it_leaves_both_get_the_loss() {
    let clock = TestClock::new();
    let gate = Arc::new(Gate::default());
    let store: Arc<dyn Store> = Arc::clone(&gate) as Arc<dyn Store>;
    let pool = Arc::new(
        KeeperPool::spawn(
            PoolOptions::new()
                .renewal_threads(2)
                .clock(Arc::new(clock.clone())),
        )
        .expect("threads start"),
    );
    let lease = pool.add(take_on(&store, "a", &clock));
    let id = lease.id();
    let _open = Open(&gate);
    // A refused write elsewhere marks it lost; the pool sees it at its next
    // wake and releases it, and that release's PUT waits at the gate.
    assert!(real_wait(secs(5), || clock.pending_timers() >= 1));
    gate.closed.store(true, Ordering::SeqCst);
    lease.lease().mark_lost(None);
    clock.advance(secs(1));
    assert!(
        real_wait(secs(5), || gate.waiting.load(Ordering::SeqCst) == 1),
        "the lost lease's release is in flight"
    );
    assert_eq!(pool.len(), 1, "still leaving");
    let first = {
        let pool = Arc::clone(&pool);
        std::thread::spawn(move || pool.remove(id))
    };
    std::thread::sleep(Duration::from_millis(200));
    let second = {
        let pool = Arc::clone(&pool);
        std::thread::spawn(move || pool.remove(id))
    };
    std::thread::sleep(Duration::from_millis(200));
    gate.closed.store(false, Ordering::SeqCst);
    let first = first.join().unwrap();
    let second = second.join().unwrap();
    assert!(
        matches!(second, Some(Err(LeaseError::Lost { .. }))),
        "second: {second:?}"
    );
    assert!(
        matches!(first, Some(Err(LeaseError::Lost { .. }))),
        "a remove of a lost lease still in the pool must return its loss, got {first:?}"
    );
}

/// Module docs of pool.rs: "`remove` of its id, before or after it left,
/// returns the loss". A lost lease that left by itself answers every later
/// `remove` with its loss (the `departed` map); but one whose leaving met
/// a `remove` is not kept there, so a `remove` after it left answers
/// `None`, as for an id never held. (Low severity: which answer a later
/// `remove` gets depends on whether an earlier one raced the release.)
#[test]
fn a_remove_after_a_lost_lease_left_returns_the_loss_even_if_one_was_in_flight() {
    let clock = TestClock::new();
    let gate = Arc::new(Gate::default());
    let store: Arc<dyn Store> = Arc::clone(&gate) as Arc<dyn Store>;
    let pool = KeeperPool::spawn(
        PoolOptions::new()
            .renewal_threads(2)
            .clock(Arc::new(clock.clone())),
    )
    .expect("threads start");
    let lease = pool.add(take_on(&store, "a", &clock));
    let id = lease.id();
    let _open = Open(&gate);
    assert!(real_wait(secs(5), || clock.pending_timers() >= 1));
    gate.closed.store(true, Ordering::SeqCst);
    lease.lease().mark_lost(None);
    clock.advance(secs(1));
    assert!(real_wait(secs(5), || gate.waiting.load(Ordering::SeqCst) == 1));
    std::thread::scope(|s| {
        let during = s.spawn(|| pool.remove(id));
        std::thread::sleep(Duration::from_millis(200));
        gate.closed.store(false, Ordering::SeqCst);
        let during = during.join().unwrap();
        assert!(
            matches!(during, Some(Err(LeaseError::Lost { .. }))),
            "{during:?}"
        );
    });
    assert_eq!(pool.len(), 0, "it left");
    let after = pool.remove(id);
    assert!(
        matches!(after, Some(Err(LeaseError::Lost { .. }))),
        "a remove after the lost lease left must return its loss, got {after:?}"
    );
}

/// Module docs of pool.rs: "Each lease is kept as a `Keeper` would keep
/// it" and "a result that cannot be taken for a clean release"; keeper.rs:
/// "`Keeper::stop` after the lease was fenced ... returns that". A
/// `remove` that has to wait for a renewal hanging until the write
/// deadline: the lease is fenced at that deadline (may_write() false), but
/// the pool skips the fence of a lease being removed, sends no `Fenced`,
/// calls no loss callback, releases the record and answers `Ok(Freed)`. A
/// `Keeper` stopped in the same state answers `Err(Fenced)` (see the
/// control test below).
#[test]
fn a_remove_waiting_on_a_renewal_that_hangs_past_the_fence_returns_fenced() {
    let clock = TestClock::new();
    let hang = Arc::new(HangUntilDeadline {
        inner: MemoryStore::new(),
        clock: clock.clone(),
        hang: AtomicBool::new(false),
        held: AtomicUsize::new(0),
    });
    let store: Arc<dyn Store> = Arc::clone(&hang) as Arc<dyn Store>;
    let losses = Arc::new(Mutex::new(Vec::new()));
    let heard = Arc::clone(&losses);
    let pool = KeeperPool::spawn(
        PoolOptions::new()
            .renewal_threads(2)
            .clock(Arc::new(clock.clone()))
            .on_loss(move |loss| heard.lock().unwrap().push(loss.clone())),
    )
    .expect("threads start");
    let lease = pool.add(take_on(&store, "a", &clock));
    let deadline = lease.write_deadline().unwrap();
    hang.hang.store(true, Ordering::SeqCst);
    assert!(real_wait(secs(5), || clock.pending_timers() >= 1));
    // The renewal at 1 s hangs until the write deadline at 2 s.
    clock.advance(secs(1));
    assert!(real_wait(secs(5), || hang.held.load(Ordering::SeqCst) == 1));
    let removed = std::thread::scope(|s| {
        let removing = s.spawn(|| pool.remove(lease.id()));
        std::thread::sleep(Duration::from_millis(200));
        // The release itself goes through.
        hang.hang.store(false, Ordering::SeqCst);
        clock.advance(deadline - clock.now());
        removing.join().unwrap()
    });
    assert!(!lease.may_write());
    let events: Vec<Event> = drain(pool.events(), Duration::from_millis(300))
        .into_iter()
        .map(|e| e.event)
        .collect();
    let heard = losses.lock().unwrap().len();
    assert!(
        matches!(removed, Some(Err(LeaseError::Fenced { .. }))),
        "the lease was fenced while the remove waited, yet remove answered {removed:?} \
         (events {events:?}, {heard} loss callback(s))"
    );
}

/// The control for the test above: a `Keeper` stopped while its renewal
/// hangs until the write deadline answers `Err(Fenced)`, with a `Fenced`
/// event. (Passes.)
#[test]
fn control_a_keeper_stopped_during_a_renewal_that_hangs_past_the_fence_says_fenced() {
    let clock = TestClock::new();
    let hang = Arc::new(HangUntilDeadline {
        inner: MemoryStore::new(),
        clock: clock.clone(),
        hang: AtomicBool::new(false),
        held: AtomicUsize::new(0),
    });
    let store: Arc<dyn Store> = Arc::clone(&hang) as Arc<dyn Store>;
    let keeper = Keeper::spawn(take_on(&store, "a", &clock), KeeperOptions::new()).unwrap();
    let deadline = keeper.write_deadline().unwrap();
    hang.hang.store(true, Ordering::SeqCst);
    assert!(real_wait(secs(5), || clock.pending_timers() >= 1));
    clock.advance(secs(1));
    assert!(real_wait(secs(5), || hang.held.load(Ordering::SeqCst) == 1));
    let events = keeper.events().clone();
    let stopped = std::thread::scope(|s| {
        let stopping = s.spawn(|| keeper.stop());
        std::thread::sleep(Duration::from_millis(200));
        hang.hang.store(false, Ordering::SeqCst);
        clock.advance(deadline - clock.now());
        stopping.join().unwrap()
    });
    assert!(
        matches!(stopped, Err(LeaseError::Fenced { .. })),
        "{stopped:?}"
    );
    assert!(events.try_iter().any(|e| e == Event::Fenced));
}

/// keeper.rs: "`Keeper::stop` after the lease was fenced or lost returns
/// that ... so `keeper.stop()?` fails for a job that did not hold the lease
/// to its end". The wall clock steps forward past the fence (the lease's
/// own status says Fenced, may_write() is false: "ends ... on the
/// monotonic and the wall clock both"); the keeper notices only at its
/// next wake-up, and a stop before then answers `Ok(Freed)`. `hold.rs`
/// reads the status at return for exactly this reason; `Keeper::stop`
/// does not.
#[test]
fn a_keeper_stopped_after_the_wall_clock_fenced_its_lease_does_not_say_ok() {
    let clock = TestClock::new();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let keeper = Keeper::spawn(take_on(&store, "a", &clock), KeeperOptions::new()).unwrap();
    assert!(real_wait(secs(5), || clock.pending_timers() >= 1));
    clock.step_wall(secs(TTL_S), true);
    assert!(!keeper.may_write(), "fenced by the wall clock");
    let stopped = keeper.stop();
    assert!(
        matches!(stopped, Err(LeaseError::Fenced { .. })),
        "a lease fenced when stopped was not held to the end, yet stop answered {stopped:?}"
    );
}

/// The same for a pool: pool.rs "a result that cannot be taken for a clean
/// release". A lease fenced by the wall clock (may_write() false) and
/// removed before the scheduler's next wake is answered `Ok(Freed)`, with
/// no `Fenced` event and no loss callback.
#[test]
fn a_pooled_lease_removed_after_the_wall_clock_fenced_it_is_not_ok() {
    let clock = TestClock::new();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let losses = Arc::new(AtomicUsize::new(0));
    let heard = Arc::clone(&losses);
    let pool = KeeperPool::spawn(PoolOptions::new().clock(Arc::new(clock.clone())).on_loss(
        move |_| {
            heard.fetch_add(1, Ordering::SeqCst);
        },
    ))
    .expect("threads start");
    let lease = pool.add(take_on(&store, "a", &clock));
    assert!(real_wait(secs(5), || clock.pending_timers() >= 1));
    clock.step_wall(secs(TTL_S), true);
    assert!(!lease.may_write(), "fenced by the wall clock");
    let removed = pool.remove(lease.id());
    assert!(
        matches!(removed, Some(Err(LeaseError::Fenced { .. }))),
        "a lease fenced when removed, yet remove answered {removed:?} ({} loss callback(s))",
        losses.load(Ordering::SeqCst)
    );
}

/// Write a live record of another holder, "usurper", over `key`.
fn usurp(gate: &Gate, clock: &TestClock, key: &str) {
    let now = format_stamp(clock.wall());
    let usurper = LeaseRecord::new("usurper", now.clone(), now, 30, 2);
    gate.inner.insert(key, &usurper.to_bytes());
}

/// Module docs of pool.rs: "A lease fenced or lost is reported once
/// ([`Event::Lost`]) ... `remove` of its id ... returns the loss"; "Each
/// lease is kept as a `Keeper` would keep it". A `remove` that waits for a
/// renewal in flight, which then finds the record taken over: the lease is
/// lost, but no `Lost` event is ever sent (`finish` records the loss and
/// goes straight to the release, never through `end`), and `remove`
/// answers `Ok(LeftAlone { holder: Some("usurper") })`, an `Ok`, where a
/// `Keeper` stopped in the same state sends `Lost` and answers
/// `Err(Lost)` (control below).
#[test]
fn a_lease_lost_by_the_renewal_a_remove_waits_for_is_reported_lost() {
    let clock = TestClock::new();
    let gate = Arc::new(Gate::default());
    let store: Arc<dyn Store> = Arc::clone(&gate) as Arc<dyn Store>;
    let pool = KeeperPool::spawn(
        PoolOptions::new()
            .renewal_threads(2)
            .clock(Arc::new(clock.clone())),
    )
    .expect("threads start");
    let lease = pool.add(take_on(&store, "a", &clock));
    let _open = Open(&gate);
    assert!(real_wait(secs(5), || clock.pending_timers() >= 1));
    // The renewal at 1 s waits at the gate; meanwhile another holder takes
    // the record (a takeover after a stall, say).
    gate.closed.store(true, Ordering::SeqCst);
    clock.advance(secs(1));
    assert!(real_wait(secs(5), || gate.waiting.load(Ordering::SeqCst) == 1));
    usurp(&gate, &clock, "a/LEASE");
    let removed = std::thread::scope(|s| {
        let removing = s.spawn(|| pool.remove(lease.id()));
        std::thread::sleep(Duration::from_millis(200));
        gate.closed.store(false, Ordering::SeqCst);
        removing.join().unwrap()
    });
    assert!(!lease.may_write());
    let events: Vec<Event> = drain(pool.events(), Duration::from_millis(300))
        .into_iter()
        .map(|e| e.event)
        .collect();
    let lost_events = events
        .iter()
        .filter(|e| matches!(e, Event::Lost { .. }))
        .count();
    assert!(
        lost_events == 1 && matches!(removed, Some(Err(LeaseError::Lost { .. }))),
        "the lease was lost to \"usurper\" while the remove waited: expected one Lost \
         event and Err(Lost), got events {events:?} and remove {removed:?}"
    );
}

/// The control for the test above: a `Keeper` stopped while its renewal
/// is in flight, the record taken over meanwhile, sends `Lost` and answers
/// `Err(Lost)`. (Passes.)
#[test]
fn control_a_keeper_stopped_during_a_renewal_that_finds_a_takeover_says_lost() {
    let clock = TestClock::new();
    let gate = Arc::new(Gate::default());
    let store: Arc<dyn Store> = Arc::clone(&gate) as Arc<dyn Store>;
    let keeper = Keeper::spawn(take_on(&store, "a", &clock), KeeperOptions::new()).unwrap();
    let _open = Open(&gate);
    assert!(real_wait(secs(5), || clock.pending_timers() >= 1));
    gate.closed.store(true, Ordering::SeqCst);
    clock.advance(secs(1));
    assert!(real_wait(secs(5), || gate.waiting.load(Ordering::SeqCst) == 1));
    usurp(&gate, &clock, "a/LEASE");
    let events = keeper.events().clone();
    let stopped = std::thread::scope(|s| {
        let stopping = s.spawn(|| keeper.stop());
        std::thread::sleep(Duration::from_millis(200));
        gate.closed.store(false, Ordering::SeqCst);
        stopping.join().unwrap()
    });
    assert!(
        matches!(stopped, Err(LeaseError::Lost { .. })),
        "{stopped:?}"
    );
    assert!(events.try_iter().any(|e| matches!(e, Event::Lost { .. })));
}

/// The pool's twin of the keeper's review test
/// `the_loss_callback_hears_of_a_stop_whose_keeper_release_found_the_record_not_ours`:
/// a removed lease whose release finds the record not ours and no longer
/// live (`LeftAlone { holder: None }`: taken over and freed since, or
/// broken) was not held to the end, so the loss callback hears of it, as
/// it would of a holder named.
#[test]
fn the_loss_callback_hears_of_a_remove_whose_release_found_the_record_not_ours() {
    let clock = TestClock::new();
    let memory = Arc::new(MemoryStore::new());
    let store: Arc<dyn Store> = Arc::clone(&memory) as Arc<dyn Store>;
    let (heard, losses) = crossbeam_channel::unbounded();
    let pool = KeeperPool::spawn(PoolOptions::new().clock(Arc::new(clock.clone())).on_loss(
        move |loss| {
            let _ = heard.send(loss.loss.clone());
        },
    ))
    .expect("threads start");
    let lease = pool.add(take_on(&store, "a", &clock));
    let now = format_stamp(clock.wall());
    let mut usurper = LeaseRecord::new("usurper", now.clone(), now.clone(), TTL_S, 2);
    usurper.released_at = Some(now);
    memory.insert("a/LEASE", &usurper.to_bytes());
    let removed = pool.remove(lease.id());
    assert!(
        matches!(removed, Some(Err(LeaseError::Lost { .. }))),
        "not held to the end, yet remove answered {removed:?}"
    );
    match losses.recv_timeout(secs(5)) {
        Ok(Loss::Lost { .. }) => {}
        other => panic!("the loss callback is called once with Lost, got {other:?}"),
    }
}
