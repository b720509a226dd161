//! Schedules a review found against the promises of `FencedWriter::create`
//! / `FencedUpload` (issue 31), on the memory store and the `SpacedStore`
//! wrapper: lost answers and write intervals around the completion check,
//! the read cap, a loss during the check. Each test states the promise it
//! checks.

use bucket_lease_core::fence::ReadError;
use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::multipart::{ObjectReader, UploadConditions, UploadedPart, MIN_PART_BYTES};
use bucket_lease_core::spacing::SpacedStore;
use bucket_lease_core::{
    DeleteMode, FencedReader, FencedUpload, FencedWriter, Lease, LeaseOptions, Object, PutMode,
    PutOptions, Store, StoreError, StoreErrorKind, SystemClock, TestClock, Version,
};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Called with each PUT's key, before it is sent.
type PutHook = Box<dyn Fn(&str) + Send + Sync>;

const PART: usize = MIN_PART_BYTES;

fn bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// A memory store that can lose the answer to its next completion (the
/// completion takes effect), run a hook at each request, and records each
/// request it was sent after `watching` was set.
#[derive(Default)]
struct Wrapped {
    inner: MemoryStore,
    lose_completion_answer: AtomicBool,
    on_put: Mutex<Option<PutHook>>,
    watching: AtomicBool,
    sent_while_watching: Mutex<Vec<String>>,
}

impl std::fmt::Debug for Wrapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wrapped").finish_non_exhaustive()
    }
}

impl Wrapped {
    fn note(&self, what: &str, key: &str) {
        if self.watching.load(Ordering::SeqCst) {
            self.sent_while_watching
                .lock()
                .unwrap()
                .push(format!("{what} {key}"));
        }
    }
}

impl Store for Wrapped {
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
    fn begin_upload(
        &self,
        key: &str,
        metadata: &[(String, String)],
        deadline: Option<Instant>,
    ) -> Result<String, StoreError> {
        self.note("BEGIN", key);
        self.inner.begin_upload(key, metadata, deadline)
    }
    fn upload_part(
        &self,
        key: &str,
        upload: &str,
        number: u32,
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<UploadedPart, StoreError> {
        self.note("PART", key);
        self.inner.upload_part(key, upload, number, body, deadline)
    }
    fn complete_upload(
        &self,
        key: &str,
        upload: &str,
        parts: &[UploadedPart],
        mode: &PutMode,
        deadline: Option<Instant>,
    ) -> Result<Version, StoreError> {
        self.note("COMPLETE", key);
        let done = self
            .inner
            .complete_upload(key, upload, parts, mode, deadline)?;
        if self.lose_completion_answer.swap(false, Ordering::SeqCst) {
            return Err(StoreError::new(StoreErrorKind::Transport, "POST", key)
                .timed_out()
                .with_message("injected lost answer: the completion took effect"));
        }
        Ok(done)
    }
    fn abort_upload(&self, key: &str, upload: &str, d: Option<Instant>) -> Result<(), StoreError> {
        self.note("ABORT", key);
        self.inner.abort_upload(key, upload, d)
    }
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
    clock: Arc<dyn bucket_lease_core::Clock>,
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
    let store = Arc::new(Wrapped::default());
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
    let store = Arc::new(Wrapped::default());
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
