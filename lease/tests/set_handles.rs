//! A held set's handles at the edges: the event of a prefix given up
//! carries what its stop answered (through the held prefix or its pooled
//! lease); one prefix spelt two ways (`shards/7`, `shards/7/`, the root as
//! `""` or `/`) is one prefix, held once across sets; a stale clone leaves
//! the prefix held by the set's newer lease; a stop after a failed release
//! is not `Ok`; a stop racing a loss never answers `Ok`. And one edge of a
//! spaced store: a completion whose wait for its key's turn ends after the
//! deadline (a clock that wakes late) publishes nothing. Two of these
//! failed when a review wrote them, and were fixed.

mod sets;
use bucket_lease_core::held_set::{HeldPrefix, SetEvent};
use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::{
    clock::TestClock, HeldSet, KeeperPool, KeptLease, LeaseError, LeaseOptions, PoolOptions,
    Released, Store,
};
use sets::{options, set, taken, PATIENCE, TTL_S};
use std::sync::Arc;
use std::time::Duration;

const PREFIX: &str = "db";

fn released_event(set: &HeldSet) -> (String, Result<Released, LeaseError>) {
    match set.events().recv_timeout(PATIENCE) {
        Ok(SetEvent::Released { prefix, released }) => (prefix, released),
        other => panic!("expected Released, got {other:?}"),
    }
}

// ---------------------------------------------------------------------
// held_set.rs module docs: "A prefix can be given up by its HeldPrefix's
// stop (or its pooled lease's): released at once, ... reported
// (SetEvent::Released, with what the stop answered)".

/// The given-up prefix's event, when the stop was its pooled lease's
/// (`HeldPrefix::pooled`), says what that stop answered. On 5ce69d4 the
/// set answers the event from `stop_answer_after_leaving`, which maps a
/// clean first answer to `AlreadyFree`: the stop answered `Ok(Freed)`,
/// the event says `Ok(AlreadyFree)`.
#[test]
fn a_pooled_stops_released_event_carries_what_the_stop_answered() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let set = set(&store, &clock, &[PREFIX]);
    taken(&set);
    let held = set.get(PREFIX).expect("held");
    let answer = held.pooled().clone().stop();
    assert_eq!(answer, Ok(Released::Freed), "held to the end and freed");
    let (prefix, released) = released_event(&set);
    assert_eq!(prefix, PREFIX);
    assert_eq!(
        released, answer,
        "the event must carry what the stop answered"
    );
    set.stop();
}

/// The same promise through the held prefix's own stop: the event says
/// what the stop answered (it does).
#[test]
fn a_held_prefixs_released_event_carries_what_the_stop_answered() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let set = set(&store, &clock, &[PREFIX]);
    taken(&set);
    let answer = set.get(PREFIX).expect("held").stop();
    assert_eq!(answer, Ok(Released::Freed));
    let (prefix, released) = released_event(&set);
    assert_eq!(prefix, PREFIX);
    assert_eq!(released, answer);
    set.stop();
}

// ---------------------------------------------------------------------
// HeldSet::spawn / HeldSet::get: "Each is named as its lease key names it
// ... `shards/7/` is `shards/7`"; "It never holds two leases of one
// prefix".

/// One prefix spelt two ways in one set is one prefix, held once, found
/// by either spelling; a second set spelling it the other way does not
/// take it while the first holds it.
#[test]
fn one_prefix_spelt_two_ways_is_held_once_across_two_sets() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let first = set(&store, &clock, &["shards/7", "shards/7/", "shards/7//"]);
    let (prefix, _) = taken(&first);
    assert_eq!(prefix, "shards/7");
    assert_eq!(first.held().len(), 1);
    for spelling in ["shards/7", "shards/7/", "shards/7//"] {
        let held = first.get(spelling).expect("found by any spelling");
        assert_eq!(held.prefix(), "shards/7");
    }
    let second = set(&store, &clock, &["shards/7/"]);
    // Its first attempt finds the prefix held: no event, nothing held.
    assert!(second
        .events()
        .recv_timeout(Duration::from_millis(300))
        .is_err());
    assert!(second.held().is_empty());
    // Given up by the first: whichever set's retry comes first takes it
    // again (no order is promised), and never both.
    first.get("shards/7/").expect("held").stop().expect("freed");
    let until = std::time::Instant::now() + PATIENCE;
    loop {
        clock.advance(Duration::from_secs(TTL_S) / 8);
        let heard = [&first, &second].map(|set| {
            let mut taken = false;
            while let Ok(event) = set.events().recv_timeout(Duration::from_millis(50)) {
                if let SetEvent::Taken { prefix, .. } = event {
                    assert_eq!(prefix, "shards/7");
                    taken = true;
                }
            }
            taken
        });
        let writing = [&first, &second]
            .iter()
            .filter(|set| set.get("shards/7").is_some_and(|h| h.may_write()))
            .count();
        assert!(writing <= 1, "two sets write one prefix");
        if heard.iter().any(|t| *t) {
            assert_eq!(writing, 1, "taken again by one set");
            break;
        }
        assert!(std::time::Instant::now() < until, "never taken again");
    }
    first.stop();
    second.stop();
}

/// The bucket's root as a prefix: `""` and `"/"` are one prefix (`LEASE`),
/// and `get("")` finds it.
#[test]
fn the_root_prefix_is_found_by_get_of_the_empty_prefix() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let set = set(&store, &clock, &["", "/"]);
    let (prefix, _) = taken(&set);
    assert_eq!(prefix, "");
    assert_eq!(set.held().len(), 1);
    assert!(store.peek("LEASE").is_some());
    let held = set.get("").expect("found");
    assert_eq!(held.prefix(), "");
    assert!(set.get("/").is_some());
    assert!(set.get("other").is_none());
    assert_eq!(held.stop(), Ok(Released::Freed));
    set.stop();
}

// ---------------------------------------------------------------------
// kept.rs module docs: "A handle outliving its keeper answers from the
// lease ... its loss, or Released::AlreadyFree after a clean release."

/// A stale held prefix (a clone kept from before the set gave the prefix
/// up and took it again) stopped while the set holds the prefix anew:
/// `AlreadyFree`, and the new lease stays held and its record live.
#[test]
fn a_stale_clone_stopped_after_the_prefix_was_taken_again_leaves_it_held() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let set = set(&store, &clock, &[PREFIX]);
    let (_, first_epoch) = taken(&set);
    let stale: HeldPrefix = set.get(PREFIX).expect("held");
    let again = stale.clone();
    assert_eq!(stale.stop(), Ok(Released::Freed));
    let _ = released_event(&set);
    let until = std::time::Instant::now() + PATIENCE;
    let epoch = loop {
        clock.advance(Duration::from_secs(TTL_S) / 8);
        match set.events().recv_timeout(Duration::from_millis(50)) {
            Ok(SetEvent::Taken { epoch, .. }) => break epoch,
            Ok(other) => panic!("expected Taken, got {other:?}"),
            Err(_) => assert!(std::time::Instant::now() < until, "never taken again"),
        }
    };
    assert!(epoch > first_epoch);
    assert_eq!(again.stop(), Ok(Released::AlreadyFree));
    let now = set.get(PREFIX).expect("still held");
    assert!(now.may_write());
    assert_eq!(now.epoch(), epoch);
    let record = bucket_lease_core::record::LeaseRecord::parse(&store.peek("db/LEASE").unwrap())
        .expect("a record");
    assert!(!record.is_released(), "the new lease's record is live");
    // No event for the stale stop.
    assert!(set
        .events()
        .recv_timeout(Duration::from_millis(200))
        .is_err());
    set.stop();
}

/// A pooled lease whose pool's stop could not release it (every request
/// fails): the pool's stop says so, and a later stop of the handle is not
/// `Ok`.
#[test]
fn a_pooled_stop_after_the_pools_failed_release_is_not_ok() {
    let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
    let pool = KeeperPool::spawn(PoolOptions::new().clock(Arc::new(clock.clone())))
        .expect("threads start");
    let lease = bucket_lease_core::Contender::new(
        Arc::clone(&store) as Arc<dyn Store>,
        PREFIX,
        options(&clock),
    )
    .try_acquire()
    .expect("free");
    let held = pool.add(lease);
    store.fail_next_requests(usize::MAX);
    let releases = pool.stop();
    assert_eq!(releases.len(), 1);
    assert!(releases[0].1.is_err(), "{releases:?}");
    let later = held.stop();
    assert!(
        matches!(later, Err(LeaseError::Store(_))),
        "a later stop after a failed release: {later:?}"
    );
}

// ---------------------------------------------------------------------
// upload.rs / spacing.rs: "an upload never published after its lease's
// write deadline"; spacing.rs module docs: "The wait is bounded by the
// write's deadline: a turn that comes after it is not waited for, and the
// write fails as not sent."

/// A test clock whose sleeps overshoot by `extra`, as a thread put to
/// sleep may wake late (a loaded host, a paused VM): `Clock::sleep`
/// promises at least the time asked, never at most.
#[derive(Debug, Clone)]
struct LateWaking {
    clock: TestClock,
    extra: Duration,
}

impl bucket_lease_core::clock::Clock for LateWaking {
    fn now(&self) -> std::time::Instant {
        self.clock.now()
    }
    fn wall(&self) -> std::time::SystemTime {
        bucket_lease_core::clock::Clock::wall(&self.clock)
    }
    fn sleep(&self, duration: Duration) {
        self.clock.advance(duration + self.extra);
    }
    fn timer(&self, at: std::time::Instant) -> crossbeam_channel::Receiver<std::time::Instant> {
        bucket_lease_core::clock::Clock::timer(&self.clock, at)
    }
}

fn bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// A completion on a spaced store whose key's turn comes before the write
/// deadline, but whose wait for it ends after (the sleep woke late): the
/// spacing store hands the completion on with its deadline already past,
/// and the memory store under it publishes the object after the lease's
/// write deadline; `finish` answers `Ok`. The spacing store does not look
/// at the deadline again once its wait is over.
#[test]
fn a_spaced_completion_whose_wait_ends_after_the_deadline_publishes_nothing() {
    use bucket_lease_core::multipart::MIN_PART_BYTES;
    use bucket_lease_core::spacing::SpacedStore;
    use bucket_lease_core::store::{PutMode, PutOptions, Version};
    use bucket_lease_core::{FencedWriter, Lease};
    use std::io::Write;

    let test_clock = TestClock::new();
    let clock = Arc::new(LateWaking {
        clock: test_clock.clone(),
        extra: Duration::from_secs(5),
    });
    let inner = Arc::new(MemoryStore::new());
    let spaced: Arc<dyn Store> = Arc::new(SpacedStore::new(
        Arc::clone(&inner) as Arc<dyn Store>,
        Duration::from_secs(1),
        clock.clone(),
    ));
    let lease = Lease::acquire(
        Arc::clone(&spaced),
        PREFIX,
        LeaseOptions::new(TTL_S).clock(clock.clone()),
    )
    .expect("free");
    let writer = FencedWriter::new(Arc::new(lease));
    // The completion check, once per store, well before any deadline.
    let mut warm = writer.create("db/warm").unwrap().part_size(MIN_PART_BYTES);
    warm.write_all(&bytes(MIN_PART_BYTES + 1)).unwrap();
    warm.finish().expect("the first upload completes");
    writer.lease().renew().expect("renewed");
    let deadline = writer.lease().write_deadline().expect("held");

    // 1.5 s before the deadline, the store writes `db/big` (a refused
    // update): its next turn comes 0.5 s before the deadline.
    let now = bucket_lease_core::clock::Clock::now(&test_clock);
    test_clock.advance(deadline - now - Duration::from_millis(1500));
    let stale = PutOptions::new(PutMode::Update(Version::etag("\"made-up\"")));
    assert!(spaced.put("db/big", b"x", &stale).is_err());

    let mut upload = writer.create("db/big").unwrap().part_size(MIN_PART_BYTES);
    upload.write_all(&bytes(MIN_PART_BYTES + 1)).unwrap();
    let finished = upload.finish();
    let published = inner.peek("db/big").is_some();
    assert!(
        bucket_lease_core::clock::Clock::now(&test_clock) > deadline,
        "the turn's wait ended after the deadline"
    );
    assert!(
        !published && finished.is_err(),
        "an upload was published after its lease's write deadline (by {:?}): finish \
         answered {finished:?}",
        bucket_lease_core::clock::Clock::now(&test_clock) - deadline
    );
}

/// A held prefix's stop racing the renewal that finds the lease taken
/// over: whichever wins, the stop answers the loss, never `Ok`, and the
/// set reports the prefix once (as lost, or given up with the loss).
#[test]
fn a_held_prefix_stop_racing_a_loss_never_answers_ok() {
    use bucket_lease_core::record::{format_stamp, LeaseRecord};
    for round in 0..40 {
        let (store, clock) = (Arc::new(MemoryStore::new()), TestClock::new());
        let set = set(&store, &clock, &[PREFIX]);
        taken(&set);
        let held = set.get(PREFIX).expect("held");
        let now = format_stamp(bucket_lease_core::clock::Clock::wall(&clock));
        let usurper = LeaseRecord::new("usurper", now.clone(), now, TTL_S, 99);
        store.insert("db/LEASE", &usurper.to_bytes());
        let answer = std::thread::scope(|s| {
            let stop = s.spawn(move || held.stop());
            clock.advance(Duration::from_secs(TTL_S / 3));
            stop.join().unwrap()
        });
        assert!(
            matches!(answer, Err(LeaseError::Lost { .. })),
            "round {round}: {answer:?}"
        );
        let mut events = Vec::new();
        while let Ok(event) = set.events().recv_timeout(Duration::from_millis(100)) {
            events.push(event);
        }
        assert_eq!(events.len(), 1, "round {round}: {events:?}");
        match &events[0] {
            SetEvent::Lost { .. } => {}
            SetEvent::Released { released, .. } => assert!(
                matches!(released, Err(LeaseError::Lost { .. })),
                "round {round}: {released:?}"
            ),
            other => panic!("round {round}: {other:?}"),
        }
        assert!(set.get(PREFIX).is_none());
        set.stop();
    }
}
