//! A lease broken while a large object streams under it (`bucket-lease
//! break` from another process): the holder's next renewal is refused, the
//! lease is lost, the next part is not sent, the upload is aborted (the
//! store no longer knows it), no object appears at the key, and `finish`
//! returns the loss. On a directory and on moto. Ceph RGW 16.2 ignores
//! `If-None-Match` on completing an upload: a stream under a conditional
//! lease is refused there before any of its bytes is sent, and leaves
//! nothing; under a best-effort lease it goes unfenced, and a break still
//! aborts it.

mod cli_common;

use bucket_lease::multipart::{UploadPart, MIN_PART_BYTES};
use bucket_lease::store::StoreErrorKind;
use bucket_lease::KeptLease;
use bucket_lease::{
    Contender, Event, FencedWriter, Keeper, KeeperOptions, LeaseOptions, WriteError,
};
use cli_common::Target;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

/// How a store answers a part sent to an upload it no longer knows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unknown {
    /// `404 NoSuchUpload` (S3, RGW, the directory store).
    NotFound,
    /// moto 5.2.5: `500` with no code.
    ServerError,
}

fn a_break_mid_upload_aborts_it(t: &Target, options: LeaseOptions, unknown: Unknown) {
    let url = t.url("upload-break");
    let (store, prefix) = t.store(&url);
    let mut contender = Contender::new(store.clone(), &prefix, options);
    let keeper = Keeper::spawn(contender.try_acquire().unwrap(), KeeperOptions::new()).unwrap();
    let holder = keeper.lease().instance_id().to_string();
    let key = format!("{prefix}/uploads/{}", keeper.lease().epoch());
    let writer = FencedWriter::new(keeper.lease().clone());
    let mut upload = writer.create(&key).unwrap().part_size(MIN_PART_BYTES);
    upload
        .write_all(&vec![7; MIN_PART_BYTES + 1])
        .unwrap_or_else(|e| panic!("the first part: {e}"));
    assert_eq!(upload.parts_sent(), 1);
    let id = upload.upload_id().expect("an upload begun").to_string();

    let broke = t.run(["break", "--holder", holder.as_str(), url.as_str()]);
    assert_eq!(broke.code, Some(0), "{broke:?}");
    // The renewal after the break is refused: the lease is lost.
    let events = keeper.events();
    loop {
        match events.recv_timeout(Duration::from_secs(10)) {
            Ok(Event::Lost { .. } | Event::Fenced) => break,
            Ok(_) => {}
            Err(e) => panic!("no loss within 10 s: {e}"),
        }
    }
    assert!(!keeper.lease().may_write());

    let more = upload.write_all(&vec![8; MIN_PART_BYTES]);
    assert!(more.is_err(), "a part was sent after the loss");
    let answer = upload.finish();
    assert!(
        matches!(&answer, Err(WriteError::Fenced { key: k }) if *k == key),
        "{answer:?}"
    );
    let gone = store.head(&key, None).map(|_| ()).unwrap_err();
    assert_eq!(gone.kind(), StoreErrorKind::NotFound, "an object appeared");
    let aborted = store
        .upload_part(&UploadPart::new(&key, &id, 2, b"late"))
        .map(|_| ())
        .unwrap_err();
    let expected = match unknown {
        Unknown::NotFound => StoreErrorKind::NotFound,
        Unknown::ServerError => StoreErrorKind::Transport,
    };
    assert_eq!(aborted.kind(), expected, "{aborted}");
    let _ = keeper.stop();
}

#[test]
fn a_break_mid_upload_aborts_it_on_a_directory() {
    let t = Target::fs("upload-break");
    a_break_mid_upload_aborts_it(&t, LeaseOptions::new(6), Unknown::NotFound);
}

#[test]
fn a_break_mid_upload_aborts_it_on_moto() {
    if let Some(t) = Target::moto("upload-break") {
        a_break_mid_upload_aborts_it(&t, LeaseOptions::new(6), Unknown::ServerError);
    }
}

#[test]
fn a_stream_on_rgw_is_refused_under_a_conditional_lease() {
    let Some(t) = Target::rgw("upload-refused") else {
        return;
    };
    let url = t.url("upload-refused");
    let (store, prefix) = t.store(&url);
    let mut contender = Contender::new(store.clone(), &prefix, LeaseOptions::new(30));
    let lease = Arc::new(contender.try_acquire().unwrap());
    let key = format!("{prefix}/uploads/{}", lease.epoch());
    let writer = FencedWriter::new(Arc::clone(&lease));
    let mut upload = writer.create(&key).unwrap().part_size(MIN_PART_BYTES);
    let refused = upload.write_all(&vec![7; MIN_PART_BYTES + 1]).unwrap_err();
    assert!(
        refused.to_string().contains("ignores If-None-Match"),
        "{refused}"
    );
    assert_eq!(upload.upload_id(), None, "no upload was begun");
    let answer = upload.finish();
    assert!(
        matches!(&answer, Err(WriteError::UnfencedUploads { key: k }) if *k == key),
        "{answer:?}"
    );
    let gone = store.head(&key, None).map(|_| ()).unwrap_err();
    assert_eq!(gone.kind(), StoreErrorKind::NotFound);
    // An object of one part is still a fenced, create-only PUT.
    let mut small = writer.create(&format!("{prefix}/small")).unwrap();
    small.write_all(b"fits in one part").unwrap();
    small.finish().unwrap();
    assert!(lease.may_write());
}

#[test]
fn a_break_mid_upload_aborts_it_on_rgw_under_a_best_effort_lease() {
    if let Some(t) = Target::rgw("upload-break") {
        let options = LeaseOptions::new(6).best_effort(true);
        a_break_mid_upload_aborts_it(&t, options, Unknown::NotFound);
    }
}
