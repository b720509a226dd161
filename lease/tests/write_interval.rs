//! A store that takes one write of a key per interval (Cloudflare R2: one a
//! second, 429 beyond it), on the in-memory store with a test clock, under
//! both readings of the rule (only accepted writes count; every decided
//! write counts):
//!
//! - the lease plans for it when the store says so
//!   ([`Store::write_interval`]): the acquire's probe writes no key twice
//!   in an interval, a release right after an acquire waits its turn, a
//!   TTL whose renewals would come faster is refused;
//! - a throttled answer (another process's write in the interval) is
//!   retried after its `Retry-After`, never taken for a holder;
//! - an acquire whose hand-back cannot land says the record is left, and
//!   until when;
//! - the schedules a review found wrong: the shortest TTL the store takes
//!   kept by a keeper (the probe's second write of the record is a
//!   renewal), a write that panicked, a lease lost before its first
//!   renewal, a lost answer to a probe object's create.

use bucket_lease_core::memory::{MemoryStore, Misbehaviour, WriteCount, WriteLimit};
use bucket_lease_core::record::{format_stamp, LeaseRecord};
use bucket_lease_core::spacing::SpacedStore;
use bucket_lease_core::store::{
    DeleteMode, Object, PutMode, PutOptions, Store, StoreError, Version,
};
use bucket_lease_core::KeptLease;
use bucket_lease_core::{
    clock::Clock, clock::TestClock, Contender, Event, Keeper, KeeperOptions, LeaseError,
    LeaseOptions, Released,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: &str = "db/LEASE";
const SECOND: Duration = Duration::from_secs(1);
const COUNTS: [WriteCount; 2] = [WriteCount::Accepted, WriteCount::Every];

/// One limited service, and its clients.
struct World {
    service: Arc<MemoryStore>,
    clock: TestClock,
    /// The client this process's contenders use.
    store: Arc<dyn Store>,
}

impl World {
    /// A service that turns away a write of a key within `limit` of its
    /// last counted write; this process's client spaces its own writes by
    /// `spaced`, when given.
    fn new(limit: Duration, counts: WriteCount, spaced: Option<Duration>) -> World {
        let clock = TestClock::new();
        let service = Arc::new(MemoryStore::new());
        service.limit_writes(
            WriteLimit {
                interval: limit,
                counts,
            },
            Arc::new(clock.clone()),
        );
        let store: Arc<dyn Store> = match spaced {
            Some(interval) => Arc::new(SpacedStore::new(
                service.clone(),
                interval,
                Arc::new(clock.clone()),
            )),
            None => service.clone(),
        };
        World {
            service,
            clock,
            store,
        }
    }

    /// R2 as the profile knows it: a second, on both sides.
    fn r2(counts: WriteCount) -> World {
        World::new(SECOND, counts, Some(SECOND))
    }

    /// Another process's client of the same service, spaced by a second.
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

    fn record(&self) -> LeaseRecord {
        LeaseRecord::parse(&self.service.peek(KEY).expect("a LEASE object")).expect("a record")
    }

    fn throttled(&self) -> u64 {
        self.service.throttled()
    }

    fn probe_objects(&self) -> Vec<String> {
        self.service
            .keys()
            .into_iter()
            .filter(|k| k.contains(".probe-"))
            .collect()
    }
}

#[test]
fn an_acquire_writes_no_key_twice_in_an_interval_and_costs_one_interval() {
    for counts in COUNTS {
        let w = World::r2(counts);
        let start = w.clock.now();
        let lease = w.contender(3).try_acquire().unwrap();
        assert_eq!(w.throttled(), 0, "{counts:?}: nothing was turned away");
        let took = w.clock.now() - start;
        assert!(
            (SECOND..SECOND * 2).contains(&took),
            "{counts:?}: one interval ({took:?})"
        );
        assert!(lease.may_write());
        // The probe's objects are left for the first renewal to remove.
        assert_eq!(w.probe_objects().len(), 2, "{counts:?}");
        w.clock.advance(SECOND);
        lease.renew().unwrap();
        assert!(w.probe_objects().is_empty(), "{counts:?}: removed");
        assert_eq!(lease.release().unwrap(), Released::Freed);
        assert_eq!(w.throttled(), 0, "{counts:?}");
        assert!(w.record().is_released());
    }
}

#[test]
fn a_release_right_after_the_acquire_waits_its_turn_and_removes_the_probe_objects() {
    for counts in COUNTS {
        let w = World::r2(counts);
        let lease = w.contender(3).try_acquire().unwrap();
        let acquired = w.clock.now();
        assert_eq!(lease.release().unwrap(), Released::Freed, "{counts:?}");
        assert!(w.clock.now() >= acquired + SECOND, "{counts:?}: waited");
        assert!(w.record().is_released(), "{counts:?}");
        assert!(w.probe_objects().is_empty(), "{counts:?}");
        assert_eq!(w.throttled(), 0, "{counts:?}");
        // And the next acquire, at once, takes it.
        let next = w.contender(3).try_acquire().unwrap();
        assert_eq!(next.epoch(), 2, "{counts:?}");
        assert_eq!(w.throttled(), 0, "{counts:?}");
    }
}

#[test]
fn a_ttl_whose_renewals_come_faster_than_the_interval_is_refused() {
    let w = World::r2(WriteCount::Accepted);
    let err = w.contender(2).try_acquire().unwrap_err();
    assert_eq!(
        err,
        LeaseError::TtlTooShort {
            ttl_s: 2,
            min_ttl_s: 3,
            write_interval: SECOND
        }
    );
    assert!(err.to_string().contains("at least 3 s"), "{err}");
    assert!(w.service.keys().is_empty(), "nothing was written");
    // 1.5 s: 4.5 s is not whole, so 5.
    let slow = World::new(SECOND * 3 / 2, WriteCount::Accepted, Some(SECOND * 3 / 2));
    match slow.contender(4).try_acquire().unwrap_err() {
        LeaseError::TtlTooShort { min_ttl_s, .. } => assert_eq!(min_ttl_s, 5),
        other => panic!("{other:?}"),
    }
    let lease = slow.contender(5).try_acquire().unwrap();
    assert!(lease.may_write());
}

#[test]
fn renewals_at_the_ttls_cadence_are_never_turned_away() {
    for counts in COUNTS {
        let w = World::r2(counts);
        let lease = w.contender(3).try_acquire().unwrap();
        for _ in 0..10 {
            w.clock.advance(SECOND);
            lease.renew().unwrap();
        }
        assert_eq!(w.throttled(), 0, "{counts:?}");
    }
}

/// Another process wrote the key a moment ago: the service turns our write
/// away with `Retry-After`; the acquire waits that long, reads again, and
/// takes the lease, never saying it is held.
#[test]
fn a_throttled_write_is_retried_after_its_retry_after_and_never_called_held() {
    for counts in COUNTS {
        let w = World::r2(counts);
        let options = w.options(3);
        let other = Contender::new(w.other_process(), "db", options)
            .try_acquire()
            .unwrap();
        assert_eq!(other.release().unwrap(), Released::Freed);
        // Its release landed just now: our client has not seen it.
        let start = w.clock.now();
        let lease = w
            .contender(3)
            .try_acquire()
            .unwrap_or_else(|e| panic!("{counts:?}: {e}"));
        assert!(w.throttled() >= 1, "{counts:?}: a write was turned away");
        assert!(w.clock.now() >= start + SECOND, "{counts:?}");
        assert_eq!(lease.epoch(), 2, "{counts:?}");
        assert!(lease.may_write());
    }
}

/// The service takes one write a minute, the client spaces by a second:
/// the probe's write of our record is turned away, and so is every
/// hand-back until the deadline. The error says the record is left, and
/// until when it keeps the key.
#[test]
fn a_hand_back_that_cannot_land_says_the_record_is_left_and_until_when() {
    let w = World::new(Duration::from_secs(60), WriteCount::Accepted, Some(SECOND));
    let deadline = w.clock.now() + Duration::from_secs(10);
    let written = w.clock.wall();
    let err = w
        .contender(30)
        .try_acquire_before(Some(deadline))
        .unwrap_err();
    let LeaseError::RecordLeft {
        key,
        cause,
        blocks_until,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(key, KEY);
    assert!(
        cause.store_error().is_some_and(|e| e.is_throttled()),
        "{cause:?}"
    );
    assert!(!w.record().is_released(), "the record is left");
    assert_eq!(
        *blocks_until,
        format_stamp(written + Duration::from_secs(30))
    );
    let text = err.to_string();
    assert!(text.contains(&format!("until {blocks_until}")), "{text}");
    assert!(text.contains("could not be handed back"), "{text}");
    assert!(w.clock.now() <= deadline, "within the deadline");
    assert!(err.cause().store_error().is_some());
}

/// On a limited store the probe checks its refusals on objects of its own;
/// it must still catch every service that ignores a condition, and answer
/// as the probe that writes the record.
#[test]
fn the_spaced_probe_answers_as_the_probe_that_writes_the_record() {
    use Misbehaviour::*;
    let answer = |spaced: bool, switches: &[Misbehaviour]| {
        let w = if spaced {
            World::r2(WriteCount::Every)
        } else {
            World::new(Duration::ZERO, WriteCount::Accepted, None)
        };
        for switch in switches {
            w.service.set(*switch);
        }
        let answer = match w.contender(30).try_acquire() {
            Ok(lease) => format!("held, {:?}", lease.exclusion()),
            // When the record was left is a matter of each world's clock.
            Err(e) => format!(
                "{:?}, record left: {}",
                e.cause(),
                matches!(e, LeaseError::RecordLeft { .. })
            ),
        };
        let record = w
            .service
            .peek(KEY)
            .and_then(|b| LeaseRecord::parse(&b))
            .map_or("none".into(), |r| format!("released: {}", r.is_released()));
        (answer, record)
    };
    let ignored = [IgnoreIfNoneMatch, IgnoreIfMatch, CreateOnIfMatchAbsent];
    let mut cases: Vec<Vec<Misbehaviour>> = (0..8u32)
        .map(|bits| {
            (0..3)
                .filter(|i| bits & (1 << i) != 0)
                .map(|i| ignored[i])
                .collect()
        })
        .collect();
    for other in [NotModifiedOnCreate, RefuseOwnEtag, IgnoreIfMatchOnDelete] {
        cases.push(vec![other]);
        cases.push(vec![other, IgnoreIfMatch]);
    }
    for switches in cases {
        assert_eq!(
            answer(true, &switches),
            answer(false, &switches),
            "{switches:?}"
        );
    }
}

/// A create-only write the service answered 429 is not a refusal: the
/// store's error says throttled and may have landed.
#[test]
fn a_turned_away_write_is_a_throttled_answer_with_its_retry_after() {
    let w = World::new(SECOND, WriteCount::Accepted, None);
    let options = PutOptions::new(PutMode::Create);
    w.service.put("k", b"1", &options).unwrap();
    w.clock.advance(Duration::from_millis(300));
    let e = w.service.put("k", b"2", &options).unwrap_err();
    assert!(
        e.is_throttled() && !e.is_refusal() && e.may_have_landed(),
        "{e}"
    );
    assert_eq!(e.retry_after(), Some(Duration::from_millis(700)));
    assert!(e.to_string().contains("throttling"), "{e}");
    w.clock.advance(Duration::from_millis(700));
    assert!(w.service.put("k", b"2", &options).unwrap_err().is_refusal());
}

/// The promise: a TTL the store accepts (TTL/3 >= interval, so 3 s on R2)
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
        // Time goes on, a tenth of a second at a time, until the keeper says
        // something.
        let event = (0..100)
            .find_map(|_| {
                w.clock.advance(Duration::from_millis(100));
                keeper.events().recv_timeout(Duration::from_millis(50)).ok()
            })
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
        // Before the fence, not at it: a write that waits for its turn until
        // the write deadline lands there only on a test clock.
        assert!(w.clock.now() < deadline, "{counts:?}: renewed at the fence");
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

/// The promise: a write of a key waits at most an interval after the
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

/// The promise: the spaced probe's objects are removed by the first
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

/// The promise: the spaced probe answers as the ordinary probe (which
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

/// The promise: "a wait over u32::MAX milliseconds (49 days) is kept as
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

/// An acquire given less than one and a half intervals writes nothing: cut
/// short between its two writes of the record, it would leave the record
/// behind, keeping the key from everyone until its TTL.
#[test]
fn an_acquire_whose_deadline_cannot_hold_the_probe_writes_nothing() {
    let w = World::r2(WriteCount::Accepted);
    let deadline = w.clock.now() + Duration::from_millis(1200);
    let err = w
        .contender(3)
        .try_acquire_before(Some(deadline))
        .unwrap_err();
    let store_error = err.store_error().expect("a store error");
    assert_eq!(
        store_error.delivery(),
        bucket_lease_core::store::Delivery::NotSent,
        "{err}"
    );
    assert!(err.to_string().contains("needs at least 1.5s"), "{err}");
    assert!(w.service.keys().is_empty(), "nothing was written");
}

/// A wait whose attempts are shorter than two intervals gives each attempt
/// two intervals, so that it can take the lease at all.
#[test]
fn a_wait_gives_each_attempt_two_intervals() {
    let w = World::r2(WriteCount::Every);
    let wait = bucket_lease_core::Wait::until(w.clock.now() + Duration::from_secs(20))
        .attempt_timeout(Duration::from_millis(300));
    let lease = w.contender(3).acquire_with(&wait).expect("taken");
    assert!(lease.may_write());
    assert_eq!(w.throttled(), 0);
}

/// Review (issue 41): a keeper given no practical bound on its release
/// (`release_timeout(Duration::MAX)`, which the driver's `Work::Release`
/// reads as `None`: "past what an instant can hold") on a store with a
/// write interval. The release's deadline adds the interval to the
/// timeout unchecked, before the release's panic guard: the keeper's
/// thread dies of the overflow, no release is sent and no `Released`
/// event comes, and `stop` says the lease was lost.
#[test]
fn a_keeper_with_an_unbounded_release_timeout_releases_on_a_store_with_a_write_interval() {
    let w = World::r2(WriteCount::Accepted);
    let lease = w.contender(30).try_acquire().unwrap();
    let keeper = Keeper::spawn(lease, KeeperOptions::new().release_timeout(Duration::MAX)).unwrap();
    let events = keeper.events().clone();
    w.clock.advance(SECOND);
    assert_eq!(keeper.stop(), Ok(Released::Freed));
    assert!(w.record().is_released(), "the record is freed");
    assert!(
        events
            .try_iter()
            .any(|e| matches!(e, Event::Released(Ok(Released::Freed)))),
        "the release is reported"
    );
}
