//! The watcher on the memory store and the test clock: no test sleeps.

use super::*;
use crate::clock::TestClock;
use crate::inspect::inspect_before;
use crate::lease::{Cancel, Contender, Lease, LeaseOptions};
use crate::memory::MemoryStore;
use crate::record::format_stamp;
use crate::store::{DeleteMode, Object, PutMode, PutOptions};
use crate::testing::{Reads, Wrapped};
use std::sync::atomic::{AtomicU64, Ordering};

const PREFIX: &str = "jobs/nightly";
const INTERVAL: Duration = Duration::from_secs(1);

/// Counts the conditional reads by answer.
#[derive(Debug, Default)]
struct Counts {
    unchanged: AtomicU64,
    changed: AtomicU64,
    /// Answer every read with this (permanent) error kind.
    refuse: Option<StoreErrorKind>,
}

impl Reads for Counts {
    fn before_read(&self, key: &str) -> Result<(), StoreError> {
        match self.refuse {
            Some(kind) => Err(StoreError::new(kind, "GET", key)),
            None => Ok(()),
        }
    }

    fn after_conditional_read(&self, answer: &Option<Object>) {
        match answer {
            None => &self.unchanged,
            Some(_) => &self.changed,
        }
        .fetch_add(1, Ordering::SeqCst);
    }
}

/// A memory store that counts its conditional reads by answer.
type Counting = Wrapped<Counts>;

impl Counting {
    fn unchanged(&self) -> u64 {
        self.reads.unchanged.load(Ordering::SeqCst)
    }

    fn changed(&self) -> u64 {
        self.reads.changed.load(Ordering::SeqCst)
    }
}

fn setup() -> (Arc<Counting>, TestClock, Watcher) {
    let store = Arc::new(Counting::default());
    let clock = TestClock::new();
    let watcher = Watcher::new(store.clone(), PREFIX, Arc::new(clock.clone()));
    (store, clock, watcher)
}

/// Write a record of `holder` (nonce `n-{holder}`) at `epoch`, renewed now
/// by `clock`'s wall clock, with a TTL of `ttl_s`.
fn write(store: &dyn Store, clock: &TestClock, holder: &str, epoch: u64, ttl_s: u64) -> Version {
    let now = format_stamp(clock.wall());
    let record = LeaseRecord::new(holder, now.clone(), now, ttl_s, epoch)
        .with_nonce(format!("n-{holder}"))
        .with_holder_name(format!("{holder}-host:1"));
    store
        .put(
            &lease_key(PREFIX),
            &record.to_bytes(),
            &PutOptions::new(PutMode::Overwrite),
        )
        .unwrap()
}

/// A wait of `secs` on `clock`, polling every [`INTERVAL`], no cancel (so
/// its sleeps move the test clock).
fn wait_for(clock: &TestClock, secs: u64) -> Wait {
    Wait::until(clock.now() + Duration::from_secs(secs)).max_reread(INTERVAL)
}

fn next(watcher: &mut Watcher, wait: &Wait) -> Change {
    watcher
        .next_change(wait)
        .expect("no error")
        .expect("a change before the deadline")
}

#[test]
fn the_first_call_reports_the_state_as_it_is() {
    let (store, clock, mut watcher) = setup();
    let t0 = clock.now();
    let first = next(&mut watcher, &wait_for(&clock, 10));
    assert_eq!(
        (first.kind, first.state, first.inspection.as_ref()),
        (ChangeKind::First, LeaseState::Absent, None)
    );
    assert_eq!(first.key, "jobs/nightly/LEASE");
    assert_eq!(clock.now(), t0, "reported at once");

    write(&*store, &clock, "a", 1, 30);
    let mut other = Watcher::new(store.clone(), PREFIX, Arc::new(clock.clone()));
    let first = next(&mut other, &wait_for(&clock, 10));
    assert_eq!(
        (first.kind, first.state),
        (ChangeKind::First, LeaseState::Held)
    );
    assert_eq!(
        (
            first.holder(),
            first.holder_name(),
            first.instance_nonce(),
            first.epoch()
        ),
        (Some("a"), Some("a-host:1"), Some("n-a"), Some(1))
    );
    assert_eq!(first.seen_at, clock.wall());
}

#[test]
fn the_change_is_judged_as_inspect_judges_it() {
    let (store, clock, mut watcher) = setup();
    write(&*store, &clock, "a", 1, 30);
    clock.advance(Duration::from_secs(12));
    let change = next(&mut watcher, &wait_for(&clock, 10));
    let inspected = inspect_before(&*store, PREFIX, &clock, None)
        .unwrap()
        .unwrap();
    assert_eq!(change.inspection, Some(inspected));
    assert_eq!(
        change.version(),
        Some(&store.inner.get("jobs/nightly/LEASE", None).unwrap().version)
    );
}

/// Another contender's takeover is reported at the first poll after it
/// landed: one interval after the previous poll began.
#[test]
fn a_takeover_is_reported_within_one_poll_interval() {
    let (store, clock, mut watcher) = setup();
    write(&*store, &clock, "a", 1, 30);
    let wait = wait_for(&clock, 60);
    let polled = clock.now();
    assert_eq!(next(&mut watcher, &wait).holder(), Some("a"));
    clock.advance(Duration::from_millis(300));
    write(&*store, &clock, "b", 2, 30);
    let taken = next(&mut watcher, &wait);
    assert_eq!(
        (taken.kind, taken.state, taken.holder(), taken.epoch()),
        (ChangeKind::NewHolder, LeaseState::Held, Some("b"), Some(2))
    );
    assert_eq!(taken.seen, polled + INTERVAL, "the next poll, not later");

    // The same instance id under another process's nonce is another holder.
    clock.advance(Duration::from_millis(300));
    let now = format_stamp(clock.wall());
    let namesake = LeaseRecord::new("b", now.clone(), now, 30, 3).with_nonce("n-other");
    store
        .put(
            &lease_key(PREFIX),
            &namesake.to_bytes(),
            &PutOptions::new(PutMode::Overwrite),
        )
        .unwrap();
    let again = next(&mut watcher, &wait);
    assert_eq!(
        (again.kind, again.instance_nonce()),
        (ChangeKind::NewHolder, Some("n-other"))
    );
}

#[test]
fn a_release_and_a_new_epoch_of_the_same_holder_are_reported() {
    let (store, clock, mut watcher) = setup();
    let options = || LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let lease = Lease::acquire(store.clone(), PREFIX, options()).unwrap();
    let wait = wait_for(&clock, 60);
    let held = next(&mut watcher, &wait);
    assert_eq!(
        (held.state, held.holder()),
        (LeaseState::Held, Some(lease.instance_id()))
    );
    let epoch = lease.epoch();
    lease.release().unwrap();
    let released = next(&mut watcher, &wait);
    assert_eq!(
        (released.kind, released.state, released.epoch()),
        (ChangeKind::Released, LeaseState::Released, Some(epoch))
    );
    assert_eq!(
        released.holder(),
        Some(lease.instance_id()),
        "the last holder"
    );

    // The same contender takes it again: one epoch up.
    let mut contender =
        Contender::new(store.clone(), PREFIX, options()).with_instance_id(lease.instance_id());
    let again = contender.try_acquire().unwrap();
    let change = next(&mut watcher, &wait);
    assert_eq!(
        (change.kind, change.state, change.epoch()),
        (ChangeKind::NewEpoch, LeaseState::Held, Some(again.epoch()))
    );
    assert_eq!(again.epoch(), epoch + 1);
}

/// A renewal changes the ETag only: nothing is reported, and the next
/// polls are conditional on the new ETag, so they find it unchanged.
#[test]
fn a_renewal_is_not_a_change_and_later_polls_are_unchanged_again() {
    let (store, clock, mut watcher) = setup();
    write(&*store, &clock, "a", 1, 30);
    next(&mut watcher, &wait_for(&clock, 10));
    assert_eq!(
        (store.changed(), store.unchanged()),
        (0, 0),
        "the first read is a GET"
    );
    clock.advance(Duration::from_millis(500));
    write(&*store, &clock, "a", 1, 30);
    let t0 = clock.now();
    assert_eq!(watcher.next_change(&wait_for(&clock, 5)).unwrap(), None);
    assert_eq!(
        clock.now(),
        t0 + Duration::from_secs(5),
        "waited to the deadline"
    );
    // Polls at +0.5 s (the renewal read), then +1.5, +2.5, +3.5 and +4.5 s.
    assert_eq!((store.changed(), store.unchanged()), (1, 4));
}

/// A record nobody renews expires at `renewed_at + ttl` by the reader's
/// wall clock: the watcher wakes for that instant, long before its next
/// poll, reads once (unchanged) and reports it once.
#[test]
fn an_unrenewed_record_is_reported_expired_at_its_expiry() {
    let (store, clock, mut watcher) = setup();
    let renewed = clock.wall();
    write(&*store, &clock, "a", 1, 10);
    let wait =
        Wait::until(clock.now() + Duration::from_secs(60)).max_reread(Duration::from_secs(30));
    let t0 = clock.now();
    assert_eq!(next(&mut watcher, &wait).state, LeaseState::Held);
    let expired = next(&mut watcher, &wait);
    assert_eq!(
        (
            expired.kind,
            expired.state,
            expired.holder(),
            expired.epoch()
        ),
        (ChangeKind::Expired, LeaseState::Expired, Some("a"), Some(1))
    );
    assert_eq!(
        expired.seen,
        t0 + Duration::from_secs(10),
        "at its expiry, not at the poll"
    );
    assert_eq!(expired.seen_at, renewed + Duration::from_secs(10));
    assert_eq!(
        store.unchanged(),
        1,
        "one read at the expiry, which found it unchanged"
    );
    assert!(!expired.inspection.as_ref().unwrap().fresh);
    // Once: the rest of the wait reports nothing.
    assert_eq!(watcher.next_change(&wait).unwrap(), None);
    assert_eq!(clock.now(), t0 + Duration::from_secs(60));

    // Its holder comes back and renews: fresh again.
    write(&*store, &clock, "a", 1, 10);
    let back = next(&mut watcher, &wait_for(&clock, 60));
    assert_eq!(
        (back.kind, back.state),
        (ChangeKind::Resumed, LeaseState::Held)
    );
}

/// The reader's wall clock decides: stepped forward past the record's
/// expiry, the next poll finds it expired.
#[test]
fn expiry_is_judged_by_the_readers_wall_clock() {
    let (store, clock, mut watcher) = setup();
    write(&*store, &clock, "a", 1, 30);
    let wait = wait_for(&clock, 60);
    next(&mut watcher, &wait);
    clock.step_wall(Duration::from_secs(45), true);
    let expired = next(&mut watcher, &wait);
    assert_eq!(expired.kind, ChangeKind::Expired);
}

#[test]
fn removed_appeared_unreadable_and_readable_again() {
    let (store, clock, mut watcher) = setup();
    write(&*store, &clock, "a", 1, 30);
    let wait = wait_for(&clock, 60);
    next(&mut watcher, &wait);
    let key = lease_key(PREFIX);
    store
        .delete(&key, &DeleteMode::Unconditional, None)
        .unwrap();
    let gone = next(&mut watcher, &wait);
    assert_eq!(
        (gone.kind, gone.state, gone.holder()),
        (ChangeKind::Removed, LeaseState::Absent, None)
    );
    store.inner.insert(&key, b"not json");
    let back = next(&mut watcher, &wait);
    assert_eq!(
        (back.kind, back.state),
        (ChangeKind::Appeared, LeaseState::Unreadable)
    );
    write(&*store, &clock, "b", 2, 30);
    let readable = next(&mut watcher, &wait);
    assert_eq!(
        (readable.kind, readable.holder()),
        (ChangeKind::NewHolder, Some("b"))
    );
    store.inner.insert(&key, b"{garbled");
    let garbled = next(&mut watcher, &wait);
    assert_eq!(
        (garbled.kind, garbled.state),
        (ChangeKind::Unreadable, LeaseState::Unreadable)
    );
}

#[test]
fn the_deadline_passing_without_a_change_returns_none_at_it() {
    let (store, clock, mut watcher) = setup();
    write(&*store, &clock, "a", 1, 3600);
    next(&mut watcher, &wait_for(&clock, 1));
    let wait = Wait::until(clock.now() + Duration::from_millis(2500)).max_reread(INTERVAL);
    assert_eq!(watcher.next_change(&wait).unwrap(), None);
    assert_eq!(Some(clock.now()), wait.deadline(), "not a moment after it");
    // A deadline already past: no read, no wait.
    let before = (store.unchanged(), clock.now());
    assert_eq!(watcher.next_change(&wait).unwrap(), None);
    assert_eq!((store.unchanged(), clock.now()), before);
}

/// Cancelled while it sleeps (the test clock stands still, so only the
/// cancel can end the wait), it returns `Cancelled` at once.
#[test]
fn a_cancel_ends_the_wait_mid_sleep() {
    let (store, clock, mut watcher) = setup();
    write(&*store, &clock, "a", 1, 3600);
    let cancel = Cancel::new();
    let wait = Wait::forever().max_reread(INTERVAL).cancel(cancel.clone());
    next(&mut watcher, &wait);
    let waiting = std::thread::spawn(move || watcher.next_change(&wait));
    // Until the watcher sleeps on its timer.
    let spin = Instant::now();
    while clock.pending_timers() == 0 {
        assert!(
            spin.elapsed() < Duration::from_secs(60),
            "the watcher never slept"
        );
        std::thread::yield_now();
    }
    cancel.cancel();
    let ended = waiting.join().unwrap();
    assert!(
        matches!(&ended, Err(LeaseError::Cancelled { key }) if key == "jobs/nightly/LEASE"),
        "{ended:?}"
    );
    // Cancelled before the call: at once, nothing read.
    let mut watcher = Watcher::new(store.clone(), PREFIX, Arc::new(clock.clone()));
    let wait = Wait::forever().cancel(cancel);
    assert!(matches!(
        watcher.next_change(&wait),
        Err(LeaseError::Cancelled { .. })
    ));
    assert_eq!((store.changed(), store.unchanged()), (0, 0));
}

#[test]
fn transient_failures_are_retried_and_the_deadline_returns_the_last() {
    let (store, clock, mut watcher) = setup();
    write(&*store, &clock, "a", 1, 3600);
    store.inner.fail_next_requests(3);
    let t0 = clock.now();
    let first = next(&mut watcher, &wait_for(&clock, 10));
    assert_eq!(first.holder(), Some("a"));
    // Three pauses of the store's backoff (50, 100, 200 ms), jittered.
    let took = clock.now() - t0;
    assert!(
        took >= Duration::from_millis(175) && took <= Duration::from_millis(525),
        "{took:?}"
    );

    store.inner.fail_next_requests(1000);
    let wait = wait_for(&clock, 5);
    match watcher.next_change(&wait) {
        Err(LeaseError::Store(e)) => assert_eq!(e.kind(), StoreErrorKind::Transport, "{e}"),
        other => panic!("expected the last read's error, got {other:?}"),
    }
    assert_eq!(Some(clock.now()), wait.deadline());

    // A record that expires while the store fails is still reported.
    let (store, clock, mut watcher) = setup();
    write(&*store, &clock, "a", 1, 5);
    next(&mut watcher, &wait_for(&clock, 1));
    store.inner.fail_next_requests(1000);
    let expired = next(&mut watcher, &wait_for(&clock, 60));
    assert_eq!(expired.kind, ChangeKind::Expired);
}

#[test]
fn a_permanent_error_is_returned_at_once() {
    let store = Arc::new(Counting {
        reads: Counts {
            refuse: Some(StoreErrorKind::PermissionDenied),
            ..Counts::default()
        },
        ..Counting::default()
    });
    let clock = TestClock::new();
    let mut watcher = Watcher::new(store, PREFIX, Arc::new(clock.clone()));
    let t0 = clock.now();
    match watcher.next_change(&wait_for(&clock, 60)) {
        Err(LeaseError::Store(e)) => assert!(e.is_permanent(), "{e}"),
        other => panic!("expected the permanent error, got {other:?}"),
    }
    assert_eq!(clock.now(), t0, "without waiting");
}

#[test]
fn a_contenders_watch_follows_its_own_lease() {
    let (store, clock, _) = setup();
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let contender = Contender::new(store.clone(), PREFIX, options.clone());
    let mut watcher = contender.watch();
    assert_eq!(watcher.key(), contender.key());
    let wait = wait_for(&clock, 60);
    assert_eq!(next(&mut watcher, &wait).state, LeaseState::Absent);
    let lease = Lease::acquire(store.clone(), PREFIX, options).unwrap();
    let held = next(&mut watcher, &wait);
    assert_eq!(
        (held.kind, held.holder()),
        (ChangeKind::Appeared, Some(lease.instance_id()))
    );
}

#[test]
fn the_default_conditional_read_compares_versions() {
    let store = MemoryStore::new();
    let v1 = store.insert("k", b"one");
    assert_eq!(store.get_if_changed("k", &v1, None).unwrap(), None);
    let v2 = store.insert("k", b"two");
    assert_eq!(
        store
            .get_if_changed("k", &v1, None)
            .unwrap()
            .unwrap()
            .version,
        v2
    );
    // Without an ETag nothing says it is the same object.
    let bare = Version::default();
    assert!(store.get_if_changed("k", &bare, None).unwrap().is_some());
    store.delete("k", &DeleteMode::Unconditional, None).unwrap();
    let gone = store.get_if_changed("k", &v2, None).unwrap_err();
    assert_eq!(gone.kind(), StoreErrorKind::NotFound);
}

/// Conditional reads that hang until their deadline (on the test clock)
/// and time out there.
#[derive(Debug)]
struct HangsToDeadline(TestClock);

impl Reads for HangsToDeadline {
    fn before_conditional_read(
        &self,
        key: &str,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        let deadline = deadline.expect("every read has a deadline");
        self.0
            .advance(deadline.saturating_duration_since(self.0.now()));
        Err(StoreError::new(StoreErrorKind::Transport, "GET", key).timed_out())
    }
}

/// A memory store whose conditional reads hang to their deadline on
/// `clock`.
fn hanging(clock: &TestClock) -> Arc<Wrapped<HangsToDeadline>> {
    Arc::new(Wrapped {
        inner: MemoryStore::new(),
        reads: HangsToDeadline(clock.clone()),
    })
}

/// A read cut short by the wait's own deadline is not a failure: the wait
/// ends with `Ok(None)`; one that timed out on its own bound
/// (`attempt_timeout`) before the deadline is, and is returned then.
#[test]
fn a_read_cut_short_by_the_deadline_is_no_failure() {
    let clock = TestClock::new();
    let store = hanging(&clock);
    write(&*store, &clock, "a", 1, 3600);
    let mut watcher = Watcher::new(store.clone(), PREFIX, Arc::new(clock.clone()));
    next(&mut watcher, &wait_for(&clock, 1));
    let wait = wait_for(&clock, 5).attempt_timeout(Duration::from_secs(60));
    assert_eq!(watcher.next_change(&wait).unwrap(), None);
    assert_eq!(Some(clock.now()), wait.deadline());
    let wait = wait_for(&clock, 5).attempt_timeout(Duration::from_secs(2));
    match watcher.next_change(&wait) {
        Err(LeaseError::Store(e)) => assert!(e.is_timeout(), "{e}"),
        other => panic!("expected the timed-out read, got {other:?}"),
    }
}

/// Review (issue 33): conditional reads of which the first `budget` are
/// answered and the rest refused with a permanent error, so that a
/// watcher that polls without pause ends rather than spins.
#[derive(Debug)]
struct Budgeted {
    reads: AtomicU64,
    budget: u64,
}

impl Reads for Budgeted {
    fn before_conditional_read(
        &self,
        key: &str,
        _deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        if self.reads.fetch_add(1, Ordering::SeqCst) >= self.budget {
            return Err(StoreError::new(
                StoreErrorKind::PermissionDenied,
                "GET",
                key,
            ));
        }
        Ok(())
    }
}

/// Review (issue 33): "It polls ... every `Wait::max_reread` from the start
/// of one read to the start of the next". A poll interval so long that
/// `last_read + interval` does not fit in an `Instant` (`Duration::MAX`:
/// "as rarely as you can") makes `read_due` answer `None`, which
/// `next_change` takes for "due now": it reads back to back without
/// pause, forever, instead of sleeping to the deadline (or the record's
/// expiry, an hour away here).
#[test]
fn review_a_poll_interval_that_overflows_an_instant_does_not_poll_without_pause() {
    let clock = TestClock::new();
    let store = Arc::new(Wrapped {
        inner: MemoryStore::new(),
        reads: Budgeted {
            reads: AtomicU64::new(0),
            budget: 1000,
        },
    });
    write(&*store, &clock, "a", 1, 3600);
    let mut watcher = Watcher::new(store.clone(), PREFIX, Arc::new(clock.clone()));
    let wait = Wait::until(clock.now() + Duration::from_secs(5)).max_reread(Duration::MAX);
    assert_eq!(next(&mut watcher, &wait).state, LeaseState::Held);
    let t0 = clock.now();
    let ended = watcher.next_change(&wait);
    let reads = store.reads.reads.load(Ordering::SeqCst);
    assert!(
        matches!(ended, Ok(None)) && reads == 0,
        "expected Ok(None) at the deadline and no conditional read (the next poll is \
         Duration::MAX away); got {ended:?} after {reads} conditional reads in {:?} of the \
         test clock",
        clock.now() - t0
    );
}

/// Review (issue 33): "a record that expires while the store does not
/// answer is reported expired", and the watcher "wakes at the instant it
/// expires". On a store that does not answer (a partition: each read hangs
/// to its deadline, as on a black-holed network), a read begun before the
/// expiry is bounded by `attempt_timeout` alone, not by the known record's
/// expiry, so the expiry is reported only when that read gives up: here a
/// minute late (the CLI's default bound is 30 s).
#[test]
fn review_an_expiry_during_a_hanging_read_is_reported_at_the_expiry() {
    let clock = TestClock::new();
    let store = hanging(&clock);
    write(&*store, &clock, "a", 1, 10);
    let mut watcher = Watcher::new(store.clone(), PREFIX, Arc::new(clock.clone()));
    let wait = Wait::until(clock.now() + Duration::from_secs(300))
        .max_reread(INTERVAL)
        .attempt_timeout(Duration::from_secs(60));
    let t0 = clock.now();
    assert_eq!(next(&mut watcher, &wait).state, LeaseState::Held);
    let expired = next(&mut watcher, &wait);
    assert_eq!(expired.kind, ChangeKind::Expired);
    let late = expired.seen - t0;
    assert!(
        late <= Duration::from_secs(11),
        "expired at +10 s by the reader's clock, reported at +{late:?} (the hanging read's \
         attempt_timeout)"
    );
}

/// Review (issue 33, low severity): "a holder that stopped renewing is
/// reported `expired` at the instant its record expires by this machine's
/// clock, without waiting for a poll" (README). The watcher sleeps on the
/// monotonic clock until the expiry it computed before the wall clock
/// stepped: a wall clock stepped forward past the expiry (NTP correcting a
/// slow clock) is noticed only at the old instant or the next poll,
/// whichever is first, here 9 s late (up to one `--interval` in general).
#[test]
fn review_a_wall_clock_stepped_past_the_expiry_is_reported_at_the_step() {
    let (store, clock, mut watcher) = setup();
    write(&*store, &clock, "a", 1, 10);
    // A cancel that never fires: the watcher's sleeps wait on real timers
    // of the test clock, which only `advance` fires.
    let wait = Wait::until(clock.now() + Duration::from_secs(300))
        .max_reread(Duration::from_secs(30))
        .cancel(Cancel::new());
    let t0 = clock.now();
    assert_eq!(next(&mut watcher, &wait).state, LeaseState::Held);
    let waiting = std::thread::spawn(move || watcher.next_change(&wait));
    let spin = Instant::now();
    while clock.pending_timers() == 0 {
        assert!(spin.elapsed() < Duration::from_secs(60), "never slept");
        std::thread::yield_now();
    }
    // One second in, the wall clock steps 20 s forward: the record expired
    // 11 s ago by this machine's clock.
    clock.advance(Duration::from_secs(1));
    clock.step_wall(Duration::from_secs(20), true);
    // Then time passes a second at a time until the watcher reports.
    for _ in 0..60 {
        if waiting.is_finished() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        clock.advance(Duration::from_secs(1));
    }
    let expired = waiting.join().unwrap().unwrap().unwrap();
    assert_eq!(expired.kind, ChangeKind::Expired);
    let at = expired.seen - t0;
    assert!(
        at <= Duration::from_secs(2),
        "expired by the wall clock at +1 s (the step), reported at +{at:?}"
    );
}
