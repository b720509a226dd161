//! Uploads in parts on the directory store, where only the tests' hook
//! (or the file itself) can put a request: deadlines passing mid-part and
//! right before publishing, leftovers of a killed process, and two
//! requests on one upload at once.

use super::*;
use bucket_lease_core::multipart::{
    AbortUpload, BeginUpload, CompleteUpload, UploadPart, UploadedPart,
};

/// Begin an upload of `key` and send `parts`, each as one part.
fn upload(store: &DirStore, key: &str, parts: &[&[u8]]) -> (String, Vec<UploadedPart>) {
    let id = store.begin_upload(&BeginUpload::new(key, &[])).unwrap();
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

/// Send `body` as the part after `parts` of the upload `id` of `key`, and
/// complete the upload create-only from all of them.
fn complete_with(
    store: &DirStore,
    key: &str,
    id: &str,
    mut parts: Vec<UploadedPart>,
    body: &[u8],
) -> Version {
    let number = parts.len() as u32 + 1;
    let part = store.upload_part(&UploadPart::new(key, id, number, body));
    parts.push(part.unwrap());
    let complete = CompleteUpload::new(key, id, &parts, &PutMode::Create);
    store.complete_upload(&complete).unwrap()
}

/// The one upload file of the bucket at `root`.
fn upload_file(root: &Path) -> PathBuf {
    let files: Vec<PathBuf> = fs::read_dir(root.join(".bucket-lease/uploads"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.into_iter().next().unwrap()
}

/// A part whose deadline passes while it is written stops at the next
/// chunk: no chunk is written after the deadline but the one under way,
/// the part is not taken (its bytes are cut off), nothing is published,
/// and the upload takes the part again.
#[test]
fn a_part_whose_deadline_passes_mid_body_writes_no_further_chunk() {
    let (dir, store) = store();
    let (id, _) = upload(&store, "k", &[]);
    let before = fs::metadata(upload_file(&dir.0)).unwrap().len();
    let deadline = Instant::now() + Duration::from_secs(1);
    let (hook, written, late) = pausing_after_each_chunk(deadline);
    let body = vec![b'x'; 2 * CHUNK + CHUNK / 2];
    let answer = with_hook(hook, || {
        store.upload_part(&UploadPart::new("k", &id, 1, &body).with_deadline(Some(deadline)))
    });
    assert_eq!(
        late.get(),
        0,
        "{} chunks written after the deadline had passed ({} in all)",
        late.get(),
        written.get()
    );
    assert_not_sent("part", answer);
    assert_eq!(
        fs::metadata(upload_file(&dir.0)).unwrap().len(),
        before,
        "the part's bytes are cut off"
    );
    assert_eq!(listing(&dir.0), Vec::<String>::new(), "nothing published");
    assert_eq!(leftovers(&dir.0).len(), 1, "the upload only");

    complete_with(&store, "k", &id, Vec::new(), b"again");
    assert_eq!(store.get("k", None).unwrap().body, b"again");
}

/// A part paused past its deadline after its bytes are written, before
/// the mark that takes it, is not taken.
#[test]
fn a_part_paused_past_its_deadline_before_it_is_marked_is_not_taken() {
    let (_dir, store) = store();
    let (id, parts) = upload(&store, "k", &[b"one"]);
    let deadline = Instant::now() + Duration::from_millis(100);
    let answer = with_hook(pause_before_publishing(deadline), || {
        store.upload_part(&UploadPart::new("k", &id, 2, b"late").with_deadline(Some(deadline)))
    });
    assert_not_sent("part", answer);
    let e = store
        .complete_upload(&CompleteUpload::new("k", &id, &[], &PutMode::Create))
        .unwrap_err();
    assert_eq!(e.code(), Some("MalformedXML"), "{e}");
    complete_with(&store, "k", &id, parts, b"two");
    assert_eq!(store.get("k", None).unwrap().body, b"onetwo");
}

/// A completion paused past its deadline under the lock, its condition
/// checked, publishes nothing, and leaves the upload as it was: it
/// completes later, with a fresh ETag.
#[test]
fn a_completion_paused_past_its_deadline_under_the_lock_publishes_nothing() {
    let (dir, store) = store();
    let (v, writes) = three_writes_over_k(&store);
    for (what, key, mode) in writes {
        let (id, parts) = upload(&store, key, &[b"after"]);
        let deadline = Instant::now() + Duration::from_millis(100);
        let answer = with_hook(pause_before_publishing(deadline), || {
            store.complete_upload(
                &CompleteUpload::new(key, &id, &parts, &mode).with_deadline(Some(deadline)),
            )
        });
        assert_not_sent(what, answer);
        let got = store.get("k", None).unwrap();
        assert_eq!((got.body, got.version), (b"before".to_vec(), v.clone()));
        assert_eq!(
            store.get("new", None).unwrap_err().kind(),
            StoreErrorKind::NotFound
        );
        store.abort_upload(&AbortUpload::new(key, &id)).unwrap();
    }
    let (id, parts) = upload(&store, "new", &[b"after"]);
    let deadline = Instant::now() + Duration::from_millis(100);
    let answer = with_hook(pause_before_publishing(deadline), || {
        store.complete_upload(
            &CompleteUpload::new("new", &id, &parts, &PutMode::Create)
                .with_deadline(Some(deadline)),
        )
    });
    assert_not_sent("create", answer);
    // As it was: it takes its next part, and completes.
    let v = complete_with(&store, "new", &id, parts, b"+more");
    let got = store.get("new", None).unwrap();
    assert_eq!((got.body, got.version), (b"after+more".to_vec(), v));
    assert_eq!(listing(&dir.0), ["k", "new"]);
    assert!(leftovers(&dir.0).is_empty());
}

/// A part a killed process left half-written (bytes after the last mark)
/// is cut off by the upload's next request.
#[test]
fn bytes_a_killed_part_left_are_cut_off_by_the_next_request() {
    let (dir, store) = store();
    let (id, parts) = upload(&store, "k", &[b"one"]);
    let file = upload_file(&dir.0);
    fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap()
        .write_all(b"half a part")
        .unwrap();
    complete_with(&store, "k", &id, parts, b"two");
    assert_eq!(store.get("k", None).unwrap().body, b"onetwo");
}

/// An upload whose completion was killed after it wrote the object's ETag
/// (before the rename or the mark's return) takes only its abort, and
/// says so.
#[test]
fn an_upload_a_killed_completion_left_must_be_aborted() {
    let (dir, store) = store();
    let (id, parts) = upload(&store, "k", &[b"one"]);
    let file = File::open(upload_file(&dir.0)).unwrap();
    let object = encode_header(None, "\"0123456789abcdef0123456789abcdef\"", &[]);
    attr::set(&file, &object).unwrap();
    for answer in [
        store
            .upload_part(&UploadPart::new("k", &id, 2, b"two"))
            .map(drop),
        store
            .complete_upload(&CompleteUpload::new("k", &id, &parts, &PutMode::Create))
            .map(drop),
    ] {
        let e = answer.unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Rejected, "{e}");
        assert!(
            e.to_string().contains("was being completed")
                && e.to_string().contains("abort the upload"),
            "{e}"
        );
    }
    store.abort_upload(&AbortUpload::new("k", &id)).unwrap();
    assert_eq!((listing(&dir.0), leftovers(&dir.0)), (vec![], vec![]));
}

/// Requests on one upload go one at a time: one that finds another
/// holding the upload's file answers Conflict and changes nothing.
#[test]
fn a_request_on_an_upload_another_holds_is_a_conflict() {
    let (dir, store) = store();
    let (id, parts) = upload(&store, "k", &[b"one"]);
    let holder = File::open(upload_file(&dir.0)).unwrap();
    holder.lock().unwrap();
    let e = store
        .upload_part(&UploadPart::new("k", &id, 2, b"two"))
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Conflict, "{e}");
    assert!(e.to_string().contains("one at a time"), "{e}");
    let e = store
        .complete_upload(&CompleteUpload::new("k", &id, &parts, &PutMode::Create))
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Conflict, "{e}");
    drop(holder);
    store
        .complete_upload(&CompleteUpload::new("k", &id, &parts, &PutMode::Create))
        .unwrap();
    assert_eq!(store.get("k", None).unwrap().body, b"one");
}
