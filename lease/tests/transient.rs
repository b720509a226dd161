//! Transient failures of writes (a `503 SlowDown`, a `500`, an answer that
//! never came) during an acquire, its probe and a release: the lease reads
//! and decides again instead of failing at the first one, a bounded number
//! of times and within the deadline, and never re-sends a write of the
//! lease record blindly.

use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::record::LeaseRecord;
use bucket_lease_core::{
    store::DeleteMode, store::Object, store::PutMode, store::PutOptions, store::StoreErrorKind,
    store::Version, Contender, Lease, LeaseError, LeaseOptions, Released, Store, StoreError,
};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KEY: &str = "db/LEASE";

/// What happens to one write.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    /// Answered `503 SlowDown`; the write took no effect.
    SlowDown,
    /// The write took effect; its answer never came.
    AnswerLost,
}

/// A strict memory store whose writes to keys containing `target` meet the
/// queued faults in turn, and which records every write it was sent.
#[derive(Debug)]
struct Flaky {
    inner: MemoryStore,
    target: &'static str,
    faults: Mutex<VecDeque<Fault>>,
    writes: Mutex<Vec<(String, PutMode)>>,
}

impl Flaky {
    fn new(target: &'static str, faults: &[Fault]) -> Arc<Self> {
        Arc::new(Self {
            inner: MemoryStore::new(),
            target,
            faults: Mutex::new(faults.iter().copied().collect()),
            writes: Mutex::new(Vec::new()),
        })
    }

    fn writes_to(&self, key: &str) -> Vec<PutMode> {
        let writes = self.writes.lock().unwrap();
        writes
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, mode)| mode.clone())
            .collect()
    }

    fn faults_left(&self) -> usize {
        self.faults.lock().unwrap().len()
    }

    fn record(&self) -> LeaseRecord {
        LeaseRecord::parse(&self.inner.peek(KEY).expect("a LEASE object")).expect("a record")
    }
}

impl Store for Flaky {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        let mut writes = self.writes.lock().unwrap();
        writes.push((key.to_string(), options.mode.clone()));
        drop(writes);
        let fault = if key.contains(self.target) {
            self.faults.lock().unwrap().pop_front()
        } else {
            None
        };
        match fault {
            None => self.inner.put(key, body, options),
            Some(Fault::SlowDown) => Err(StoreError::new(StoreErrorKind::Transport, "PUT", key)
                .answered()
                .with_code("SlowDown")
                .with_message("Please reduce your request rate.")),
            Some(Fault::AnswerLost) => {
                self.inner.put(key, body, options)?;
                Err(StoreError::new(StoreErrorKind::Transport, "PUT", key)
                    .with_message("the connection closed before an answer"))
            }
        }
    }

    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.inner.delete(key, mode, d)
    }
}

fn contender(store: &Arc<Flaky>) -> Contender {
    Contender::new(store.clone(), "db", LeaseOptions::new(30))
}

/// A `503 SlowDown` on the create: the acquire reads again, finds the key
/// still absent and creates it on its second try.
#[test]
fn a_throttled_create_is_tried_again_after_reading() {
    let store = Flaky::new(KEY, &[Fault::SlowDown]);
    let lease = contender(&store)
        .try_acquire()
        .expect("the second create succeeds");
    assert!(lease.may_write());
    assert_eq!(store.faults_left(), 0);
    let writes = store.writes_to(KEY);
    assert!(
        matches!(writes[..2], [PutMode::Create, PutMode::Create]),
        "{writes:?}"
    );
    assert_eq!(store.record().instance_id, lease.instance_id());
    assert_eq!(lease.epoch(), 1);
}

/// The create landed but its answer was lost: the acquire reads its own
/// record back and takes it at its epoch with a write conditional on the
/// version read, never a second create.
#[test]
fn a_create_whose_answer_was_lost_is_taken_back_by_reading() {
    let store = Flaky::new(KEY, &[Fault::AnswerLost]);
    let lease = contender(&store)
        .try_acquire()
        .expect("the acquire adopts its record");
    assert!(lease.may_write());
    let writes = store.writes_to(KEY);
    assert!(
        matches!(writes[..2], [PutMode::Create, PutMode::Update(_)]),
        "{writes:?}"
    );
    assert_eq!(
        writes.iter().filter(|m| **m == PutMode::Create).count(),
        2,
        "one create of the record, one create by the probe: {writes:?}"
    );
    assert_eq!(store.record().instance_id, lease.instance_id());
    assert_eq!(lease.epoch(), 1);
    lease
        .renew()
        .expect("the lease holds the record's current version");
}

/// A takeover whose conditional write was throttled, then lost its answer:
/// the acquire ends holding the lease at the epoch it wrote.
#[test]
fn a_takeover_survives_a_throttle_and_a_lost_answer() {
    let store = Flaky::new(KEY, &[]);
    let first = contender(&store).try_acquire().unwrap();
    first.release().unwrap();
    store
        .faults
        .lock()
        .unwrap()
        .extend([Fault::SlowDown, Fault::AnswerLost]);
    let lease = contender(&store)
        .try_acquire()
        .expect("the takeover succeeds");
    assert_eq!(lease.epoch(), 2);
    assert_eq!(store.record().instance_id, lease.instance_id());
    assert_eq!(store.faults_left(), 0);
    lease.renew().unwrap();
}

/// Throttled on every try: the acquire gives up after three writes of the
/// record and says the service throttled it, naming the key.
#[test]
fn an_acquire_gives_up_after_three_throttled_writes() {
    let store = Flaky::new(KEY, &[Fault::SlowDown; 10]);
    let err = contender(&store).try_acquire().unwrap_err();
    let LeaseError::Store(e) = &err else {
        panic!("expected the store's error, got {err}");
    };
    assert_eq!(e.code(), Some("SlowDown"), "{err}");
    assert!(err.to_string().contains(KEY), "{err}");
    assert_eq!(store.writes_to(KEY).len(), 3, "{:?}", store.writes_to(KEY));
    assert!(store.inner.peek(KEY).is_none());
}

/// A deadline with no room for a pause: the throttled write is not tried
/// again, and the acquire ends before its deadline.
#[test]
fn no_retry_when_the_deadline_leaves_no_room() {
    let store = Flaky::new(KEY, &[Fault::SlowDown]);
    let deadline = Instant::now() + Duration::from_millis(20);
    let err = contender(&store)
        .try_acquire_before(Some(deadline))
        .unwrap_err();
    assert!(matches!(err, LeaseError::Store(_)), "{err}");
    assert_eq!(store.writes_to(KEY).len(), 1);
    assert!(Instant::now() < deadline + Duration::from_millis(200));
}

/// A probe write throttled: the probe's writes are meant to be refused and
/// carry our own record, so it is sent again, and the acquire succeeds.
#[test]
fn a_throttled_probe_write_is_sent_again() {
    let store = Flaky::new(".probe-", &[Fault::SlowDown, Fault::SlowDown]);
    let lease = contender(&store)
        .try_acquire()
        .expect("the probe is retried");
    assert!(lease.may_write());
    assert_eq!(store.faults_left(), 0);
    assert_eq!(store.inner.keys(), vec![KEY.to_string()], "no probe object");
}

/// The release's write throttled, then its retry's answer lost: the record
/// still ends released, and nothing else was touched.
#[test]
fn a_throttled_release_is_tried_again_after_reading() {
    let store = Flaky::new(KEY, &[]);
    let lease = contender(&store).try_acquire().unwrap();
    store
        .faults
        .lock()
        .unwrap()
        .extend([Fault::SlowDown, Fault::AnswerLost]);
    let released = lease.release().expect("the release is reconciled");
    assert!(
        matches!(released, Released::Freed | Released::AlreadyFree),
        "{released:?}"
    );
    let record = store.record();
    assert!(record.is_released(), "{record:?}");
    assert_eq!(record.instance_id, lease.instance_id());
    assert_eq!(store.faults_left(), 0);
}

/// A successor took over while our release was being throttled: the
/// retry reads the successor's record and leaves it alone.
#[test]
fn a_retried_release_never_touches_a_successors_record() {
    let store = Flaky::new(KEY, &[]);
    let clock = bucket_lease_core::clock::TestClock::new();
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let lease = Contender::new(store.clone(), "db", options.clone())
        .try_acquire()
        .unwrap();
    clock.advance(Duration::from_secs(31));
    let successor = Lease::acquire(store.clone(), "db", options).unwrap();
    store.faults.lock().unwrap().push_back(Fault::SlowDown);
    let released = lease.release().unwrap();
    assert!(
        matches!(released, Released::LeftAlone { .. }),
        "{released:?}"
    );
    assert_eq!(store.record().instance_id, successor.instance_id());
    assert!(!store.record().is_released());
}
