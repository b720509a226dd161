//! The renewal thread on the in-memory store with a test clock. The clock
//! moves only when a test moves it; the tests wait for the keeper's events
//! (with a generous real-time bound) rather than sleeping.
//!
//! How a kept lease ends (takeovers, the fence, the loss callback, the
//! stop's answer) is checked for the keeper beside the pool and the set,
//! in one table: `losses.rs`.

mod common;

use bucket_lease_core::record::{format_stamp, LeaseRecord};
use bucket_lease_core::KeptLease;
use bucket_lease_core::{
    clock::Clock, clock::TestClock, Event, Keeper, KeeperOptions, Lease, LeaseOptions, Released,
};
use common::Recording;
use crossbeam_channel::Receiver;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

const KEY: &str = "db/LEASE";
const PATIENCE: Duration = Duration::from_secs(10);
const QUIET: Duration = Duration::from_millis(150);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn start(ttl_s: u64) -> (Arc<Recording>, TestClock, Keeper) {
    let store = Recording::new();
    let clock = TestClock::new();
    let options = LeaseOptions::new(ttl_s).clock(Arc::new(clock.clone()));
    let lease = Lease::acquire(store.clone(), "db", options).unwrap();
    let keeper = Keeper::spawn(lease, KeeperOptions::new()).unwrap();
    (store, clock, keeper)
}

fn next(events: &Receiver<Event>) -> Event {
    events
        .recv_timeout(PATIENCE)
        .expect("the keeper reports within 10 s")
}

fn nothing_yet(events: &Receiver<Event>) {
    if let Ok(e) = events.recv_timeout(QUIET) {
        panic!("no event expected yet, got {e:?}");
    }
}

fn is_released(store: &Recording) -> bool {
    LeaseRecord::parse(&store.inner.peek(KEY).unwrap())
        .unwrap()
        .is_released()
}

fn renewed_at(store: &Recording) -> String {
    LeaseRecord::parse(&store.inner.peek(KEY).unwrap())
        .unwrap()
        .renewed_at
}

#[test]
fn renewals_come_every_third_of_a_ttl_on_the_keeper_thread() {
    let (store, clock, keeper) = start(30);
    let events = keeper.events().clone();
    for round in 1..=3u64 {
        clock.advance(Duration::from_millis(9_990));
        nothing_yet(&events);
        clock.advance(Duration::from_millis(10));
        assert!(
            matches!(next(&events), Event::Renewed { .. }),
            "round {round}"
        );
        assert_eq!(renewed_at(&store), format_stamp(clock.wall()));
    }
    assert_eq!(keeper.write_deadline(), Some(clock.now() + secs(20)));
    let threads = store.put_threads.lock().unwrap().clone();
    assert_eq!(threads.last().unwrap().as_deref(), Some("bucket-lease"));
}

/// Wait (in real time, bounded) until the store has had `n` warm-ups.
fn warm_ups_reach(store: &Recording, n: usize) -> Vec<std::time::Instant> {
    let end = std::time::Instant::now() + PATIENCE;
    loop {
        let seen = store.warm_ups.lock().unwrap().clone();
        if seen.len() >= n || std::time::Instant::now() > end {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The store is asked to warm up a second before each renewal (a quarter
/// of the interval at most), for that renewal's instant, and not again;
/// the renewal follows at its time. A warm-up that panics changes nothing.
#[test]
fn the_store_is_warmed_up_shortly_before_each_renewal() {
    let (store, clock, keeper) = start(30);
    let events = keeper.events().clone();
    let first_due = clock.now() + secs(10);
    clock.advance(Duration::from_millis(8_990));
    nothing_yet(&events);
    assert!(store.warm_ups.lock().unwrap().is_empty());
    let puts = store.put_times.lock().unwrap().len();
    clock.advance(Duration::from_millis(10));
    assert_eq!(warm_ups_reach(&store, 1), [first_due]);
    nothing_yet(&events);
    assert_eq!(
        store.put_times.lock().unwrap().len(),
        puts,
        "warmed, not renewed"
    );
    clock.advance(secs(1));
    assert!(matches!(next(&events), Event::Renewed { .. }));
    assert_eq!(store.warm_ups.lock().unwrap().len(), 1, "once per renewal");
    store.panic_on_warm_up.store(true, Ordering::SeqCst);
    clock.advance(secs(9));
    assert_eq!(warm_ups_reach(&store, 2).len(), 2);
    clock.advance(secs(1));
    assert!(matches!(next(&events), Event::Renewed { .. }));
    assert!(keeper.may_write());
    // TTL 3: the interval is 1 s, and the lead a quarter of it.
    let (store, clock, keeper) = start(3);
    let events = keeper.events().clone();
    let due = clock.now() + secs(1);
    clock.advance(Duration::from_millis(740));
    nothing_yet(&events);
    assert!(store.warm_ups.lock().unwrap().is_empty());
    clock.advance(Duration::from_millis(10));
    assert_eq!(warm_ups_reach(&store, 1), [due]);
    clock.advance(Duration::from_millis(250));
    assert!(matches!(next(&events), Event::Renewed { .. }));
}

#[test]
fn each_renewal_is_bounded_by_the_write_deadline() {
    let (store, clock, keeper) = start(30);
    let events = keeper.events().clone();
    let deadline = keeper.write_deadline().unwrap();
    clock.advance(secs(10));
    assert!(matches!(next(&events), Event::Renewed { .. }));
    assert_eq!(store.last_put_deadline(), Some(deadline));
}

#[test]
fn a_failed_renewal_is_retried_and_recovers() {
    let (store, clock, keeper) = start(30);
    let events = keeper.events().clone();
    store.inner.fail_next_requests(1);
    clock.advance(secs(10));
    match next(&events) {
        Event::RenewalFailed { retrying, error } => {
            assert!(retrying);
            assert!(error.to_string().contains("no answer"), "{error}");
        }
        other => panic!("expected a failed renewal, got {other:?}"),
    }
    clock.advance(secs(1)); // the first pause is at most 300 ms
    assert!(matches!(next(&events), Event::Renewed { .. }));
    assert!(keeper.may_write());
}

// The schedule is internal: public only with the feature `internals`
// (`cargo test --all-features`).
#[cfg(feature = "internals")]
#[test]
fn the_schedule_never_waits_for_nothing() {
    use bucket_lease_core::keeper::{Attempt, RenewalSchedule, Step};
    use bucket_lease_core::LeaseError;
    let store = Recording::new();
    let clock = TestClock::new();
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let lease = Lease::acquire(store.clone(), "db", options).unwrap();
    let deadline = lease.write_deadline().unwrap();
    let mut schedule = RenewalSchedule::new(&lease);
    assert_eq!(
        schedule.step(&lease),
        Step::Wait {
            until: clock.now() + secs(10)
        }
    );
    clock.advance(secs(10));
    assert_eq!(schedule.step(&lease), Step::Renew { deadline });
    // The renewal hung until the deadline and failed there.
    clock.advance(secs(10));
    let failed = LeaseError::Fenced { key: KEY.into() };
    assert!(matches!(
        schedule.record(&lease, Attempt::Failed(failed)),
        Some(Event::RenewalFailed {
            retrying: false,
            ..
        })
    ));
    assert_eq!(schedule.step(&lease), Step::End(Event::Fenced));

    // A failure with time left is retried before the deadline, never after.
    let lease = Lease::acquire(
        store.clone(),
        "other",
        LeaseOptions::new(30).clock(Arc::new(clock.clone())),
    )
    .unwrap();
    let deadline = lease.write_deadline().unwrap();
    let mut schedule = RenewalSchedule::new(&lease);
    clock.advance(secs(10));
    assert_eq!(schedule.step(&lease), Step::Renew { deadline });
    let failed = LeaseError::Fenced { key: KEY.into() };
    schedule.record(&lease, Attempt::Failed(failed));
    match schedule.step(&lease) {
        Step::Wait { until } => assert!(until > clock.now() && until <= deadline),
        other => panic!("expected a wait for the retry, got {other:?}"),
    }
    // A loss ends the schedule with its reason.
    let reason = "the record was replaced or deleted".to_string();
    assert_eq!(
        schedule.record(
            &lease,
            Attempt::Lost {
                holder: None,
                reason: reason.clone()
            }
        ),
        None
    );
    assert_eq!(
        schedule.step(&lease),
        Step::End(Event::Lost {
            holder: None,
            holder_name: None,
            reason
        })
    );
}

/// A store whose store call, once armed, hangs until the test lets it go
/// (`go_on`), then returns at its bound (the test clock moved there): a
/// warm-up at its renewal's due instant, as a warm-up to a dead endpoint
/// does; the next write exactly at its deadline.
#[derive(Debug)]
struct HeldUp {
    inner: Arc<Recording>,
    clock: TestClock,
    /// Every warm-up hangs.
    warm_ups: bool,
    /// The next write hangs.
    next_write: std::sync::atomic::AtomicBool,
    entered: crossbeam_channel::Sender<()>,
    go_on: Receiver<()>,
}

impl HeldUp {
    /// A store that holds up warm-ups (`warm_ups`) or, once armed, the
    /// next write; the receiver hears each call held up, the sender lets
    /// it go on.
    fn new(
        recording: &Arc<Recording>,
        clock: &TestClock,
        warm_ups: bool,
    ) -> (Arc<HeldUp>, Receiver<()>, crossbeam_channel::Sender<()>) {
        let (entered, entered_rx) = crossbeam_channel::bounded(1);
        let (go_on_tx, go_on) = crossbeam_channel::bounded(1);
        let store = Arc::new(HeldUp {
            inner: Arc::clone(recording),
            clock: clock.clone(),
            warm_ups,
            next_write: std::sync::atomic::AtomicBool::new(false),
            entered,
            go_on,
        });
        (store, entered_rx, go_on_tx)
    }

    /// Hang until let go, then move the test clock to `bound`.
    fn hold_up_until(&self, bound: std::time::Instant) {
        let _ = self.entered.send(());
        let _ = self.go_on.recv_timeout(PATIENCE);
        self.clock
            .advance(bound.saturating_duration_since(self.clock.now()));
    }
}

impl bucket_lease_core::Store for HeldUp {
    fn get(
        &self,
        key: &str,
        deadline: Option<std::time::Instant>,
    ) -> Result<bucket_lease_core::store::Object, bucket_lease_core::StoreError> {
        self.inner.get(key, deadline)
    }

    fn put(
        &self,
        key: &str,
        body: &[u8],
        options: &bucket_lease_core::store::PutOptions,
    ) -> Result<bucket_lease_core::store::Version, bucket_lease_core::StoreError> {
        if self.next_write.swap(false, Ordering::SeqCst) {
            if let Some(deadline) = options.deadline {
                self.hold_up_until(deadline);
            }
        }
        self.inner.put(key, body, options)
    }

    fn delete(
        &self,
        key: &str,
        mode: &bucket_lease_core::store::DeleteMode,
        deadline: Option<std::time::Instant>,
    ) -> Result<(), bucket_lease_core::StoreError> {
        self.inner.delete(key, mode, deadline)
    }

    fn warm_up(&self, key: &str, due: std::time::Instant) {
        self.inner.warm_up(key, due);
        if self.warm_ups {
            self.hold_up_until(due);
        }
    }
}

/// Review (issue 41): a stop asked while a warm-up hangs. The warm-up
/// returns at its renewal's due instant, and the driver went from it
/// straight to the renewal, asking no wait whether a stop had come: the
/// stopped keeper sent a renewal (which may hang to the write deadline,
/// a third of a TTL more, before the release) although a stop asked
/// "wins over a due instant" (04be741) and nothing was in flight.
#[test]
fn a_stop_asked_during_a_hung_warm_up_begins_no_keeper_renewal() {
    let recording = Recording::new();
    let clock = TestClock::new();
    let (store, entered, go_on_tx) = HeldUp::new(&recording, &clock, true);
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let lease = Lease::acquire(store, "db", options).unwrap();
    let keeper = Keeper::spawn(lease, KeeperOptions::new()).unwrap();
    let puts_before = recording.put_times.lock().unwrap().len();
    until_a_timer_is_set(&clock);
    // To the warm-up's instant: a second before the renewal.
    clock.advance(secs(9));
    entered.recv_timeout(PATIENCE).expect("the warm-up begins");
    // The stop is asked while the warm-up hangs.
    let modes = stop_while_held_up(keeper, &go_on_tx, &recording, puts_before);
    assert_eq!(
        modes.len(),
        1,
        "only the release is sent after the stop, not a renewal: {modes:?}"
    );
    assert!(is_released(&recording));
}

/// Once the keeper's thread sleeps on its first timer (within `PATIENCE`).
fn until_a_timer_is_set(clock: &TestClock) {
    let end = std::time::Instant::now() + PATIENCE;
    while clock.pending_timers() == 0 && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Stop `keeper` while its store call is held up, then let the call go
/// on (`go_on`); the stop frees the record. The writes sent since the
/// `puts_before`-th.
fn stop_while_held_up(
    keeper: Keeper,
    go_on: &crossbeam_channel::Sender<()>,
    recording: &Recording,
    puts_before: usize,
) -> Vec<bucket_lease_core::store::PutMode> {
    let stopping = std::thread::spawn(move || keeper.stop());
    std::thread::sleep(QUIET);
    go_on.send(()).unwrap();
    assert_eq!(stopping.join().unwrap(), Ok(Released::Freed));
    recording.put_modes.lock().unwrap()[puts_before..].to_vec()
}

/// Review (issue 41): a renewal that lands exactly at the write deadline
/// makes the next renewal due at once (a renewal interval after the
/// stamp, which was taken as the renewal began); the driver began it
/// without a wait, so a stop asked while the slow renewal was in flight
/// did not keep a second renewal from beginning after it.
#[test]
fn a_stop_asked_during_a_renewal_landing_at_the_deadline_begins_no_keeper_renewal() {
    let recording = Recording::new();
    let clock = TestClock::new();
    let (store, entered, go_on_tx) = HeldUp::new(&recording, &clock, false);
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let lease = Lease::acquire(
        Arc::clone(&store) as Arc<dyn bucket_lease_core::Store>,
        "db",
        options,
    )
    .unwrap();
    let keeper = Keeper::spawn(lease, KeeperOptions::new()).unwrap();
    let puts_before = recording.put_times.lock().unwrap().len();
    store.next_write.store(true, Ordering::SeqCst);
    until_a_timer_is_set(&clock);
    clock.advance(secs(10));
    entered.recv_timeout(PATIENCE).expect("the renewal begins");
    // The stop is asked while the renewal is in flight: it is finished
    // first, and then only the release is sent.
    let modes = stop_while_held_up(keeper, &go_on_tx, &recording, puts_before);
    assert_eq!(
        modes.len(),
        2,
        "the renewal in flight and the release, no renewal after the stop: {modes:?}"
    );
    assert!(is_released(&recording));
}
