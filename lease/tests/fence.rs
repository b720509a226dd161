//! Fenced writes on the in-memory store with a test clock.

mod common;

use bucket_lease_core::fence::{FencedReader, ReadError};
use bucket_lease_core::fence::{EPOCH_METADATA, HOLDER_METADATA};
use bucket_lease_core::{
    clock::Clock, clock::TestClock, record::LeaseRecord, store::PutMode, store::PutOptions,
    store::StoreErrorKind, FencedWriter, Lease, LeaseOptions, Released, Store, WriteError,
};
use common::Recording;
use std::sync::Arc;
use std::time::Duration;

fn setup() -> (Arc<Recording>, TestClock, FencedWriter) {
    let store = Recording::new();
    let clock = TestClock::new();
    let writer = holder(&store, &clock);
    (store, clock, writer)
}

/// A new holder of the lease on `db` in `store`, and its writer.
fn holder(store: &Arc<Recording>, clock: &TestClock) -> FencedWriter {
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let lease = Lease::acquire(store.clone(), "db", options).unwrap();
    FencedWriter::new(Arc::new(lease))
}

#[test]
fn immutable_objects_are_created_once_with_the_epoch_stamped() {
    let (store, _clock, writer) = setup();
    writer.put_new("db/seg-1", b"one").unwrap();
    let object = store.get("db/seg-1", None).unwrap();
    assert!(object
        .metadata
        .contains(&(EPOCH_METADATA.into(), "1".into())));
    let holder = writer.lease().instance_id().to_string();
    assert!(object.metadata.contains(&(HOLDER_METADATA.into(), holder)));
    match writer.put_new("db/seg-1", b"again") {
        Err(WriteError::Exists { key, epoch, .. }) => {
            assert_eq!((key.as_str(), epoch), ("db/seg-1", Some(1)));
        }
        other => panic!("expected Exists, got {other:?}"),
    }
    assert!(
        !writer.lease().is_lost(),
        "our own earlier object proves no other writer"
    );
    assert_eq!(store.inner.peek("db/seg-1").unwrap(), b"one");
}

#[test]
fn pointers_swap_against_the_version_this_writer_last_saw() {
    let (store, _clock, writer) = setup();
    assert_eq!(writer.read_pointer("db/LATEST").unwrap(), None);
    writer.put_pointer("db/LATEST", b"1").unwrap();
    writer.put_pointer("db/LATEST", b"2").unwrap();
    let seen = writer.read_pointer("db/LATEST").unwrap().unwrap();
    assert_eq!(seen.body, b"2");
    writer.put_pointer("db/LATEST", b"3").unwrap();

    // A writer at a later epoch moves the pointer: our next swap is
    // refused, and the pointer's metadata proves a newer holder.
    let current = store.get("db/LATEST", None).unwrap().version;
    let other = PutOptions::new(PutMode::Update(current))
        .with_metadata(EPOCH_METADATA, "2")
        .with_metadata(HOLDER_METADATA, "someone");
    store.put("db/LATEST", b"theirs", &other).unwrap();
    let err = writer.put_pointer("db/LATEST", b"4").unwrap_err();
    assert!(matches!(err, WriteError::Superseded(_)), "{err}");
    assert!(err.to_string().contains("another writer is active"));
    assert!(writer.lease().is_lost());
    assert_eq!(store.inner.peek("db/LATEST").unwrap(), b"theirs");
}

#[test]
fn a_pointer_left_by_an_earlier_holder_is_replaced_conditionally() {
    let (store, _clock, writer) = setup();
    store.inner.insert("db/LATEST", b"theirs");
    let before = store.inner.get("db/LATEST", None).unwrap().version;
    writer.put_pointer("db/LATEST", b"mine").unwrap();
    assert_eq!(store.inner.peek("db/LATEST").unwrap(), b"mine");
    assert!(!writer.lease().is_lost());
    // The write was conditional on the version read, not blind.
    let sent = store.put_modes.lock().unwrap().last().cloned();
    assert_eq!(sent, Some(PutMode::Update(before)));
}

#[test]
fn nothing_is_sent_after_the_write_deadline_or_once_lost() {
    let (store, clock, writer) = setup();
    clock.advance(Duration::from_secs(20));
    let requests = store.inner.requests();
    assert_eq!(
        writer.put_new("db/late", b"x").unwrap_err(),
        WriteError::Fenced {
            key: "db/late".into()
        }
    );
    assert!(writer.read_pointer("db/LATEST").is_err());
    assert_eq!(
        store.inner.requests(),
        requests,
        "no request after the fence"
    );

    let (store, _clock, writer) = setup();
    writer.lease().mark_lost(None);
    let requests = store.inner.requests();
    assert!(matches!(
        writer.put_pointer("db/LATEST", b"x"),
        Err(WriteError::Fenced { .. })
    ));
    assert_eq!(store.inner.requests(), requests);
}

#[test]
fn each_write_carries_the_write_deadline_as_its_request_deadline() {
    let (store, clock, writer) = setup();
    clock.advance(Duration::from_secs(5));
    let deadline = writer.lease().write_deadline().unwrap();
    assert_eq!(deadline, clock.now() + Duration::from_secs(15));
    writer.put_new("db/seg", b"x").unwrap();
    assert_eq!(store.last_put_deadline(), Some(deadline));
}

#[test]
fn a_job_run_twice_writes_and_releases_both_times() {
    let store = Recording::new();
    let clock = TestClock::new();
    for run in 1..=2u64 {
        let writer = holder(&store, &clock);
        assert_eq!(writer.lease().epoch(), run);
        for part in 0..3 {
            let key = format!("db/parts/{}-{part}", writer.lease().epoch());
            writer.put_new(&key, b"...").unwrap();
        }
        let latest = format!("parts/{}-2", writer.lease().epoch());
        writer
            .put_pointer("db/LATEST", latest.as_bytes())
            .unwrap_or_else(|e| panic!("run {run}: {e}"));
        assert!(!writer.lease().is_lost(), "run {run}");
        assert_eq!(writer.lease().release().unwrap(), Released::Freed);
    }
    assert_eq!(store.inner.peek("db/LATEST").unwrap(), b"parts/2-2");
}

#[test]
fn a_retried_put_new_whose_answer_was_lost_succeeds_and_keeps_the_lease() {
    let (store, _clock, writer) = setup();
    store.inner.lose_next_answers(1);
    assert!(matches!(
        writer.put_new("db/seg", b"one"),
        Err(WriteError::Store(_))
    ));
    // The caller retries the same write: it is recognised as its own.
    writer.put_new("db/seg", b"one").unwrap();
    assert!(!writer.lease().is_lost() && writer.lease().may_write());
    // The same key with other bytes is not ours to claim.
    assert!(matches!(
        writer.put_new("db/seg", b"two"),
        Err(WriteError::Exists { .. })
    ));
    assert!(!writer.lease().is_lost());
}

#[test]
fn a_pointer_write_whose_answer_was_lost_is_adopted_and_retried_once() {
    let (store, _clock, writer) = setup();
    writer.put_pointer("db/LATEST", b"1").unwrap();
    store.inner.lose_next_answers(1);
    assert!(matches!(
        writer.put_pointer("db/LATEST", b"2"),
        Err(WriteError::Store(_))
    ));
    // The write landed, so the version the writer holds is stale: the
    // retry is refused, finds our own write, adopts its version and swaps.
    writer.put_pointer("db/LATEST", b"2").unwrap();
    assert!(!writer.lease().is_lost());
    assert_eq!(store.inner.peek("db/LATEST").unwrap(), b"2");
    writer.put_pointer("db/LATEST", b"3").unwrap();
}

/// A holder that has not noticed a pause (its clock says it may still
/// write) and a successor whose clock ran past the holder's TTL.
fn stale_and_successor() -> (Arc<Recording>, FencedWriter, FencedWriter) {
    let store = Recording::new();
    let stale_clock = TestClock::new();
    let stale = holder(&store, &stale_clock);
    stale.put_pointer("db/LATEST", b"1").unwrap();
    let successor_clock = TestClock::starting_at(stale_clock.wall() + Duration::from_secs(31));
    let successor = holder(&store, &successor_clock);
    assert_eq!(successor.lease().epoch(), 2);
    successor.put_new("db/seg", b"new").unwrap();
    successor.put_pointer("db/LATEST", b"2").unwrap();
    assert!(stale.lease().may_write());
    (store, stale, successor)
}

#[test]
fn a_writer_at_a_higher_epoch_supersedes_the_stale_holder() {
    let (store, stale, _successor) = stale_and_successor();
    assert!(matches!(
        stale.put_new("db/seg", b"old"),
        Err(WriteError::Superseded(_))
    ));
    assert!(stale.lease().is_lost());
    assert_eq!(store.inner.peek("db/seg").unwrap(), b"new");

    let (store, stale, _successor) = stale_and_successor();
    let err = stale.put_pointer("db/LATEST", b"old").unwrap_err();
    assert!(matches!(err, WriteError::Superseded(_)), "{err}");
    assert!(stale.lease().is_lost());
    assert_eq!(store.inner.peek("db/LATEST").unwrap(), b"2");
}

#[test]
fn an_object_from_an_earlier_epoch_fails_put_new_without_touching_the_lease() {
    let store = Recording::new();
    let clock = TestClock::new();
    let first = holder(&store, &clock);
    first.put_new("db/seg", b"one").unwrap();
    first.lease().release().unwrap();
    let second = holder(&store, &clock);
    match second.put_new("db/seg", b"two") {
        Err(WriteError::Exists { key, epoch, .. }) => {
            assert_eq!((key.as_str(), epoch), ("db/seg", Some(1)));
        }
        other => panic!("expected Exists, got {other:?}"),
    }
    assert!(!second.lease().is_lost() && second.lease().may_write());
}

#[test]
fn a_lease_lost_by_a_write_refusal_still_releases_its_own_record() {
    let (store, clock, writer) = setup();
    // A higher-epoch object appears (a writer the lease never heard of).
    let options = PutOptions::new(PutMode::Create)
        .with_metadata(EPOCH_METADATA, "99")
        .with_metadata(HOLDER_METADATA, "someone");
    store.put("db/seg", b"theirs", &options).unwrap();
    assert!(matches!(
        writer.put_new("db/seg", b"mine"),
        Err(WriteError::Superseded(_))
    ));
    assert!(writer.lease().is_lost());
    let _ = clock;
    assert_eq!(writer.lease().release().unwrap(), Released::Freed);
    let record = LeaseRecord::parse(&store.inner.peek("db/LEASE").unwrap()).unwrap();
    assert!(record.is_released());
}

#[test]
fn a_reader_rejects_objects_older_than_the_epoch_it_trusts() {
    let store = Recording::new();
    let clock = TestClock::new();
    let first = holder(&store, &clock);
    first.put_new("db/a", b"a").unwrap();
    first.lease().release().unwrap();
    let second = holder(&store, &clock);
    second.put_new("db/b", b"b").unwrap();
    store.inner.insert("db/plain", b"not fenced");

    let reader = FencedReader::new(store.clone()).trusting(2);
    let b = reader.get("db/b").unwrap();
    assert_eq!(
        (b.epoch, b.holder.as_deref()),
        (2, Some(second.lease().instance_id()))
    );
    assert_eq!(b.object.body, b"b");
    match reader.get("db/a") {
        Err(ReadError::Stale { epoch, trusted, .. }) => assert_eq!((epoch, trusted), (1, 2)),
        other => panic!("expected Stale, got {other:?}"),
    }
    assert!(matches!(
        reader.get("db/plain"),
        Err(ReadError::Unfenced { .. })
    ));
    assert!(
        matches!(reader.get("db/none"), Err(ReadError::Store(e)) if e.kind() == StoreErrorKind::NotFound)
    );
    assert_eq!(
        FencedReader::new(store.clone()).get("db/a").unwrap().epoch,
        1
    );
}

/// Reading a pointer a newer holder wrote is proof enough: the stale
/// holder's lease is marked lost, and the version read is not kept, so no
/// later `put_pointer` can swap the pointer back to an older epoch.
#[test]
fn reading_a_pointer_from_a_newer_holder_supersedes_the_stale_holder() {
    let (store, stale, _successor) = stale_and_successor();
    let err = stale.read_pointer("db/LATEST").unwrap_err();
    assert!(matches!(err, WriteError::Superseded(_)), "{err}");
    assert!(err.to_string().contains("epoch 2"), "{err}");
    assert!(stale.lease().is_lost());
    assert!(stale.put_pointer("db/LATEST", b"old").is_err());
    assert_eq!(store.inner.peek("db/LATEST").unwrap(), b"2");
}

/// What `put_new`, `put_pointer` and `read_pointer` of `key` each say:
/// every one must be refused with `OutsideLease`.
fn refusals(writer: &FencedWriter, key: &str) -> Vec<String> {
    [
        writer.put_new(key, b"x").map(|_| ()),
        writer.put_pointer(key, b"x").map(|_| ()),
        writer.read_pointer(key).map(|_| ()),
    ]
    .into_iter()
    .map(|result| match result {
        Err(e @ WriteError::OutsideLease { .. }) => e.to_string(),
        other => panic!("{key}: expected OutsideLease, got {other:?}"),
    })
    .collect()
}

/// A writer stays inside its lease: a key outside the lease's prefix, and
/// any lease record or probe key (its own or a nested lease's), is refused
/// with nothing sent, saying how to write elsewhere; another prefix can be
/// allowed explicitly.
#[test]
fn writes_outside_the_lease_prefix_are_refused() {
    let (store, _clock, writer) = setup();
    let before = store.inner.requests();
    for key in [
        "somebody-else/data",
        "dbx/data",
        "db",
        "db/LEASE",
        "db/LEASE.probe-0123",
        "db/tables/t1/LEASE",
    ] {
        for text in refusals(&writer, key) {
            assert!(text.contains(key), "{text}");
            assert!(
                text.contains("allow_prefix") || text.contains("lease record"),
                "{text}"
            );
        }
    }
    assert_eq!(store.inner.requests(), before, "nothing was sent");
    writer.put_new("db/parts/1", b"x").unwrap();
    let writer = writer.allow_prefix("shared/");
    writer.put_new("shared/parts/1", b"x").unwrap();
    assert!(matches!(
        writer.put_new("shared/LEASE", b"x"),
        Err(WriteError::OutsideLease { .. })
    ));
}

/// A `.` or `..` segment is refused, as the directory store refuses it: S3
/// stores `db/../other/x` literally, but a server or proxy that normalises
/// dot segments would write outside the prefix.
#[test]
fn keys_with_dot_segments_are_refused() {
    let (store, _clock, writer) = setup();
    let before = store.inner.requests();
    for key in [
        "db/../other/x",
        "db/parts/../../x",
        "db/./x",
        "db/parts/..",
        "db/.",
    ] {
        for text in refusals(&writer, key) {
            assert!(
                text.contains(key) && text.contains("`.` or `..` segment"),
                "{text}"
            );
        }
    }
    assert_eq!(store.inner.requests(), before, "nothing was sent");
    // Dots inside a segment are names like any other.
    writer.put_new("db/parts/.hidden", b"x").unwrap();
    writer.put_new("db/parts/x..y", b"x").unwrap();
    writer.put_new("db/.../x", b"x").unwrap();
}
