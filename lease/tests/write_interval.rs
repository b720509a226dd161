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
//!   until when.

use bucket_lease_core::memory::{MemoryStore, Misbehaviour, WriteCount, WriteLimit};
use bucket_lease_core::record::{format_stamp, LeaseRecord};
use bucket_lease_core::spacing::SpacedStore;
use bucket_lease_core::store::{PutMode, PutOptions, Store};
use bucket_lease_core::{Clock, Contender, LeaseError, LeaseOptions, Released, TestClock};
use std::sync::Arc;
use std::time::Duration;

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
