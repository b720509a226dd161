//! A lease broken while a large object streams under it (`bucket-lease
//! break` from another process): the holder's next renewal is refused, the
//! lease is lost, the next part is not sent, the upload is aborted (the
//! store no longer knows it), no object appears at the key, and `finish`
//! returns the loss. On a directory, on moto and on Ceph RGW.

mod cli_common;

use bucket_lease::multipart::MIN_PART_BYTES;
use bucket_lease::store::StoreErrorKind;
use bucket_lease::{
    Contender, Event, FencedWriter, Keeper, KeeperOptions, LeaseOptions, WriteError,
};
use cli_common::Target;
use std::io::Write;
use std::time::Duration;

fn a_break_mid_upload_aborts_it(t: &Target) {
    let url = t.url("upload-break");
    let (store, prefix) = t.store(&url);
    let mut contender = Contender::new(store.clone(), &prefix, LeaseOptions::new(3));
    let keeper = Keeper::spawn(contender.try_acquire().unwrap(), KeeperOptions::new()).unwrap();
    let holder = keeper.lease().instance_id().to_string();
    let key = format!("{prefix}/uploads/{}", keeper.lease().epoch());
    let writer = FencedWriter::new(keeper.lease().clone());
    let mut upload = writer.create(&key).unwrap().part_size(MIN_PART_BYTES);
    upload.write_all(&vec![7; MIN_PART_BYTES + 1]).unwrap();
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
        .upload_part(&key, &id, 2, b"late", None)
        .map(|_| ())
        .unwrap_err();
    assert_eq!(aborted.kind(), StoreErrorKind::NotFound, "{aborted}");
    let _ = keeper.stop();
}

#[test]
fn a_break_mid_upload_aborts_it_on_a_directory() {
    a_break_mid_upload_aborts_it(&Target::fs("upload-break"));
}

#[test]
fn a_break_mid_upload_aborts_it_on_moto() {
    if let Some(t) = Target::moto("upload-break") {
        a_break_mid_upload_aborts_it(&t);
    }
}

#[test]
fn a_break_mid_upload_aborts_it_on_rgw() {
    if let Some(t) = Target::rgw("upload-break") {
        a_break_mid_upload_aborts_it(&t);
    }
}
