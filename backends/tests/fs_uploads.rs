//! Objects in parts on the directory store: multipart uploads completed
//! under a condition, aborted, raced by two handles, and streamed reads
//! with no cap.
#![cfg(feature = "fs")]

use bucket_lease_backends::fs::DirStore;
use bucket_lease_core::multipart::{
    AbortUpload, BeginUpload, CompleteUpload, UploadPart, UploadedPart,
};
use bucket_lease_core::store::{DeleteMode, PutMode, PutOptions, Store, StoreErrorKind, Version};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// A directory under the system's temporary directory with a random name,
/// removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let name = format!("bucket-lease-fs-uploads-{:016x}", getrandom::u64().unwrap());
        let dir = std::env::temp_dir().join(name);
        // The bucket's directory must exist, as an S3 bucket must.
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn store() -> (TempDir, DirStore) {
    let dir = TempDir::new();
    let store = DirStore::open(&dir.0).unwrap();
    (dir, store)
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// The names in the bucket's root at `root` but the store's own, sorted.
fn listing(root: &Path) -> Vec<String> {
    let mut names = names(root);
    names.retain(|name| name != ".bucket-lease" && name != ".bucket-lease.lock");
    names
}

/// The upload files of the bucket at `root`.
fn uploads(root: &Path) -> Vec<String> {
    names(&root.join(".bucket-lease/uploads"))
}

fn metadata(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// Begin an upload of `key` with `meta` and send `parts`, each as one part.
fn upload(
    store: &DirStore,
    key: &str,
    meta: &[(String, String)],
    parts: &[&[u8]],
) -> (String, Vec<UploadedPart>) {
    let id = store.begin_upload(&BeginUpload::new(key, meta)).unwrap();
    let taken = (1..)
        .zip(parts)
        .map(|(number, body)| {
            store
                .upload_part(&UploadPart::new(key, &id, number, body))
                .unwrap()
        })
        .collect();
    (id, taken)
}

fn read_all(reader: &mut dyn Read) -> Vec<u8> {
    let mut body = Vec::new();
    reader.read_to_end(&mut body).unwrap();
    body
}

#[test]
fn a_create_only_upload_on_an_absent_key_becomes_the_object_with_its_metadata() {
    let (dir, store) = store();
    let meta = metadata(&[("owner", "host 7"), ("note", "ünï")]);
    let (id, parts) = upload(&store, "jobs/a/OUT", &meta, &[b"first,", b"", b"third"]);
    assert_eq!(id.len(), 32, "{id}");
    assert_eq!(
        parts.iter().map(|p| p.number).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(
        store.get("jobs/a/OUT", None).unwrap_err().kind(),
        StoreErrorKind::NotFound,
        "nothing at the key before the completion"
    );
    let version = store
        .complete_upload(&CompleteUpload::new(
            "jobs/a/OUT",
            &id,
            &parts,
            &PutMode::Create,
        ))
        .unwrap();
    let etag = version.etag.clone().unwrap();
    assert!(
        etag.len() == 34 && etag[1..33].bytes().all(|b| b.is_ascii_hexdigit()),
        "a fresh ETag as a PUT gets: {etag}"
    );
    assert!(parts.iter().all(|p| p.etag != etag));

    let got = store.get("jobs/a/OUT", None).unwrap();
    assert_eq!(
        (got.body, got.version.clone(), got.metadata.clone()),
        (b"first,third".to_vec(), version.clone(), meta.clone())
    );
    let mut opened = store.open("jobs/a/OUT", None).unwrap();
    assert_eq!(opened.object.version, version);
    assert_eq!(opened.object.metadata, meta);
    assert!(opened.object.body.is_empty());
    assert_eq!(read_all(&mut opened.body), b"first,third");
    assert_eq!(
        names(&dir.0.join("jobs/a")),
        ["OUT"],
        "the upload's file became the object"
    );
    assert_eq!(
        std::fs::read(dir.0.join("jobs/a/OUT")).unwrap(),
        b"first,third",
        "a plain file of the object's bytes"
    );
    assert!(uploads(&dir.0).is_empty());

    // Done: the upload is no more.
    let again = store
        .complete_upload(&CompleteUpload::new(
            "jobs/a/OUT",
            &id,
            &parts,
            &PutMode::Overwrite,
        ))
        .unwrap_err();
    assert_eq!(
        (again.kind(), again.code()),
        (StoreErrorKind::NotFound, Some("NoSuchUpload")),
        "{again}"
    );
    let e = store
        .upload_part(&UploadPart::new("jobs/a/OUT", &id, 4, b"more"))
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::NotFound, "{e}");
    store
        .abort_upload(&AbortUpload::new("jobs/a/OUT", &id))
        .unwrap();
    assert_eq!(store.get("jobs/a/OUT", None).unwrap().version, version);
}

#[test]
fn a_create_only_completion_on_a_taken_key_changes_nothing_and_the_upload_stays() {
    let (dir, store) = store();
    let existing = store
        .put("k", b"before", &PutOptions::new(PutMode::Create))
        .unwrap();
    let (id, parts) = upload(&store, "k", &[], &[b"after"]);
    let e = store
        .complete_upload(&CompleteUpload::new("k", &id, &parts, &PutMode::Create))
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.code()),
        (StoreErrorKind::AlreadyExists, Some("PreconditionFailed")),
        "{e}"
    );
    let got = store.get("k", None).unwrap();
    assert_eq!(
        (got.body, got.version),
        (b"before".to_vec(), existing.clone())
    );
    // The upload is as it was: refused again, or completed on the version.
    let e = store
        .complete_upload(&CompleteUpload::new("k", &id, &parts, &PutMode::Create))
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::AlreadyExists);
    let stale = PutMode::Update(Version::etag("\"stale\""));
    let e = store
        .complete_upload(&CompleteUpload::new("k", &id, &parts, &stale))
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Precondition, "{e}");
    assert_eq!(
        (listing(&dir.0), uploads(&dir.0).len()),
        (vec!["k".to_string()], 1),
        "the object and the upload"
    );

    store.abort_upload(&AbortUpload::new("k", &id)).unwrap();
    assert_eq!(
        (listing(&dir.0), uploads(&dir.0).len()),
        (vec!["k".to_string()], 0)
    );
    let e = store
        .complete_upload(&CompleteUpload::new("k", &id, &parts, &PutMode::Create))
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::NotFound, "{e}");
    assert_eq!(store.get("k", None).unwrap().version, existing);
}

#[test]
fn an_update_completion_replaces_the_version_it_names() {
    let (_dir, store) = store();
    let v1 = store
        .put("k", b"1", &PutOptions::new(PutMode::Create))
        .unwrap();
    let (id, parts) = upload(&store, "k", &[], &[b"2"]);
    let v2 = store
        .complete_upload(&CompleteUpload::new(
            "k",
            &id,
            &parts,
            &PutMode::Update(v1.clone()),
        ))
        .unwrap();
    assert_ne!(v1, v2);
    let (id, parts) = upload(&store, "k", &[], &[b"3"]);
    let v3 = store
        .complete_upload(&CompleteUpload::new("k", &id, &parts, &PutMode::Overwrite))
        .unwrap();
    let got = store.get("k", None).unwrap();
    assert_eq!((got.body, got.version), (b"3".to_vec(), v3));
}

#[test]
fn an_abort_removes_the_upload_and_no_folder_waits_for_it() {
    let (dir, store) = store();
    store
        .put("p/q/other", b"x", &PutOptions::new(PutMode::Create))
        .unwrap();
    let (id, parts) = upload(&store, "p/q/k", &[], &[b"part"]);
    // The upload lives in the store's own folder: a delete that empties
    // the key's folder of objects removes it.
    store
        .delete("p/q/other", &DeleteMode::Unconditional, None)
        .unwrap();
    assert_eq!(listing(&dir.0), Vec::<String>::new());
    assert_eq!(uploads(&dir.0), std::slice::from_ref(&id));
    // Reads see no object there.
    assert_eq!(
        store.get("p/q/k", None).unwrap_err().kind(),
        StoreErrorKind::NotFound
    );

    // An abort names the upload's key: another key's aborts nothing.
    store
        .abort_upload(&AbortUpload::new("p/q/other", &id))
        .unwrap();
    assert_eq!(uploads(&dir.0), std::slice::from_ref(&id));
    store.abort_upload(&AbortUpload::new("p/q/k", &id)).unwrap();
    assert_eq!((listing(&dir.0), uploads(&dir.0)), (vec![], vec![]));
    store
        .abort_upload(&AbortUpload::new("p/q/k", &id))
        .expect("an unknown upload is aborted already");
    let e = store
        .complete_upload(&CompleteUpload::new("p/q/k", &id, &parts, &PutMode::Create))
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::NotFound, "{e}");
    let e = store
        .upload_part(&UploadPart::new("p/q/k", &id, 2, b"more"))
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::NotFound, "{e}");
    assert_eq!(
        (listing(&dir.0), uploads(&dir.0)),
        (vec![], vec![]),
        "nothing made again"
    );
}

#[test]
fn parts_go_in_order_once_and_the_completion_names_them_all() {
    let (_dir, store) = store();
    let (id, parts) = upload(&store, "k", &[], &[b"1", b"2"]);
    for (number, why) in [
        (1, "taken already"),
        (2, "taken already"),
        (4, "before part 3"),
    ] {
        let e = store
            .upload_part(&UploadPart::new("k", &id, number, b"x"))
            .unwrap_err();
        assert_eq!(
            (e.kind(), e.code()),
            (StoreErrorKind::Rejected, Some("InvalidPartOrder")),
            "{e}"
        );
        assert!(
            e.to_string().contains(why) && e.to_string().contains("send part 3 next"),
            "{e}"
        );
    }
    let e = store
        .upload_part(&UploadPart::new("k", &id, 0, b"x"))
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Rejected, "{e}");

    let swapped = [parts[1].clone(), parts[0].clone()];
    let wrong_etag = [
        parts[0].clone(),
        UploadedPart {
            number: 2,
            etag: "\"x\"".into(),
        },
    ];
    for (list, code) in [
        (&parts[..1], "InvalidPart"),
        (&swapped[..], "InvalidPartOrder"),
        (&wrong_etag[..], "InvalidPart"),
        (&[][..], "MalformedXML"),
    ] {
        let e = store
            .complete_upload(&CompleteUpload::new("k", &id, list, &PutMode::Create))
            .unwrap_err();
        assert_eq!(
            (e.kind(), e.code()),
            (StoreErrorKind::Rejected, Some(code)),
            "{e}"
        );
        assert!(e.to_string().contains("every part"), "{e}");
    }
    store
        .complete_upload(&CompleteUpload::new("k", &id, &parts, &PutMode::Create))
        .unwrap();
    assert_eq!(store.get("k", None).unwrap().body, b"12");
}

#[test]
fn an_upload_id_that_is_not_the_stores_is_refused_and_names_no_file() {
    let (dir, store) = store();
    let (id, parts) = upload(&store, "a/k", &[], &[b"x"]);
    let outside = dir.0.join("x.upload");
    std::fs::write(&outside, b"not an upload").unwrap();
    for bad in [
        "../../x",
        "../x",
        "",
        "x",
        &id.to_uppercase(),
        &format!("{id}/../x"),
        &format!("{id}0"),
    ] {
        let answers = [
            store
                .upload_part(&UploadPart::new("a/k", bad, 2, b"y"))
                .map(drop),
            store
                .complete_upload(&CompleteUpload::new("a/k", bad, &parts, &PutMode::Create))
                .map(drop),
            store.abort_upload(&AbortUpload::new("a/k", bad)),
        ];
        for answer in answers {
            let e = answer.unwrap_err();
            assert_eq!(e.kind(), StoreErrorKind::Rejected, "{bad:?}: {e}");
            assert!(e.to_string().contains("not an upload id"), "{e}");
        }
    }
    assert_eq!(std::fs::read(&outside).unwrap(), b"not an upload");
    // Keys are checked as a PUT checks them.
    let e = store
        .begin_upload(&BeginUpload::new("a/../k", &[]))
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Rejected, "{e}");
    store
        .complete_upload(&CompleteUpload::new("a/k", &id, &parts, &PutMode::Create))
        .unwrap();
}

#[test]
fn a_passed_deadline_begins_nothing_takes_no_part_and_publishes_nothing() {
    let (dir, store) = store();
    let past = Some(Instant::now() - Duration::from_millis(1));
    let e = store
        .begin_upload(&BeginUpload::new("k", &[]).with_deadline(past))
        .unwrap_err();
    assert!(e.is_timeout() && !e.may_have_landed(), "{e}");
    assert_eq!((listing(&dir.0), uploads(&dir.0)), (vec![], vec![]));
    let (id, parts) = upload(&store, "k", &[], &[b"x"]);
    let e = store
        .upload_part(&UploadPart::new("k", &id, 2, b"y").with_deadline(past))
        .unwrap_err();
    assert!(e.is_timeout() && !e.may_have_landed(), "{e}");
    let e = store
        .complete_upload(
            &CompleteUpload::new("k", &id, &parts, &PutMode::Create).with_deadline(past),
        )
        .unwrap_err();
    assert!(e.is_timeout() && !e.may_have_landed(), "{e}");
    let e = store
        .abort_upload(&AbortUpload::new("k", &id).with_deadline(past))
        .unwrap_err();
    assert!(e.is_timeout() && !e.may_have_landed(), "{e}");
    assert_eq!(
        store.get("k", None).unwrap_err().kind(),
        StoreErrorKind::NotFound
    );
    store
        .complete_upload(&CompleteUpload::new("k", &id, &parts, &PutMode::Create))
        .unwrap();
    assert_eq!(store.get("k", None).unwrap().body, b"x");
}

/// Two handles on one directory (as two processes) race create-only
/// completions of their own uploads on one key: exactly one wins, and the
/// object is the winner's.
#[test]
fn of_two_handles_racing_create_only_completions_exactly_one_wins() {
    let dir = TempDir::new();
    for round in 0..20 {
        let key = format!("race/{round}");
        let barrier = Arc::new(Barrier::new(2));
        let racers: Vec<_> = (0..2u8)
            .map(|n| {
                let store = DirStore::open(&dir.0).unwrap();
                let barrier = barrier.clone();
                let key = key.clone();
                std::thread::spawn(move || {
                    let (id, parts) = upload(&store, &key, &[], &[&[b'a' + n; 100]]);
                    barrier.wait();
                    let answer = store.complete_upload(&CompleteUpload::new(
                        &key,
                        &id,
                        &parts,
                        &PutMode::Create,
                    ));
                    if answer.is_err() {
                        store.abort_upload(&AbortUpload::new(&key, &id)).unwrap();
                    }
                    (n, answer)
                })
            })
            .collect();
        let answers: Vec<_> = racers.into_iter().map(|t| t.join().unwrap()).collect();
        let won: Vec<_> = answers.iter().filter(|(_, a)| a.is_ok()).collect();
        assert_eq!(won.len(), 1, "round {round}: {answers:?}");
        let (winner, version) = (won[0].0, won[0].1.clone().unwrap());
        for (_, answer) in &answers {
            if let Err(e) = answer {
                assert_eq!(e.kind(), StoreErrorKind::AlreadyExists, "{e}");
            }
        }
        let store = DirStore::open(&dir.0).unwrap();
        let got = store.get(&key, None).unwrap();
        assert_eq!((got.body, got.version), (vec![b'a' + winner; 100], version));
        assert_eq!(names(&dir.0.join("race")).len(), round + 1, "no leftovers");
        assert!(uploads(&dir.0).is_empty(), "no leftovers");
    }
}

/// Byte `i` of the big object: a pattern that no shifted or repeated
/// chunk matches.
fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 13)) as u8
}

/// A 64 MiB object, far past the read cap, streams whole through `open`,
/// in 8 MiB parts.
#[test]
fn a_64_mib_object_streams_whole_through_open() {
    const SIZE: usize = 64 << 20;
    const PART: usize = 8 << 20;
    let (_dir, store) = store();
    let id = store.begin_upload(&BeginUpload::new("big", &[])).unwrap();
    let mut parts = Vec::new();
    let mut part = vec![0u8; PART];
    for (at, number) in (0..SIZE).step_by(PART).zip(1..) {
        for (i, byte) in part.iter_mut().enumerate() {
            *byte = pattern(at + i);
        }
        parts.push(
            store
                .upload_part(&UploadPart::new("big", &id, number, &part))
                .unwrap(),
        );
    }
    drop(part);
    let version = store
        .complete_upload(&CompleteUpload::new("big", &id, &parts, &PutMode::Create))
        .unwrap();
    let e = store.get("big", None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::TooLarge, "{e}");

    let mut opened = store.open("big", None).unwrap();
    assert_eq!(opened.object.version, version);
    let mut buffer = vec![0u8; 1 << 20];
    let mut read = 0;
    loop {
        let n = opened.body.read(&mut buffer).unwrap();
        if n == 0 {
            break;
        }
        for (i, byte) in buffer[..n].iter().enumerate() {
            assert_eq!(*byte, pattern(read + i), "byte {}", read + i);
        }
        read += n;
    }
    assert_eq!(read, SIZE);
}

/// A streamed read keeps the version it opened, whatever replaces the
/// object meanwhile; an absent key is NotFound; a read past its deadline
/// fails, timed out.
#[test]
fn a_streamed_read_reads_one_version_within_its_deadline() {
    let (_dir, store) = store();
    let v1 = store
        .put("k", b"version one", &PutOptions::new(PutMode::Create))
        .unwrap();
    let mut opened = store.open("k", None).unwrap();
    store
        .put("k", b"version two!", &PutOptions::new(PutMode::Overwrite))
        .unwrap();
    store.delete("k", &DeleteMode::Unconditional, None).unwrap();
    assert_eq!(opened.object.version, v1);
    assert_eq!(read_all(&mut opened.body), b"version one");

    let e = store.open("k", None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::NotFound, "{e}");
    let past = Some(Instant::now() - Duration::from_millis(1));
    store
        .put("k", b"x", &PutOptions::new(PutMode::Create))
        .unwrap();
    assert!(store.open("k", past).unwrap_err().is_timeout());

    let soon = Instant::now() + Duration::from_millis(50);
    let mut opened = store.open("k", Some(soon)).unwrap();
    std::thread::sleep(soon.saturating_duration_since(Instant::now()) + Duration::from_millis(10));
    let e = opened.body.read(&mut [0; 8]).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    assert!(e.to_string().contains("later deadline"), "{e}");
}

/// The store keeps a verdict on create-only completions for the lease's
/// check to settle, shared by its clones.
#[test]
fn the_completion_verdict_is_kept_unsettled_for_the_lease_to_check() {
    use bucket_lease_core::multipart::CompletionCondition;
    let (_dir, store) = store();
    let conditions = store.upload_conditions().expect("kept by the store");
    assert_eq!(conditions.verdict(), None);
    conditions.settle(CompletionCondition::Honoured);
    let clone = store.clone();
    assert_eq!(
        clone.upload_conditions().unwrap().verdict(),
        Some(CompletionCondition::Honoured)
    );
}
