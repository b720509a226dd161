//! The schedules a review found in which two holders could write at once,
//! or the lease failed open, each replayed on the in-memory store with a
//! test clock. Each test is named after the promise the schedule broke.

mod common;

use bucket_lease_core::inspect::{break_lease, inspect};
use bucket_lease_core::memory::{MemoryStore, Misbehaviour};
use bucket_lease_core::record::{format_stamp, LeaseRecord, MAX_SANE_TTL_S};
use bucket_lease_core::KeptLease;
use bucket_lease_core::{
    clock::Clock, clock::TestClock, lease::Exclusion, store::DeleteMode, store::Object,
    store::PutOptions, store::StoreErrorKind, store::Version, Contender, Event, Keeper,
    KeeperOptions, Lease, LeaseError, LeaseOptions, Released, Store, StoreError,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

const KEY: &str = "db/LEASE";
const PATIENCE: Duration = Duration::from_secs(10);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn record_at(store: &MemoryStore) -> LeaseRecord {
    LeaseRecord::parse(&store.peek(KEY).expect("a LEASE object")).expect("a lease record")
}

fn plant(store: &MemoryStore, id: &str, renewed: SystemTime, ttl_s: u64, epoch: u64) {
    let stamp = format_stamp(renewed);
    let record = LeaseRecord::new(id, stamp.clone(), stamp, ttl_s, epoch);
    store.insert(KEY, &record.to_bytes());
}

/// A store whose requests can be made to hang until their deadline on a
/// test clock, as a black-holed network does once the request timeout is
/// cut to the write deadline: the clock is moved to the deadline, then the
/// request fails as timed out without landing.
#[derive(Debug)]
struct BlackHole {
    inner: MemoryStore,
    clock: TestClock,
    /// Hang every PUT while set.
    hang_puts: AtomicBool,
    /// Hang this many more PUTs after the next `skip` ones.
    skip: AtomicUsize,
}

impl BlackHole {
    fn new(clock: &TestClock) -> Arc<Self> {
        Arc::new(BlackHole {
            inner: MemoryStore::new(),
            clock: clock.clone(),
            hang_puts: AtomicBool::new(false),
            skip: AtomicUsize::new(0),
        })
    }

    fn hang(&self, method: &'static str, key: &str, deadline: Option<Instant>) -> StoreError {
        let deadline = deadline.expect("every request under test carries a deadline");
        let now = self.clock.now();
        if deadline > now {
            self.clock.advance(deadline - now);
        }
        StoreError::new(StoreErrorKind::Transport, method, key)
            .timed_out()
            .with_message("black-holed until the deadline")
    }
}

impl Store for BlackHole {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        if self.hang_puts.load(Ordering::SeqCst) {
            let skipped = self
                .skip
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if !skipped {
                return Err(self.hang("PUT", key, options.deadline));
            }
        }
        self.inner.put(key, body, options)
    }

    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.inner.delete(key, mode, d)
    }
}

#[test]
fn the_keeper_reports_the_fence_after_a_renewal_that_times_out_at_the_deadline() {
    let clock = TestClock::new();
    let store = BlackHole::new(&clock);
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let lease = Lease::acquire(store.clone(), "db", options).unwrap();
    let keeper = Keeper::spawn(lease, KeeperOptions::new()).unwrap();
    let events = keeper.events().clone();
    store.hang_puts.store(true, Ordering::SeqCst);
    clock.advance(secs(10));
    let mut seen = Vec::new();
    loop {
        let event = events
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("no Fenced event after {seen:?}"));
        let fenced = matches!(event, Event::Fenced);
        seen.push(event);
        if fenced {
            break;
        }
    }
    assert!(!keeper.may_write());
    assert!(
        matches!(
            seen.first(),
            Some(Event::RenewalFailed {
                retrying: false,
                ..
            })
        ),
        "{seen:?}"
    );
    drop(keeper);
}

#[test]
fn release_never_removes_a_successors_record_on_a_service_ignoring_delete_conditions() {
    let clock = TestClock::new();
    let store = Arc::new(MemoryStore::new());
    store.set(Misbehaviour::IgnoreIfMatchOnDelete);
    let options = || LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let a = Lease::acquire(store.clone(), "db", options()).unwrap();
    // A is paused for longer than a TTL; B takes over.
    clock.advance(secs(31));
    let b = Lease::acquire(store.clone(), "db", options()).unwrap();
    // A wakes and releases.
    let _ = a.release();
    assert_eq!(record_at(&store).instance_id, b.instance_id());
    assert!(b.renew().is_ok(), "B keeps its lease");
    // Nobody else may take the lease from under B.
    assert!(matches!(
        Lease::acquire(store.clone(), "db", options()),
        Err(LeaseError::Held { .. })
    ));
}

#[test]
fn epochs_only_grow_across_release_takeover_and_break() {
    let clock = TestClock::new();
    let store = Arc::new(MemoryStore::new());
    let options = || LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let first = Lease::acquire(store.clone(), "db", options()).unwrap();
    assert_eq!(first.epoch(), 1);
    first.release().unwrap();
    let second = Lease::acquire(store.clone(), "db", options()).unwrap();
    assert_eq!(second.epoch(), 2, "a release does not restart the count");
    clock.advance(secs(31));
    let third = Lease::acquire(store.clone(), "db", options()).unwrap();
    assert_eq!(third.epoch(), 3, "a takeover counts one up");
    break_lease(&*store, "db", third.instance_id(), &clock).unwrap();
    let fifth = Lease::acquire(store.clone(), "db", options()).unwrap();
    assert_eq!(
        fifth.epoch(),
        5,
        "a break counts one up, and so does the next take"
    );
    // The same instance taking its own released lease again counts up too.
    let id = fifth.instance_id().to_string();
    fifth.release().unwrap();
    let again = Contender::new(store.clone(), "db", options())
        .with_instance_id(id)
        .try_acquire()
        .unwrap();
    assert_eq!(again.epoch(), 6);
}

#[test]
fn a_released_record_reads_as_stale_to_the_reference_and_free_to_inspect() {
    let clock = TestClock::new();
    let store = Arc::new(MemoryStore::new());
    let lease = Lease::acquire(store.clone(), "db", LeaseOptions::new(30)).unwrap();
    let id = lease.instance_id().to_string();
    lease.release().unwrap();
    let body = store.peek(KEY).expect("a release leaves the key in place");
    // The reference judges a record by `renewed_at` and `ttl_s` alone.
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["instance_id"], id.as_str());
    assert_eq!(json["ttl_s"], 0);
    let record = LeaseRecord::parse(&body).unwrap();
    let renewed = record.renewed().expect("renewed_at parses");
    assert!(renewed < clock.wall() - secs(3600 * 24 * 365));
    let seen = inspect(&*store, "db", &clock).unwrap().unwrap();
    assert!(seen.is_released() && !seen.fresh);
    assert_eq!(seen.record.unwrap().epoch, 1);
}

#[test]
fn a_ttl_above_the_sane_maximum_is_refused() {
    let store = Arc::new(MemoryStore::new());
    let refused = Lease::acquire(store.clone(), "db", LeaseOptions::new(MAX_SANE_TTL_S + 1));
    let error = refused.expect_err("a TTL over the maximum is refused");
    assert!(error.to_string().contains("3600"), "{error}");
    assert!(store.keys().is_empty(), "nothing is written");
    assert!(Lease::acquire(store, "db", LeaseOptions::new(MAX_SANE_TTL_S)).is_ok());
}

#[test]
fn a_suspect_record_is_watched_for_at_least_its_own_sane_ttl() {
    let clock = TestClock::new();
    let store = Arc::new(MemoryStore::new());
    // A live holder whose clock runs well over its TTL ahead, renewing
    // every 200 s: suspect, but it would change the record within 600 s.
    plant(&store, "ahead", clock.wall() + secs(5000), 600, 3);
    let mut contender = Contender::new(
        store.clone(),
        "db",
        LeaseOptions::new(30).clock(Arc::new(clock.clone())),
    );
    assert!(matches!(
        contender.try_acquire(),
        Err(LeaseError::Held { .. })
    ));
    clock.advance(secs(31));
    assert!(
        matches!(contender.try_acquire(), Err(LeaseError::Held { .. })),
        "one of our TTLs is shorter than the holder's renewal interval"
    );
    clock.advance(secs(570));
    let lease = contender
        .try_acquire()
        .expect("taken after the record's TTL");
    assert_eq!(lease.epoch(), 4);
}

#[test]
fn a_missing_etag_fails_the_acquire_instead_of_downgrading() {
    let store = Arc::new(MemoryStore::new());
    store.set(Misbehaviour::NoEtags);
    let error = Lease::acquire(store.clone(), "db", LeaseOptions::new(30))
        .expect_err("a lease without ETags cannot compare-and-swap");
    assert!(error.to_string().contains("ETag"), "{error}");
}

#[test]
fn a_missing_etag_on_a_renewal_fences_instead_of_downgrading() {
    let store = Arc::new(MemoryStore::new());
    let lease = Lease::acquire(store.clone(), "db", LeaseOptions::new(30)).unwrap();
    store.set(Misbehaviour::NoEtags);
    let error = lease.renew().expect_err("a renewal without an ETag fails");
    assert!(error.to_string().contains("ETag"), "{error}");
    assert_eq!(lease.exclusion(), Exclusion::Conditional);
    assert!(!lease.may_write(), "an unknown version cannot be renewed");
}

#[test]
fn a_not_implemented_answer_never_downgrades_a_conditional_lease() {
    let store = Arc::new(MemoryStore::new());
    store.set(Misbehaviour::NoConditions);
    assert!(
        Lease::acquire(store.clone(), "db", LeaseOptions::new(30)).is_err(),
        "an acquire whose conditions cannot be sent fails"
    );
    assert!(store.keys().is_empty(), "nothing was written blind");
    store.clear(Misbehaviour::NoConditions);
    let lease = Lease::acquire(store.clone(), "db", LeaseOptions::new(30)).unwrap();
    let before = store.peek(KEY);
    store.set(Misbehaviour::NoConditions);
    assert!(lease.renew().is_err(), "a renewal answered 501 failed");
    assert_eq!(lease.exclusion(), Exclusion::Conditional);
    assert_eq!(store.peek(KEY), before, "nothing was overwritten blind");
    assert!(
        lease.may_write(),
        "a failed renewal leaves the fence to decide"
    );
}

#[test]
fn an_epoch_at_the_maximum_is_refused_never_wrapped() {
    let clock = TestClock::new();
    let store = Arc::new(MemoryStore::new());
    plant(&store, "old", clock.wall() - secs(60), 30, u64::MAX);
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let error = Lease::acquire(store.clone(), "db", options).expect_err("no epoch after u64::MAX");
    assert!(error.to_string().contains("epoch"), "{error}");
    assert_eq!(record_at(&store).instance_id, "old", "nothing was written");
    assert!(break_lease(&*store, "db", "old", &clock).is_err());
    assert_eq!(record_at(&store).instance_id, "old", "nothing was written");
}

#[test]
fn an_oversized_record_is_taken_over_as_unreadable() {
    let store = Arc::new(MemoryStore::new());
    store.set_read_cap(Some(1024));
    store.insert(KEY, &vec![b'x'; 4096]);
    let clock = TestClock::new();
    let seen = inspect(&*store, "db", &clock).unwrap().unwrap();
    assert!(seen.record.is_none() && !seen.fresh);
    let lease = Lease::acquire(store.clone(), "db", LeaseOptions::new(30)).unwrap();
    assert_eq!(record_at(&store).instance_id, lease.instance_id());
}

/// A store whose probe writes (PUTs after the first) take `delay` on the
/// test clock each.
#[derive(Debug)]
struct SlowProbe {
    inner: MemoryStore,
    clock: TestClock,
    delay: Duration,
    puts: AtomicUsize,
    deadlines: std::sync::Mutex<Vec<Option<Instant>>>,
}

impl SlowProbe {
    fn new(clock: &TestClock, delay: Duration) -> Arc<Self> {
        Arc::new(SlowProbe {
            inner: MemoryStore::new(),
            clock: clock.clone(),
            delay,
            puts: AtomicUsize::new(0),
            deadlines: Default::default(),
        })
    }
}

impl Store for SlowProbe {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.deadlines.lock().unwrap().push(deadline);
        self.inner.get(key, deadline)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        self.deadlines.lock().unwrap().push(options.deadline);
        if self.puts.fetch_add(1, Ordering::SeqCst) > 0 {
            self.clock.advance(self.delay);
            if options.deadline.is_some_and(|d| self.clock.now() >= d) {
                return Err(StoreError::new(StoreErrorKind::Transport, "PUT", key).timed_out());
            }
        }
        self.inner.put(key, body, options)
    }

    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.deadlines.lock().unwrap().push(d);
        self.inner.delete(key, mode, d)
    }
}

#[test]
fn an_acquire_never_hands_out_an_already_fenced_lease() {
    let clock = TestClock::new();
    let store = SlowProbe::new(&clock, secs(8));
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    match Lease::acquire(store.clone(), "db", options) {
        Ok(lease) => panic!(
            "the probe took 24 s of a 20 s fence, yet the lease was handed out (may_write {})",
            lease.may_write()
        ),
        Err(e) => assert!(!matches!(e, LeaseError::Held { .. }), "{e}"),
    }
}

#[test]
fn every_request_of_an_acquire_is_bounded_by_its_deadline() {
    let clock = TestClock::new();
    let store = SlowProbe::new(&clock, Duration::ZERO);
    let deadline = clock.now() + secs(5);
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let mut contender = Contender::new(store.clone(), "db", options);
    let _taken = contender.try_acquire_before(Some(deadline)).unwrap();
    let deadlines = store.deadlines.lock().unwrap().clone();
    assert!(deadlines.len() >= 5, "{deadlines:?}");
    assert!(
        deadlines.iter().all(|d| d.is_some_and(|d| d <= deadline)),
        "{deadlines:?}"
    );
}

#[test]
fn inspect_survives_absurd_ttls_and_far_future_stamps() {
    let clock = TestClock::new();
    let store = Arc::new(MemoryStore::new());
    for ttl_s in [u64::MAX, 1 << 63, (1 << 63) - 1] {
        plant(&store, "odd", clock.wall() + secs(3600), ttl_s, 1);
        let seen = inspect(&*store, "db", &clock).unwrap().unwrap();
        let _ = (seen.expires_in(), seen.expires_in_s(), seen.age_s());
        assert!(seen.suspect);
    }
}

#[test]
fn release_is_one_conditional_write_bounded_by_its_deadline() {
    let store = common::Recording::new();
    let lease = Lease::acquire(store.clone(), "db", LeaseOptions::new(30)).unwrap();
    let before = store.inner.get(KEY, None).unwrap().version;
    let requests = store.inner.requests();
    let deadline = Instant::now() + secs(5);
    assert_eq!(
        lease.release_before(Some(deadline)).unwrap(),
        Released::Freed
    );
    assert_eq!(store.inner.requests(), requests + 1, "one request");
    assert_eq!(store.last_put_deadline(), Some(deadline));
    assert_eq!(store.inner.keys(), vec![KEY.to_string()], "nothing deleted");
    let record = record_at(&store.inner);
    assert!(record.is_released() && record.instance_id == lease.instance_id());
    assert_ne!(store.inner.get(KEY, None).unwrap().version, before);
}
