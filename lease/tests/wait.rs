//! Waiting for a lease: `Contender::acquire_with` sleeps until the record
//! it read can expire by its own clock (or until its suspect watch ends),
//! re-reads at least every `max_reread` so a release is noticed early,
//! never passes its deadline, stops at once on a permanent error, and
//! stops when cancelled from another thread.

use bucket_lease_core::memory::{MemoryStore, Misbehaviour};
use bucket_lease_core::{
    clock::Clock, clock::TestClock, lease::Cancel, record::LeaseRecord, store::PutMode,
    store::PutOptions, Contender, LeaseError, LeaseOptions, Store, Wait,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TTL_S: u64 = 30;

fn contender(store: &Arc<MemoryStore>, clock: &TestClock, id: &str) -> Contender {
    let options = LeaseOptions::new(TTL_S).clock(Arc::new(clock.clone()));
    Contender::new(Arc::clone(store) as Arc<dyn Store>, "job", options).with_instance_id(id)
}

/// A store and a test clock on which instance `a` holds the lease.
fn held_by_a() -> (Arc<MemoryStore>, TestClock, bucket_lease_core::Lease) {
    let store = Arc::new(MemoryStore::new());
    let clock = TestClock::new();
    let holder = contender(&store, &clock, "a")
        .try_acquire()
        .expect("a takes it");
    (store, clock, holder)
}

/// The lease was taken `waited` after `since`: one TTL, at most 50 ms late.
fn assert_one_ttl_late_at_most_50_ms(waited: Duration, since: &str) {
    assert!(
        waited >= Duration::from_secs(TTL_S)
            && waited <= Duration::from_secs(TTL_S) + Duration::from_millis(50),
        "taken {waited:?} {since}; that was {TTL_S} s"
    );
}

fn elapsed(clock: &TestClock, since: Instant) -> Duration {
    clock.now().saturating_duration_since(since)
}

#[test]
fn a_waiter_takes_over_the_moment_a_crashed_holders_record_expires() {
    let (store, clock, holder) = held_by_a();
    let start = clock.now();
    // `a` crashes: it never renews. `b` waits with the default re-read.
    let mut b = contender(&store, &clock, "b");
    let lease = b
        .acquire_with(&Wait::until(start + Duration::from_secs(3 * TTL_S)))
        .expect("b takes over once the record expires");
    let waited = elapsed(&clock, start);
    assert_one_ttl_late_at_most_50_ms(waited, "after a's last renewal (the record expired)");
    assert_eq!(lease.epoch(), holder.epoch() + 1);
}

#[test]
fn a_waiter_rereads_instead_of_sleeping_blindly_to_the_expiry() {
    let (store, clock, _holder) = held_by_a();
    let start = clock.now();
    let before = store.requests();
    let mut b = contender(&store, &clock, "b");
    let wait =
        Wait::until(start + Duration::from_secs(TTL_S) / 2).max_reread(Duration::from_secs(2));
    let err = b
        .acquire_with(&wait)
        .expect_err("a's record is fresh for the whole wait");
    // 15 s of waiting, re-read at most every 3 s (2 s jittered up to 1.5x).
    let reads = store.requests() - before;
    assert!(
        reads >= 5,
        "only {reads} requests in 15 s with a 2 s re-read"
    );
    assert!(
        reads <= 16,
        "{reads} requests in 15 s: polling, not waiting"
    );
    assert!(
        matches!(&err, LeaseError::Held { holder, .. } if holder == "a"),
        "at the deadline the error names the holder: {err:?}"
    );
    assert!(
        clock.now() <= start + Duration::from_secs(TTL_S) / 2,
        "the wait slept {:?} past its deadline",
        elapsed(&clock, start).saturating_sub(Duration::from_secs(TTL_S) / 2)
    );
}

/// A store that runs `hook` once, just before its `n`th read.
struct HookAt {
    inner: Arc<MemoryStore>,
    reads: std::sync::atomic::AtomicU64,
    n: u64,
    hook: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl std::fmt::Debug for HookAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HookAt(read {})", self.n)
    }
}

impl Store for HookAt {
    fn get(
        &self,
        key: &str,
        deadline: Option<Instant>,
    ) -> Result<bucket_lease_core::store::Object, bucket_lease_core::StoreError> {
        let n = self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        if n == self.n {
            if let Some(hook) = self.hook.lock().unwrap().take() {
                hook();
            }
        }
        self.inner.get(key, deadline)
    }
    fn put(
        &self,
        key: &str,
        body: &[u8],
        options: &PutOptions,
    ) -> Result<bucket_lease_core::store::Version, bucket_lease_core::StoreError> {
        self.inner.put(key, body, options)
    }
    fn delete(
        &self,
        key: &str,
        mode: &bucket_lease_core::store::DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), bucket_lease_core::StoreError> {
        self.inner.delete(key, mode, deadline)
    }
}

#[test]
fn a_release_is_noticed_at_the_next_reread() {
    let (store, clock, holder) = held_by_a();
    let start = clock.now();
    // `a` releases just before b's third read.
    let hooked = Arc::new(HookAt {
        inner: Arc::clone(&store),
        reads: Default::default(),
        n: 3,
        hook: std::sync::Mutex::new(Some(Box::new(move || {
            holder.release().expect("a releases");
        }))),
    });
    let options = LeaseOptions::new(TTL_S).clock(Arc::new(clock.clone()));
    let mut b = Contender::new(hooked as Arc<dyn Store>, "job", options).with_instance_id("b");
    let wait =
        Wait::until(start + Duration::from_secs(3 * TTL_S)).max_reread(Duration::from_secs(1));
    let lease = b.acquire_with(&wait).expect("b takes the released lease");
    let waited = elapsed(&clock, start);
    assert!(
        waited <= Duration::from_secs(3),
        "b took {waited:?} to notice a release made before its third read"
    );
    assert_eq!(lease.epoch(), 2);
}

#[test]
fn a_permanent_error_ends_the_wait_at_once() {
    let store = Arc::new(MemoryStore::new());
    store.set(Misbehaviour::IgnoreIfNoneMatch);
    let clock = TestClock::new();
    let start = clock.now();
    let err = contender(&store, &clock, "b")
        .acquire_with(&Wait::until(start + Duration::from_secs(600)))
        .expect_err("a service that ignores If-None-Match gives no lease");
    assert!(
        matches!(err, LeaseError::ConditionsIgnored { .. }),
        "{err:?}"
    );
    assert_eq!(
        elapsed(&clock, start),
        Duration::ZERO,
        "it slept before giving up"
    );
}

#[test]
fn failed_requests_are_retried_until_the_deadline() {
    let store = Arc::new(MemoryStore::new());
    let clock = TestClock::new();
    let start = clock.now();
    store.fail_next_requests(6);
    let lease = contender(&store, &clock, "b")
        .acquire_with(&Wait::until(start + Duration::from_secs(60)))
        .expect("the store comes back within the wait");
    assert_eq!(lease.epoch(), 1);
    assert!(elapsed(&clock, start) < Duration::from_secs(60));

    store.fail_next_requests(u32::MAX as usize);
    let err = contender(&store, &clock, "c")
        .acquire_with(&Wait::until(clock.now() + Duration::from_secs(10)))
        .expect_err("the store never answers");
    assert!(matches!(err, LeaseError::Store(_)), "{err:?}");
}

#[test]
fn a_suspect_record_is_taken_when_its_watch_ends() {
    let store = Arc::new(MemoryStore::new());
    let clock = TestClock::new();
    // A dead holder's record stamped a day ahead.
    let stamp = bucket_lease_core::record::format_stamp(clock.wall() + Duration::from_secs(86_400));
    let ghost = LeaseRecord::new("ghost", stamp.clone(), stamp, TTL_S, 9);
    store
        .put(
            "job/LEASE",
            &ghost.to_bytes(),
            &PutOptions::new(PutMode::Create),
        )
        .unwrap();
    let start = clock.now();
    let lease = contender(&store, &clock, "b")
        .acquire_with(&Wait::until(start + Duration::from_secs(3 * TTL_S)))
        .expect("the suspect record is taken over after its watch");
    let waited = elapsed(&clock, start);
    assert_one_ttl_late_at_most_50_ms(waited, "after first seen (the watch ended)");
    assert_eq!(lease.epoch(), 10);
}

#[test]
fn a_wait_is_cancelled_from_another_thread() {
    let store = Arc::new(MemoryStore::new());
    let options = LeaseOptions::new(TTL_S);
    let _holder = Contender::new(Arc::clone(&store) as Arc<dyn Store>, "job", options.clone())
        .try_acquire()
        .expect("a takes it");
    let cancel = Cancel::new();
    let waiter = {
        let (store, cancel) = (Arc::clone(&store), cancel.clone());
        std::thread::spawn(move || {
            let mut b = Contender::new(store as Arc<dyn Store>, "job", options);
            let deadline = Instant::now() + Duration::from_secs(120);
            b.acquire_with(&Wait::until(deadline).cancel(cancel))
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    assert!(!cancel.is_cancelled());
    cancel.cancel();
    let err = waiter.join().expect("no panic").expect_err("cancelled");
    assert!(matches!(err, LeaseError::Cancelled { .. }), "{err:?}");
    assert!(err.to_string().contains("cancelled"), "{err}");
}

#[test]
fn a_cancelled_handle_stops_the_next_wait_before_any_request() {
    let store = Arc::new(MemoryStore::new());
    let clock = TestClock::new();
    let cancel = Cancel::new();
    cancel.cancel();
    let before = store.requests();
    let err = contender(&store, &clock, "b")
        .acquire_with(&Wait::until(clock.now() + Duration::from_secs(60)).cancel(cancel))
        .expect_err("cancelled before it began");
    assert!(matches!(err, LeaseError::Cancelled { .. }), "{err:?}");
    assert_eq!(store.requests(), before);
}

/// One default bound for an attempt: a held set's is a waiter's, the
/// same item.
#[test]
fn a_held_set_and_a_waiter_bound_an_attempt_alike() {
    assert_eq!(
        bucket_lease_core::held_set::DEFAULT_ATTEMPT_TIMEOUT,
        bucket_lease_core::lease::DEFAULT_ATTEMPT_TIMEOUT
    );
}
