//! Fenced writes on the in-memory store with a test clock.

mod common;

use bucket_lease_core::fence::{EPOCH_METADATA, HOLDER_METADATA};
use bucket_lease_core::{
    Clock, FencedWriter, Lease, LeaseOptions, PutMode, PutOptions, Store, StoreErrorKind,
    TestClock, WriteError,
};
use common::Recording;
use std::sync::Arc;
use std::time::Duration;

fn setup() -> (Arc<Recording>, TestClock, FencedWriter) {
    let store = Recording::new();
    let clock = TestClock::new();
    let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
    let lease = Lease::acquire(store.clone(), "db", options).unwrap();
    (store, clock, FencedWriter::new(Arc::new(lease)))
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
        Err(WriteError::Superseded(error)) => {
            assert_eq!(error.key(), "db/seg-1");
            assert_eq!(error.kind(), StoreErrorKind::AlreadyExists);
        }
        other => panic!("expected Superseded, got {other:?}"),
    }
    assert!(
        writer.lease().is_lost(),
        "a refused write marks the lease lost"
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

    // Another writer moves the pointer: our next swap is refused.
    let current = store.get("db/LATEST", None).unwrap().version;
    let other = PutOptions::new(PutMode::Update(current));
    store.put("db/LATEST", b"theirs", &other).unwrap();
    let err = writer.put_pointer("db/LATEST", b"4").unwrap_err();
    assert!(matches!(err, WriteError::Superseded(_)), "{err}");
    assert!(err.to_string().contains("another writer is active"));
    assert!(writer.lease().is_lost());
    assert_eq!(store.inner.peek("db/LATEST").unwrap(), b"theirs");
}

#[test]
fn a_pointer_created_by_someone_else_is_not_overwritten_blindly() {
    let (store, _clock, writer) = setup();
    store.inner.insert("db/LATEST", b"theirs");
    assert!(matches!(
        writer.put_pointer("db/LATEST", b"mine"),
        Err(WriteError::Superseded(_))
    ));
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
fn a_failed_pointer_write_forgets_the_version_it_can_no_longer_trust() {
    let (store, _clock, writer) = setup();
    writer.put_pointer("db/LATEST", b"1").unwrap();
    store.inner.lose_next_answers(1);
    assert!(matches!(
        writer.put_pointer("db/LATEST", b"2"),
        Err(WriteError::Store(_))
    ));
    // The write landed; reading the pointer again lets the writer continue.
    assert_eq!(
        writer.read_pointer("db/LATEST").unwrap().unwrap().body,
        b"2"
    );
    writer.put_pointer("db/LATEST", b"3").unwrap();
    assert!(!writer.lease().is_lost());
}
