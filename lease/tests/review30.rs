//! Review of issue 30 (a store's write interval): schedules the change
//! gets wrong, each a failing test.

use bucket_lease_core::memory::{MemoryStore, WriteCount, WriteLimit};
use bucket_lease_core::spacing::SpacedStore;
use bucket_lease_core::store::{
    DeleteMode, Object, PutMode, PutOptions, Store, StoreError, Version,
};
use bucket_lease_core::{
    Clock, Contender, Event, Keeper, KeeperOptions, LeaseError, LeaseOptions, TestClock,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECOND: Duration = Duration::from_secs(1);
const COUNTS: [WriteCount; 2] = [WriteCount::Accepted, WriteCount::Every];

struct World {
    service: Arc<MemoryStore>,
    clock: TestClock,
    store: Arc<dyn Store>,
}

impl World {
    /// R2 as the profile knows it: one write of a key a second, on both
    /// sides.
    fn r2(counts: WriteCount) -> World {
        let clock = TestClock::new();
        let service = Arc::new(MemoryStore::new());
        service.limit_writes(
            WriteLimit {
                interval: SECOND,
                counts,
            },
            Arc::new(clock.clone()),
        );
        let store: Arc<dyn Store> = Arc::new(SpacedStore::new(
            service.clone(),
            SECOND,
            Arc::new(clock.clone()),
        ));
        World {
            service,
            clock,
            store,
        }
    }

    fn other_process(&self) -> Arc<dyn Store> {
        Arc::new(SpacedStore::new(
            self.service.clone(),
            SECOND,
            Arc::new(self.clock.clone()),
        ))
    }

    fn options(&self, ttl_s: u64) -> LeaseOptions {
        LeaseOptions::new(ttl_s).clock(Arc::new(self.clock.clone()))
    }

    fn contender(&self, ttl_s: u64) -> Contender {
        Contender::new(self.store.clone(), "db", self.options(ttl_s))
    }

    fn probe_objects(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .service
            .keys()
            .into_iter()
            .filter(|k| k.contains(".probe-"))
            .collect();
        keys.sort();
        keys
    }
}

/// Promise broken: a TTL the store accepts (TTL/3 >= interval, so 3 s on R2)
/// can be kept by a keeper. The spaced probe's write of the record an
/// interval after the acquire's moves the key's next turn to 2 intervals
/// after the acquire, which is the fence itself: the keeper's first renewal
/// (bounded by the write deadline) is never sent, and the lease fences.
#[test]
fn a_keeper_renews_a_lease_of_the_smallest_ttl_the_store_accepts() {
    for counts in COUNTS {
        let w = World::r2(counts);
        let lease = w.contender(3).try_acquire().unwrap();
        // The first renewal is due a third of a TTL after the acquire's
        // confirmation, which the acquire's one interval has reached.
        let keeper = Keeper::spawn(lease, KeeperOptions::new()).unwrap();
        let event = keeper
            .events()
            .recv_timeout(Duration::from_secs(10))
            .expect("an event");
        assert!(
            matches!(event, Event::Renewed { .. }),
            "{counts:?}: the first renewal must land before the fence, got {event:?}"
        );
    }
}

/// The same, without the keeper's thread: a renewal at its due time
/// (a third of a TTL after the confirmed acquire) bounded by the write
/// deadline, as the keeper and the pool send it.
#[test]
fn a_renewal_due_at_a_third_of_the_smallest_ttl_lands_before_the_fence() {
    for counts in COUNTS {
        let w = World::r2(counts);
        let lease = w.contender(3).try_acquire().unwrap();
        let due = lease.confirmed_at() + lease.renew_interval();
        if w.clock.now() < due {
            w.clock.advance(due - w.clock.now());
        }
        let deadline = lease.write_deadline().expect("held");
        let renewed = lease.renew_before(Some(deadline));
        assert!(renewed.is_ok(), "{counts:?}: {renewed:?}");
    }
}

/// A store whose next write panics (a bug, or a panic in a credentials
/// provider), and answers normally after.
#[derive(Debug)]
struct PanicsOnce {
    inner: MemoryStore,
    armed: AtomicBool,
}

impl Store for PanicsOnce {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        if self.armed.swap(false, Ordering::SeqCst) {
            panic!("the store panicked mid-write");
        }
        self.inner.put(key, body, options)
    }

    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        self.inner.delete(key, mode, deadline)
    }
}

/// Promise broken: a write of a key waits at most an interval after the
/// key's previous write (within its deadline). A write that panicked
/// (the keeper catches a panicking renewal and goes on: `renew_guarded`)
/// leaves its turn `in_flight` forever, so every later write of the key by
/// this store fails "not sent", for the life of the process; without a
/// deadline it would wait forever.
#[test]
fn a_write_that_panicked_does_not_keep_its_keys_turn_forever() {
    let clock = TestClock::new();
    let inner = Arc::new(PanicsOnce {
        inner: MemoryStore::new(),
        armed: AtomicBool::new(true),
    });
    let store = SpacedStore::new(inner, SECOND, Arc::new(clock.clone()));
    let options = PutOptions::new(PutMode::Overwrite);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.put("db/LEASE", b"1", &options)
    }));
    assert!(panicked.is_err());
    clock.advance(Duration::from_secs(60));
    let options = options.with_deadline(Some(clock.now() + Duration::from_secs(10)));
    let answer = store.put("db/LEASE", b"2", &options);
    assert!(
        answer.is_ok(),
        "a minute after the panic, with 10 s to go: {answer:?}"
    );
}

/// Promise broken: the spaced probe's objects are removed by the first
/// renewal or the release ("never left" except when a delete fails, and
/// then a warning names them). A lease lost before its first renewal (the
/// holder paused past its TTL, another process took over) is not released
/// by its drop (nothing of its record to free), and its probe objects are
/// left in the bucket for good, silently.
#[test]
fn a_lease_lost_before_its_first_renewal_removes_its_probe_objects_when_dropped() {
    let w = World::r2(WriteCount::Accepted);
    let lease = w.contender(3).try_acquire().unwrap();
    let ours = w.probe_objects();
    assert_eq!(ours.len(), 2);
    // Paused past the TTL; another process takes the key.
    w.clock.advance(Duration::from_secs(10));
    let other = Contender::new(w.other_process(), "db", w.options(3))
        .try_acquire()
        .unwrap();
    // Out of the other's write interval, then our renewal finds the loss.
    w.clock.advance(Duration::from_secs(2));
    match lease.renew() {
        Err(LeaseError::Lost { .. }) => {}
        other => panic!("expected the lease lost, got {other:?}"),
    }
    drop(lease);
    let left: Vec<String> = w
        .probe_objects()
        .into_iter()
        .filter(|k| ours.contains(k))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    drop(other);
}

/// The service, with the answer to the first create of a probe object
/// lost (it took effect): a lost answer, as on any network.
#[derive(Debug)]
struct LoseProbeCreate {
    service: Arc<MemoryStore>,
    armed: AtomicBool,
}

impl Store for LoseProbeCreate {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.service.get(key, deadline)
    }

    fn concurrent_requests(&self) -> bool {
        self.service.concurrent_requests()
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        if key.contains(".probe-")
            && options.mode == PutMode::Create
            && self.armed.swap(false, Ordering::SeqCst)
        {
            self.service.lose_next_answers(1);
        }
        self.service.put(key, body, options)
    }

    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        self.service.delete(key, mode, deadline)
    }
}

/// Promise broken: the spaced probe answers as the ordinary probe (which
/// takes this lease: a lost answer is settled, never an error of its own).
/// Round 1's creates of the probe objects are sent by `put_resending`,
/// which is for writes meant to be refused: the create whose answer was
/// lost is sent again, refused (the object exists, ours), and the refusal
/// fails the acquire; the object is not in the list to remove, so it stays
/// in the bucket.
#[test]
fn a_lost_answer_to_a_probe_objects_create_does_not_fail_the_acquire() {
    let clock = TestClock::new();
    let service = Arc::new(MemoryStore::new());
    service.limit_writes(
        WriteLimit {
            interval: SECOND,
            counts: WriteCount::Accepted,
        },
        Arc::new(clock.clone()),
    );
    let lossy = Arc::new(LoseProbeCreate {
        service: service.clone(),
        armed: AtomicBool::new(true),
    });
    let store: Arc<dyn Store> = Arc::new(SpacedStore::new(lossy, SECOND, Arc::new(clock.clone())));
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let acquired = Contender::new(store, "db", options).try_acquire();
    let probes: Vec<String> = service
        .keys()
        .into_iter()
        .filter(|k| k.contains(".probe-"))
        .collect();
    assert!(
        acquired.is_ok(),
        "{acquired:?}; probe objects in the bucket: {probes:?}"
    );
}

/// Promise broken: "a wait over u32::MAX milliseconds (49 days) is kept as
/// that" (`StoreError::throttled`). A Retry-After of exactly u32::MAX ms
/// passes `u32::try_from` and then `+ 1` overflows: a panic in a debug
/// build, and in a release build the error says it is not throttled at all.
#[test]
fn a_throttled_error_keeps_a_retry_after_of_u32_max_milliseconds() {
    use bucket_lease_core::store::StoreErrorKind;
    let wait = Duration::from_millis(u64::from(u32::MAX));
    let e = std::panic::catch_unwind(|| {
        StoreError::new(StoreErrorKind::Transport, "PUT", "k").throttled(Some(wait))
    });
    let e = e.expect("no overflow");
    assert!(e.is_throttled(), "{e:?}");
    assert!(e.retry_after().is_some_and(|r| r >= wait - SECOND), "{e:?}");
}
