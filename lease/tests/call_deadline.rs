//! A call made without a deadline of its own is bounded as a whole by
//! `DEFAULT_CALL_TIMEOUT`: it computes one deadline at its start and gives
//! it to every request. Checked on a store that, once told to, answers no
//! request before its deadline (and would hold a request without one for
//! two real seconds, then fail it).

use bucket_lease_core::inspect::{break_lease, inspect};
use bucket_lease_core::lease::DEFAULT_CALL_TIMEOUT;
use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::{
    clock::Clock, clock::TestClock, store::DeleteMode, store::Object, store::PutOptions,
    store::StoreErrorKind, store::Version, Contender, Lease, LeaseOptions, Store, StoreError,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a request without a deadline costs on the hanging store.
const NO_DEADLINE_HANG: Duration = Duration::from_secs(2);

/// A memory store that records each request's deadline and, while
/// `hang` is on, answers none: it moves the test clock to the request's
/// deadline and times out there.
#[derive(Debug)]
struct Hanging {
    inner: MemoryStore,
    clock: TestClock,
    hang: AtomicBool,
    deadlines: Mutex<Vec<(&'static str, Option<Instant>)>>,
}

impl Hanging {
    fn new(clock: &TestClock) -> Arc<Self> {
        Arc::new(Hanging {
            inner: MemoryStore::new(),
            clock: clock.clone(),
            hang: AtomicBool::new(false),
            deadlines: Mutex::new(Vec::new()),
        })
    }

    /// Record the request; while hanging, wait it out and fail it.
    fn enter(
        &self,
        method: &'static str,
        key: &str,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        self.deadlines.lock().unwrap().push((method, deadline));
        if !self.hang.load(Ordering::SeqCst) {
            return Ok(());
        }
        match deadline {
            Some(d) => self
                .clock
                .advance(d.saturating_duration_since(self.clock.now())),
            None => std::thread::sleep(NO_DEADLINE_HANG),
        }
        Err(StoreError::new(StoreErrorKind::Transport, method, key).timed_out())
    }

    /// Start hanging, forgetting the requests recorded so far.
    fn hang_from_now(&self) {
        self.deadlines.lock().unwrap().clear();
        self.hang.store(true, Ordering::SeqCst);
    }

    /// Every request since the last [`hang_from_now`] carried a deadline
    /// no later than `start` + [`DEFAULT_CALL_TIMEOUT`], and there was at
    /// least one; and the call took no longer than that on the clock.
    fn assert_bounded_from(&self, start: Instant, what: &str) {
        let limit = start + DEFAULT_CALL_TIMEOUT;
        let seen = self.deadlines.lock().unwrap().clone();
        assert!(!seen.is_empty(), "{what}: no request was sent");
        for (method, deadline) in &seen {
            match deadline {
                Some(d) => assert!(
                    *d <= limit,
                    "{what}: {method} got a deadline {:?} past the call's bound",
                    d.saturating_duration_since(start)
                ),
                None => panic!("{what}: {method} was sent without a deadline ({seen:?})"),
            }
        }
        assert!(
            self.clock.now() <= limit,
            "{what}: the call took {:?}",
            self.clock.now().saturating_duration_since(start)
        );
    }
}

impl Store for Hanging {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.enter("GET", key, deadline)?;
        self.inner.get(key, deadline)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        self.enter("PUT", key, options.deadline)?;
        self.inner.put(key, body, options)
    }

    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.enter("DELETE", key, d)?;
        self.inner.delete(key, mode, d)
    }
}

fn contender(store: &Arc<Hanging>, clock: &TestClock) -> Contender {
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    Contender::new(store.clone(), "job", options)
}

/// A store and clock on which a lease is held; the store hangs from here.
fn held() -> (Arc<Hanging>, TestClock, Contender, Lease) {
    let clock = TestClock::new();
    let store = Hanging::new(&clock);
    let mut c = contender(&store, &clock);
    let lease = c.try_acquire().expect("taken");
    store.hang_from_now();
    (store, clock, c, lease)
}

#[test]
fn try_acquire_gives_every_request_one_deadline() {
    let clock = TestClock::new();
    let store = Hanging::new(&clock);
    // Answered: the read, the create and the probe's four writes.
    let start = clock.now();
    let lease = contender(&store, &clock).try_acquire().expect("taken");
    store.assert_bounded_from(start, "try_acquire");
    assert_eq!(store.deadlines.lock().unwrap().len(), 6);
    drop(lease);

    // Unanswered: it gives up at its bound.
    let clock = TestClock::new();
    let store = Hanging::new(&clock);
    store.hang_from_now();
    let start = clock.now();
    contender(&store, &clock)
        .try_acquire()
        .expect_err("nothing answers");
    store.assert_bounded_from(start, "try_acquire, hanging");
}

#[test]
fn renew_gives_every_request_one_deadline() {
    let (store, clock, _c, lease) = held();
    let start = clock.now();
    lease.renew().expect_err("nothing answers");
    store.assert_bounded_from(start, "renew");
}

#[test]
fn release_gives_every_request_one_deadline() {
    let (store, clock, _c, lease) = held();
    let start = clock.now();
    lease.release().expect_err("nothing answers");
    store.assert_bounded_from(start, "release");
}

#[test]
fn release_abandoned_gives_every_request_one_deadline() {
    let (store, clock, c, _lease) = held();
    let start = clock.now();
    c.release_abandoned().expect_err("nothing answers");
    store.assert_bounded_from(start, "release_abandoned");
}

#[test]
fn inspect_gives_its_read_one_deadline() {
    let (store, clock, _c, _lease) = held();
    let start = clock.now();
    inspect(&*store, "job", &clock).expect_err("nothing answers");
    store.assert_bounded_from(start, "inspect");
}

#[test]
fn break_gives_every_request_one_deadline() {
    // Answered: the read and the conditional write.
    let (store, clock, _c, lease) = held();
    store.hang.store(false, Ordering::SeqCst);
    let start = clock.now();
    break_lease(&*store, "job", lease.instance_id(), &clock).expect("broken");
    store.assert_bounded_from(start, "break");

    // The write unanswered: it gives up at its bound, reads included.
    let (store, clock, _c, lease) = held();
    store.hang.store(false, Ordering::SeqCst);
    let hang_writes = Arc::new(HangWrites(store.clone()));
    let start = clock.now();
    break_lease(&*hang_writes, "job", lease.instance_id(), &clock).expect_err("no answer");
    store.assert_bounded_from(start, "break, hanging write");
}

/// [`Hanging`] with only its writes hanging.
#[derive(Debug)]
struct HangWrites(Arc<Hanging>);

impl Store for HangWrites {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.0.get(key, deadline)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        self.0.hang.store(true, Ordering::SeqCst);
        let answer = self.0.put(key, body, options);
        self.0.hang.store(false, Ordering::SeqCst);
        answer
    }

    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.0.delete(key, mode, d)
    }
}
