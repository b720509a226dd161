//! Fenced writes of any size (`FencedWriter::create`) on the memory store:
//! small objects go whole, large ones in parts made visible only by a
//! create-only completion; the fence, a loss, a drop or an error aborts the
//! upload; a lost completion answer is settled by the object's metadata; a
//! service that ignores the completion's condition is found out once and
//! refused. And the schedules a review found: lost answers and write
//! intervals around the completion check, the read cap, a loss during the
//! check.

use bucket_lease_core::fence::{ReadError, EPOCH_METADATA, HOLDER_METADATA, NONCE_METADATA};
use bucket_lease_core::memory::{MemoryStore, Misbehaviour};
use bucket_lease_core::multipart::{
    AbortUpload, BeginUpload, CompleteUpload, ObjectReader, UploadConditions, UploadPart,
    UploadedPart, MIN_PART_BYTES,
};
use bucket_lease_core::spacing::SpacedStore;
use bucket_lease_core::upload::UPLOAD_METADATA;
use bucket_lease_core::{
    clock::SystemClock, clock::TestClock, fence::FencedReader, store::DeleteMode, store::Object,
    store::PutMode, store::PutOptions, store::StoreErrorKind, store::Version, upload::FencedUpload,
    FencedWriter, Lease, LeaseOptions, Store, StoreError, WriteError,
};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PART: usize = MIN_PART_BYTES;

type PartHook = Box<dyn Fn(u32) + Send + Sync>;

/// Called with each PUT's key, before it is sent.
type PutHook = Box<dyn Fn(&str) + Send + Sync>;

/// A memory store that can lose the answer to the next completion (the
/// completion takes effect), run a hook before each part and each PUT,
/// counts completions, keeps each part's deadline, and records each
/// request it was sent after `watching` was set.
#[derive(Default)]
struct Disturbed {
    inner: MemoryStore,
    lose_completion_answer: AtomicBool,
    before_part: Mutex<Option<PartHook>>,
    on_put: Mutex<Option<PutHook>>,
    completions: AtomicUsize,
    part_deadlines: Mutex<Vec<Option<Instant>>>,
    watching: AtomicBool,
    sent_while_watching: Mutex<Vec<String>>,
}

impl std::fmt::Debug for Disturbed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Disturbed")
            .field("inner", &self.inner)
            .finish()
    }
}

impl Disturbed {
    fn note(&self, what: &str, key: &str) {
        if self.watching.load(Ordering::SeqCst) {
            self.sent_while_watching
                .lock()
                .unwrap()
                .push(format!("{what} {key}"));
        }
    }
}

impl Store for Disturbed {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }
    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        if let Some(hook) = &*self.on_put.lock().unwrap() {
            hook(key);
        }
        self.note("PUT", key);
        self.inner.put(key, body, options)
    }
    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.note("DELETE", key);
        self.inner.delete(key, mode, d)
    }
    fn head(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.head(key, deadline)
    }
    fn open(&self, key: &str, deadline: Option<Instant>) -> Result<ObjectReader, StoreError> {
        self.inner.open(key, deadline)
    }
    fn upload_conditions(&self) -> Option<&UploadConditions> {
        self.inner.upload_conditions()
    }
    fn begin_upload(&self, begin: &BeginUpload<'_>) -> Result<String, StoreError> {
        self.note("BEGIN", begin.key);
        self.inner.begin_upload(begin)
    }
    fn upload_part(&self, part: &UploadPart<'_>) -> Result<UploadedPart, StoreError> {
        if let Some(hook) = &*self.before_part.lock().unwrap() {
            hook(part.number);
        }
        self.note("PART", part.key);
        self.part_deadlines.lock().unwrap().push(part.deadline);
        self.inner.upload_part(part)
    }
    fn complete_upload(&self, complete: &CompleteUpload<'_>) -> Result<Version, StoreError> {
        self.note("COMPLETE", complete.key);
        self.completions.fetch_add(1, Ordering::SeqCst);
        let done = self.inner.complete_upload(complete)?;
        if self.lose_completion_answer.swap(false, Ordering::SeqCst) {
            return Err(
                StoreError::new(StoreErrorKind::Transport, "POST", complete.key)
                    .timed_out()
                    .with_message("injected lost answer: the completion took effect"),
            );
        }
        Ok(done)
    }
    fn abort_upload(&self, abort: &AbortUpload<'_>) -> Result<(), StoreError> {
        self.note("ABORT", abort.key);
        self.inner.abort_upload(abort)
    }
}

struct Setup {
    store: Arc<Disturbed>,
    clock: TestClock,
    writer: FencedWriter,
}

fn setup(options: impl FnOnce(LeaseOptions) -> LeaseOptions) -> Setup {
    let store = Arc::new(Disturbed::default());
    let clock = TestClock::new();
    let lease_options = options(LeaseOptions::new(30).clock(Arc::new(clock.clone())));
    let lease = Lease::acquire(store.clone(), "db", lease_options).unwrap();
    Setup {
        store,
        clock,
        writer: FencedWriter::new(Arc::new(lease)),
    }
}

/// `n` bytes that differ from part to part.
fn bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

fn meta<'o>(object: &'o Object, name: &str) -> Option<&'o str> {
    object
        .metadata
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn an_object_of_one_part_goes_as_one_create_only_put() {
    let s = setup(|o| o);
    let mut upload = s.writer.create("db/small").unwrap();
    upload.write_all(b"one small object").unwrap();
    let version = upload.finish().unwrap();
    let object = s.store.get("db/small", None).unwrap();
    assert_eq!(object.body, b"one small object");
    assert_eq!(object.version, version);
    assert_eq!(s.store.completions.load(Ordering::SeqCst), 0);
    assert_eq!(s.store.inner.uploads_open(), 0);
    assert_eq!(meta(&object, EPOCH_METADATA), Some("1"));
}

#[test]
fn a_large_object_goes_in_parts_stamped_and_completed_create_only() {
    let s = setup(|o| o);
    let body = bytes(2 * PART + 12_345);
    let mut upload = s.writer.create("db/big").unwrap().part_size(PART);
    // Written in uneven pieces, as io::copy does.
    for piece in body.chunks(64 * 1024 + 7) {
        upload.write_all(piece).unwrap();
    }
    assert_eq!(
        upload.parts_sent(),
        2,
        "a full part goes before more is taken"
    );
    let version = upload.finish().unwrap();
    let object = s.store.get("db/big", None).unwrap();
    assert!(object.body == body, "the object is the stream, whole");
    assert_eq!(object.version, version);
    let lease = s.writer.lease();
    assert_eq!(meta(&object, EPOCH_METADATA), Some("1"));
    assert_eq!(meta(&object, HOLDER_METADATA), Some(lease.instance_id()));
    assert_eq!(meta(&object, NONCE_METADATA), Some(lease.instance_nonce()));
    assert!(meta(&object, UPLOAD_METADATA).is_some_and(|m| m.len() == 32));
    assert_eq!(s.store.inner.uploads_open(), 0);
    // The completion check's probe object is gone: only the record and
    // the object are left.
    assert_eq!(s.store.inner.keys(), ["db/LEASE", "db/big"]);
    // Three parts, then one completion for the check and one for the
    // object; every part carried the write deadline.
    assert_eq!(s.store.completions.load(Ordering::SeqCst), 2);
    let deadlines = s.store.part_deadlines.lock().unwrap().clone();
    assert_eq!(deadlines.len(), 4, "the check's part and three");
    assert!(deadlines.iter().all(|d| *d == lease.write_deadline()));
}

#[test]
fn the_completion_check_runs_once_per_store() {
    let s = setup(|o| o);
    for key in ["db/one", "db/two"] {
        let mut upload = s.writer.create(key).unwrap().part_size(PART);
        upload.write_all(&bytes(PART + 1)).unwrap();
        upload.finish().unwrap();
    }
    // Another writer on the same store does not check again either.
    let other = FencedWriter::new(Arc::clone(s.writer.lease()));
    let mut upload = other.create("db/three").unwrap().part_size(PART);
    upload.write_all(&bytes(PART + 1)).unwrap();
    upload.finish().unwrap();
    assert_eq!(s.store.completions.load(Ordering::SeqCst), 4);
}

#[test]
fn a_completion_over_an_earlier_object_is_refused_and_the_upload_aborted() {
    let s = setup(|o| o);
    s.store.inner.insert("db/taken", b"an earlier holder's");
    let mut upload = s.writer.create("db/taken").unwrap().part_size(PART);
    upload.write_all(&bytes(PART + 1)).unwrap();
    let answer = upload.finish();
    assert!(
        matches!(&answer, Err(WriteError::Exists { key, epoch: None, .. }) if key == "db/taken"),
        "{answer:?}"
    );
    assert_eq!(
        s.store.inner.peek("db/taken").unwrap(),
        b"an earlier holder's"
    );
    assert_eq!(
        s.store.inner.uploads_open(),
        0,
        "the refused upload is aborted"
    );
    assert!(
        s.writer.lease().may_write(),
        "an earlier holder's object proves nothing"
    );
}

#[test]
fn a_completion_over_a_newer_holders_object_marks_the_lease_lost() {
    let s = setup(|o| o);
    let newer = PutOptions::new(PutMode::Create)
        .with_metadata(EPOCH_METADATA, "2")
        .with_metadata(HOLDER_METADATA, "the-next-holder");
    s.store.put("db/out", b"newer", &newer).unwrap();
    let mut upload = s.writer.create("db/out").unwrap().part_size(PART);
    upload.write_all(&bytes(PART + 1)).unwrap();
    let answer = upload.finish();
    assert!(
        matches!(answer, Err(WriteError::Superseded(_))),
        "{answer:?}"
    );
    assert!(!s.writer.lease().may_write());
    assert_eq!(s.store.inner.peek("db/out").unwrap(), b"newer");
    assert_eq!(s.store.inner.uploads_open(), 0);
}

#[test]
fn a_completion_whose_answer_was_lost_is_settled_as_ours() {
    let s = setup(|o| o);
    let body = bytes(PART + 99);
    let mut upload = s.writer.create("db/lost").unwrap().part_size(PART);
    upload.write_all(&body).unwrap();
    s.store.lose_completion_answer.store(true, Ordering::SeqCst);
    let version = upload.finish().unwrap();
    let object = s.store.get("db/lost", None).unwrap();
    assert_eq!(object.version, version);
    assert!(object.body == body);
}

#[test]
fn another_upload_of_ours_at_the_key_is_not_taken_for_a_lost_answer() {
    let s = setup(|o| o);
    let mut first = s.writer.create("db/twice").unwrap().part_size(PART);
    first.write_all(&bytes(PART + 1)).unwrap();
    first.finish().unwrap();
    // The same holder, epoch and process, another stream: not this one.
    let mut second = s.writer.create("db/twice").unwrap().part_size(PART);
    second.write_all(&bytes(PART + 2)).unwrap();
    let answer = second.finish();
    assert!(
        matches!(answer, Err(WriteError::Exists { epoch: Some(1), .. })),
        "{answer:?}"
    );
}

#[test]
fn the_fence_mid_stream_aborts_the_upload_and_finish_returns_it() {
    let s = setup(|o| o);
    let mut upload = s.writer.create("db/late").unwrap().part_size(PART);
    upload.write_all(&bytes(2 * PART)).unwrap();
    assert_eq!(upload.parts_sent(), 1);
    // No renewal: the write deadline (two thirds of the TTL) passes.
    s.clock.advance(Duration::from_secs(21));
    let error = upload.write_all(b"more").unwrap_err();
    let inner = error.get_ref().and_then(|e| e.downcast_ref::<WriteError>());
    assert!(matches!(inner, Some(WriteError::Fenced { .. })), "{error}");
    assert_eq!(s.store.inner.uploads_open(), 0, "aborted at the fence");
    assert!(
        upload.write_all(b"again").is_err(),
        "every later write fails"
    );
    let answer = upload.finish();
    assert!(
        matches!(answer, Err(WriteError::Fenced { .. })),
        "{answer:?}"
    );
    assert!(s.store.inner.peek("db/late").is_none());
    assert_eq!(
        s.store.completions.load(Ordering::SeqCst),
        1,
        "the check's only"
    );
}

#[test]
fn a_deadline_passing_while_the_last_part_is_sent_completes_nothing() {
    let s = setup(|o| o);
    let clock = s.clock.clone();
    *s.store.before_part.lock().unwrap() = Some(Box::new(move |number| {
        if number == 2 {
            clock.advance(Duration::from_secs(21));
        }
    }));
    let mut upload = s.writer.create("db/edge").unwrap().part_size(PART);
    upload.write_all(&bytes(PART + 5)).unwrap();
    let answer = upload.finish();
    assert!(
        matches!(answer, Err(WriteError::Fenced { .. })),
        "{answer:?}"
    );
    assert!(s.store.inner.peek("db/edge").is_none());
    assert_eq!(s.store.inner.uploads_open(), 0);
}

#[test]
fn a_lost_lease_mid_stream_aborts_the_upload() {
    let s = setup(|o| o);
    let mut upload = s.writer.create("db/gone").unwrap().part_size(PART);
    upload.write_all(&bytes(PART + 1)).unwrap();
    s.writer.lease().mark_lost(Some("someone-else".into()));
    let answer = upload.finish();
    assert!(
        matches!(answer, Err(WriteError::Fenced { .. })),
        "{answer:?}"
    );
    assert_eq!(s.store.inner.uploads_open(), 0);
    assert!(s.store.inner.peek("db/gone").is_none());
}

#[test]
fn an_upload_dropped_unfinished_is_aborted() {
    let s = setup(|o| o);
    let mut upload = s.writer.create("db/dropped").unwrap().part_size(PART);
    upload.write_all(&bytes(PART + 1)).unwrap();
    assert_eq!(s.store.inner.uploads_open(), 1);
    drop(upload);
    assert_eq!(s.store.inner.uploads_open(), 0);
    assert!(s.store.inner.peek("db/dropped").is_none());
}

#[test]
fn a_failed_part_aborts_the_upload_and_finish_returns_the_failure() {
    let s = setup(|o| o);
    let mut upload = s.writer.create("db/flaky").unwrap().part_size(PART);
    upload.write_all(&bytes(PART)).unwrap();
    s.store.inner.fail_next_requests(1);
    assert!(upload.write_all(b"x").is_err());
    let answer = upload.finish();
    assert!(
        matches!(&answer, Err(WriteError::Store(e)) if e.kind() == StoreErrorKind::Transport),
        "{answer:?}"
    );
    assert_eq!(s.store.inner.uploads_open(), 0);
}

#[test]
fn a_service_that_ignores_the_completions_condition_gets_no_streams() {
    let s = setup(|o| o);
    s.store.inner.set(Misbehaviour::IgnoreConditionOnCompletion);
    let mut upload = s.writer.create("db/unfenced").unwrap().part_size(PART);
    let error = upload.write_all(&bytes(PART + 1)).unwrap_err();
    assert!(
        error.to_string().contains("ignores If-None-Match"),
        "{error}"
    );
    let answer = upload.finish();
    assert!(
        matches!(&answer, Err(WriteError::UnfencedUploads { key }) if key == "db/unfenced"),
        "{answer:?}"
    );
    assert_eq!(
        s.store.inner.keys(),
        ["db/LEASE"],
        "the probe object is removed"
    );
    assert_eq!(s.store.inner.uploads_open(), 0);
    // The verdict is kept: the next stream is refused without a check.
    let mut again = s.writer.create("db/unfenced").unwrap().part_size(PART);
    assert!(again.write_all(&bytes(PART + 1)).is_err());
    assert_eq!(s.store.completions.load(Ordering::SeqCst), 1);
    // An object of one part is still a fenced PUT.
    let mut small = s.writer.create("db/small").unwrap();
    small.write_all(b"fits").unwrap();
    assert!(small.finish().is_ok());
}

#[test]
fn a_best_effort_lease_streams_on_such_a_service() {
    let s = setup(|o| o.best_effort(true));
    s.store.inner.set(Misbehaviour::IgnoreConditionOnCompletion);
    let mut upload = s.writer.create("db/anyway").unwrap().part_size(PART);
    upload.write_all(&bytes(PART + 1)).unwrap();
    assert!(upload.finish().is_ok());
}

#[test]
fn keys_outside_the_lease_are_refused_before_anything_is_sent() {
    let s = setup(|o| o);
    let requests = s.store.inner.requests();
    for key in ["other/x", "db/LEASE", "db/../x"] {
        assert!(
            matches!(s.writer.create(key), Err(WriteError::OutsideLease { .. })),
            "{key}"
        );
    }
    assert_eq!(s.store.inner.requests(), requests);
}

#[test]
fn a_fenced_stream_is_checked_before_its_first_byte() {
    let s = setup(|o| o);
    let body = bytes(3 * PART);
    let mut upload = s.writer.create("db/read").unwrap().part_size(PART);
    upload.write_all(&body).unwrap();
    upload.finish().unwrap();
    let store: Arc<dyn Store> = s.store.clone();
    let mut stream = FencedReader::new(Arc::clone(&store))
        .open("db/read")
        .unwrap();
    assert_eq!(stream.epoch, 1);
    let mut read = Vec::new();
    stream.read_to_end(&mut read).unwrap();
    assert!(read == body);
    let stale = FencedReader::new(Arc::clone(&store))
        .trusting(2)
        .open("db/read");
    assert!(
        matches!(stale, Err(ReadError::Stale { epoch: 1, .. })),
        "{stale:?}"
    );
    s.store.inner.insert("db/plain", b"no epoch");
    let plain = FencedReader::new(store).open("db/plain");
    assert!(
        matches!(plain, Err(ReadError::Unfenced { .. })),
        "{plain:?}"
    );
}

#[test]
fn an_uploads_debug_shows_where_it_is_not_its_bytes() {
    let s = setup(|o| o);
    let mut upload = s.writer.create("db/secret").unwrap();
    upload.write_all(b"the user's own bytes").unwrap();
    let shown = format!("{upload:?}");
    assert!(
        shown.contains("db/secret") && shown.contains("buffered: 20"),
        "{shown}"
    );
    assert!(
        !shown.contains("116, 104, 101"),
        "the bytes are shown: {shown}"
    );
}

fn lease_on(store: Arc<dyn Store>, clock: &TestClock) -> FencedWriter {
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let lease = Lease::acquire(store, "db", options).unwrap();
    FencedWriter::new(Arc::new(lease))
}

/// The completion check leaves nothing behind even when the answer to
/// its create-only PUT is lost (the PUT took effect): once returned at that
/// error, it left its object in the bucket for good.
#[test]
fn a_lost_answer_to_the_checks_create_still_removes_its_object() {
    let store = Arc::new(MemoryStore::new());
    let clock = TestClock::new();
    let writer = lease_on(store.clone(), &clock);
    let mut upload = writer.create("db/big").unwrap().part_size(PART);
    // The first request of the stream is the completion check's PUT.
    store.lose_next_answers(1);
    let error = upload.write_all(&bytes(PART + 1)).unwrap_err();
    assert!(error.to_string().contains("lost answer"), "{error}");
    assert!(upload.finish().is_err());
    assert_eq!(
        store.keys(),
        ["db/LEASE"],
        "the completion check's probe object was left in the bucket"
    );
}

/// On a store with a write interval (`SpacedStore`, R2's one write of a
/// key a second) the completion check writes its key three times: the
/// create, the completion and the cleanup delete, each an interval after
/// the last. The delete's bound once ignored the interval (2 s from now,
/// on the system clock while the spacing waited on the lease's), so its
/// turn came after it, it was not sent, and the object stayed.
#[test]
fn on_a_spaced_store_the_checks_object_is_removed_in_its_turn() {
    let clock = TestClock::new();
    removed_in_its_turn(Duration::from_secs(1), Arc::new(clock.clone()), |store| {
        lease_on(store, &clock)
    });
}

/// The same on the system clock, with an interval longer than the 2 s an
/// abort is given. Takes about 10 s.
#[test]
fn a_write_interval_longer_than_the_abort_bound_still_removes_the_checks_object() {
    removed_in_its_turn(Duration::from_secs(3), Arc::new(SystemClock), |store| {
        let lease = Lease::acquire(store, "db", LeaseOptions::new(30)).unwrap();
        FencedWriter::new(Arc::new(lease))
    });
}

/// Stream an object in parts through a `SpacedStore` of `interval` on
/// `clock`, and show that only the record and the object are left once
/// the lease's first renewal removed its acquire's own probe objects.
fn removed_in_its_turn(
    interval: Duration,
    clock: Arc<dyn bucket_lease_core::clock::Clock>,
    writer_on: impl FnOnce(Arc<dyn Store>) -> FencedWriter,
) {
    let inner = Arc::new(MemoryStore::new());
    let spaced: Arc<dyn Store> = Arc::new(SpacedStore::new(inner.clone(), interval, clock));
    let writer = writer_on(spaced);
    let mut upload = writer.create("db/big").unwrap().part_size(PART);
    upload.write_all(&bytes(PART + 1)).unwrap();
    upload.finish().unwrap();
    writer.lease().renew().unwrap();
    assert_eq!(
        inner.keys(),
        ["db/LEASE", "db/big"],
        "the completion check's object was left in the bucket"
    );
}

/// A completion whose answer was lost is settled by the object's metadata
/// for objects of any size: on a store with a read cap (the memory store's
/// models the HTTP client's) the settling read once went through the
/// capped `get`, answered "too large" for every object in parts, and gave
/// up, though our object was there.
#[test]
fn a_lost_completion_answer_is_settled_whatever_the_read_cap() {
    let store = Arc::new(Disturbed::default());
    store.inner.set_read_cap(Some(64 * 1024));
    let clock = TestClock::new();
    let writer = lease_on(store.clone(), &clock);
    let mut upload = writer.create("db/lost").unwrap().part_size(PART);
    upload.write_all(&bytes(PART + 99)).unwrap();
    store.lose_completion_answer.store(true, Ordering::SeqCst);
    let answer = upload.finish();
    assert!(
        store.inner.peek("db/lost").is_some(),
        "the completion landed"
    );
    assert!(
        answer.is_ok(),
        "our landed completion was not recognised: {answer:?}"
    );
}

/// `FencedReader::open` reads objects of any size: on a store with a read
/// cap it once went through the capped `get`.
#[test]
fn a_streamed_read_is_not_bound_by_the_read_cap() {
    let store = Arc::new(MemoryStore::new());
    let clock = TestClock::new();
    let writer = lease_on(store.clone(), &clock);
    let body = bytes(PART + 1);
    let mut upload = writer.create("db/read").unwrap().part_size(PART);
    upload.write_all(&body).unwrap();
    upload.finish().unwrap();
    store.set_read_cap(Some(64 * 1024));
    let opened = FencedReader::new(store.clone() as Arc<dyn Store>).open("db/read");
    let mut stream = match opened {
        Ok(stream) => stream,
        Err(ReadError::Store(e)) => panic!("a streamed read was capped: {e}"),
        Err(e) => panic!("{e:?}"),
    };
    let mut read = Vec::new();
    stream.read_to_end(&mut read).unwrap();
    assert!(read == body);
}

/// The completion check takes the write deadline right before each of its
/// requests: a lease lost while its create is under way stops it. It once
/// took the deadline once, and sent its beginning, part and completion
/// after the loss.
#[test]
fn the_completion_check_sends_nothing_after_the_lease_is_lost() {
    let store = Arc::new(Disturbed::default());
    let clock = TestClock::new();
    let writer = lease_on(store.clone(), &clock);
    let lease = Arc::clone(writer.lease());
    let store_in_hook = Arc::clone(&store);
    *store.on_put.lock().unwrap() = Some(Box::new(move |key| {
        if key.contains("LEASE.probe-") {
            lease.mark_lost(Some("the-next-holder".into()));
            store_in_hook.watching.store(true, Ordering::SeqCst);
        }
    }));
    let mut upload = writer.create("db/big").unwrap().part_size(PART);
    let error = upload.write_all(&bytes(PART + 1)).unwrap_err();
    assert!(!writer.lease().may_write());
    let sent: Vec<String> = store
        .sent_while_watching
        .lock()
        .unwrap()
        .iter()
        .filter(|r| !r.starts_with("DELETE") && !r.starts_with("ABORT"))
        .cloned()
        .collect();
    // The probe's PUT itself was under way when the loss came.
    assert_eq!(
        sent.iter().filter(|r| !r.starts_with("PUT")).count(),
        0,
        "requests sent after the lease was lost: {sent:?} ({error})"
    );
}

/// A `FencedUpload` may be moved to another thread (the README's
/// `io::copy` from a reader thread).
#[test]
fn a_fenced_upload_can_move_to_another_thread() {
    fn send<T: Send>() {}
    send::<FencedUpload>();
}
