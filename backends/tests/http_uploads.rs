//! Multipart uploads and streamed reads on the HTTP store: on the real test
//! servers (moto, Ceph RGW 16.2, s3rver, nanio, localbucket), and against a
//! scripted server for what goes on the wire and the answers real servers
//! never give (an `<Error>` in a `200`, 501, 409, throttling).
//!
//! What the servers do with a completion's condition (`If-None-Match: *`
//! on a key that exists): moto and localbucket refuse it (412
//! `PreconditionFailed`, the object unchanged); Ceph RGW 16.2, s3rver and
//! nanio answer 200 and replace the object.
#![cfg(http)]

mod common;

use bucket_lease_backends::HttpStore;
use bucket_lease_core::multipart::{
    AbortUpload, BeginUpload, CompleteUpload, UploadPart, UploadedPart, MIN_PART_BYTES,
};
use bucket_lease_core::store::{
    Delivery, Object, PutMode, Store, StoreError, StoreErrorKind, Version,
};
use common::canned::{Canned, Reply};
use common::Server;
use std::io::Read;
use std::time::{Duration, Instant};

/// `len` bytes that differ from one `seed` to another and along the way.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A moment already past.
fn past() -> Option<Instant> {
    Some(Instant::now() - Duration::from_millis(1))
}

fn assert_not_sent(result: Result<impl std::fmt::Debug, StoreError>) {
    let e = result.unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transport, "{e}");
    assert_eq!(e.delivery(), Delivery::NotSent, "{e}");
    assert!(e.is_timeout(), "{e}");
}

/// Begin an upload of `key`, send `bodies` as its parts, and return its id
/// and the parts.
fn upload(store: &HttpStore, key: &str, bodies: &[&[u8]]) -> (String, Vec<UploadedPart>) {
    let metadata = [("owner".to_string(), "host-7 pid-42".to_string())];
    let id = store
        .begin_upload(&BeginUpload::new(key, &metadata))
        .unwrap();
    assert!(!id.is_empty());
    let parts = bodies
        .iter()
        .zip(1..)
        .map(|(body, n)| {
            store
                .upload_part(&UploadPart::new(key, &id, n, body))
                .unwrap()
        })
        .collect::<Vec<_>>();
    for (part, n) in parts.iter().zip(1..) {
        assert_eq!(part.number, n);
        assert!(!part.etag.is_empty());
    }
    (id, parts)
}

/// The whole object at `key`, streamed, and what its answer's head said.
fn read_streamed(store: &HttpStore, key: &str, deadline: Option<Instant>) -> (Vec<u8>, Object) {
    let mut reader = store.open(key, deadline).unwrap();
    assert!(reader.object.body.is_empty());
    let mut bytes = Vec::new();
    reader.body.read_to_end(&mut bytes).unwrap();
    (bytes, reader.object)
}

/// What a server does where servers differ.
struct Quirks {
    /// A create-only completion on a taken key is refused (412).
    honours_create: bool,
    /// A begun upload's metadata is the object's.
    keeps_metadata: bool,
    /// After an abort: what a part and a completion of the upload get;
    /// `None` for a server that takes no abort (405 `MethodNotAllowed`).
    after_abort: Option<(StoreErrorKind, StoreErrorKind)>,
}

/// The round trip every server takes, as `quirks` say it differs.
fn uploads_round_trip(server: Server, quirks: Quirks) {
    let Some(builder) = common::builder(server) else {
        return;
    };
    let store = builder.build().unwrap();
    let big_reads = common::builder(server)
        .unwrap()
        .max_body(8 * 1024 * 1024)
        .build()
        .unwrap();
    let prefix = common::unique_prefix(&format!("uploads-{server:?}"));
    let key = format!("{prefix}/object with+odd~chars");
    let (first, second) = (pattern(1, MIN_PART_BYTES), pattern(2, 1024 * 1024 + 17));
    let whole = [first.as_slice(), second.as_slice()].concat();
    let metadata = if quirks.keeps_metadata {
        vec![("owner".to_string(), "host-7 pid-42".to_string())]
    } else {
        Vec::new()
    };

    // Create-only on an absent key.
    let (id, parts) = upload(&store, &key, &[&first, &second]);
    let version = store
        .complete_upload(&CompleteUpload::new(&key, &id, &parts, &PutMode::Create))
        .unwrap_or_else(|e| panic!("{server:?}: {e}"));
    let head = store.head(&key, None).unwrap();
    if let Some(etag) = &version.etag {
        assert_eq!(head.version.etag.as_ref(), Some(etag), "{server:?}");
    }
    for deadline in [None, Some(Instant::now() + Duration::from_secs(60))] {
        let (bytes, object) = read_streamed(&store, &key, deadline);
        assert!(
            bytes == whole,
            "{server:?}: the streamed object is both parts"
        );
        assert_eq!(object.version.etag, head.version.etag);
        assert_eq!(object.metadata, metadata, "{server:?}");
    }
    let object = big_reads.get(&key, None).unwrap();
    assert!(
        object.body == whole,
        "{server:?}: read whole under a big cap"
    );
    assert_eq!(object.metadata, metadata);
    // Under the default cap, the object is too large, its version kept.
    let e = store.get(&key, None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::TooLarge, "{e}");

    // Create-only again on the taken key.
    let other = pattern(3, 1000);
    let (id, parts) = upload(&store, &key, &[&other]);
    let again = store.complete_upload(&CompleteUpload::new(&key, &id, &parts, &PutMode::Create));
    if quirks.honours_create {
        let e = again.unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::AlreadyExists, "{server:?}: {e}");
        assert_eq!(e.code(), Some("PreconditionFailed"), "{e}");
        assert!(
            big_reads.get(&key, None).unwrap().body == whole,
            "unchanged"
        );
        store.abort_upload(&AbortUpload::new(&key, &id)).unwrap();
    } else {
        again.unwrap_or_else(|e| panic!("{server:?}: {e}"));
        assert_eq!(store.get(&key, None).unwrap().body, other, "replaced");
    }

    // Aborted: its parts are gone, and it cannot be completed.
    let aborted = format!("{prefix}/aborted");
    let (id, parts) = upload(&store, &aborted, &[&other]);
    match quirks.after_abort {
        Some((part, completion)) => {
            store
                .abort_upload(&AbortUpload::new(&aborted, &id))
                .unwrap();
            let e = store
                .upload_part(&UploadPart::new(&aborted, &id, 1, &other))
                .unwrap_err();
            assert_eq!(e.kind(), part, "{server:?}: {e}");
            let e = store
                .complete_upload(&CompleteUpload::new(
                    &aborted,
                    &id,
                    &parts,
                    &PutMode::Create,
                ))
                .unwrap_err();
            assert_eq!(e.kind(), completion, "{server:?}: {e}");
            assert_eq!(
                store.get(&aborted, None).unwrap_err().kind(),
                StoreErrorKind::NotFound
            );
            // Aborting it again, or an upload never begun, succeeds.
            store
                .abort_upload(&AbortUpload::new(&aborted, &id))
                .unwrap();
            store
                .abort_upload(&AbortUpload::new(&aborted, "2~never-begun.upload_id"))
                .unwrap_or_else(|e| panic!("{server:?}: {e}"));
        }
        None => {
            let e = store
                .abort_upload(&AbortUpload::new(&aborted, &id))
                .unwrap_err();
            assert_eq!(e.kind(), StoreErrorKind::Rejected, "{server:?}: {e}");
            assert_eq!(e.code(), Some("MethodNotAllowed"), "{e}");
        }
    }

    // A deadline already past: nothing sent.
    assert_not_sent(store.begin_upload(&BeginUpload::new(&aborted, &[]).with_deadline(past())));
    assert_not_sent(
        store.upload_part(&UploadPart::new(&aborted, &id, 1, &other).with_deadline(past())),
    );
    assert_not_sent(store.complete_upload(
        &CompleteUpload::new(&aborted, &id, &parts, &PutMode::Create).with_deadline(past()),
    ));
    assert_not_sent(store.abort_upload(&AbortUpload::new(&aborted, &id).with_deadline(past())));
    assert_not_sent(store.open(&key, past()));
    let absent = format!("{prefix}/absent");
    let e = store.open(&absent, None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::NotFound, "{e}");
}

/// moto 5.2.5: honours `If-None-Match: *` on a completion; answers a part
/// or a completion of an aborted upload 500 (no code).
#[test]
fn moto_takes_uploads_and_refuses_a_create_only_completion_on_a_taken_key() {
    uploads_round_trip(
        Server::Moto,
        Quirks {
            honours_create: true,
            keeps_metadata: true,
            after_abort: Some((StoreErrorKind::Transport, StoreErrorKind::Transport)),
        },
    );
}

/// Ceph RGW 16.2: ignores `If-None-Match: *` on a completion (200, the
/// object replaced); answers a completion of an aborted upload 500
/// `InternalError` ("This multipart completion is already in progress"),
/// a part of it 404 `NoSuchUpload`.
#[test]
fn rgw_takes_uploads_and_ignores_the_condition_of_a_completion() {
    uploads_round_trip(
        Server::Rgw,
        Quirks {
            honours_create: false,
            keeps_metadata: true,
            after_abort: Some((StoreErrorKind::NotFound, StoreErrorKind::Transport)),
        },
    );
}

/// nanio 0.1.7 verifies signatures, query strings included; ignores
/// `If-None-Match: *` on a completion.
#[test]
fn nanio_takes_uploads_signed_with_query_strings_and_ignores_the_condition() {
    uploads_round_trip(
        Server::Nanio,
        Quirks {
            honours_create: false,
            keeps_metadata: true,
            after_abort: Some((StoreErrorKind::NotFound, StoreErrorKind::NotFound)),
        },
    );
}

/// s3rver 3.7.1: ignores `If-None-Match: *` on a completion, and takes no
/// abort (405 `MethodNotAllowed`).
#[test]
fn s3rver_takes_uploads_and_ignores_the_condition_of_a_completion() {
    uploads_round_trip(
        Server::S3rver,
        Quirks {
            honours_create: false,
            keeps_metadata: true,
            after_abort: None,
        },
    );
}

/// localbucket 1.2.1: honours `If-None-Match: *` on a completion; drops
/// the metadata an upload was begun with.
#[test]
fn localbucket_takes_uploads_and_refuses_a_create_only_completion_on_a_taken_key() {
    uploads_round_trip(
        Server::LocalBucket,
        Quirks {
            honours_create: true,
            keeps_metadata: false,
            after_abort: Some((StoreErrorKind::NotFound, StoreErrorKind::NotFound)),
        },
    );
}

fn canned_store(server: &Canned) -> HttpStore {
    common::canned::store_builder(server).build().unwrap()
}

const INITIATED: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
    <InitiateMultipartUploadResult><Bucket>bkt</Bucket><Key>k</Key>\
    <UploadId>2~a+b/c=d</UploadId></InitiateMultipartUploadResult>";

fn completed(etag: &str) -> Reply {
    Reply::status(200).body(format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CompleteMultipartUploadResult>\
         <Key>k</Key><ETag>{etag}</ETag></CompleteMultipartUploadResult>"
    ))
}

fn parts() -> Vec<UploadedPart> {
    vec![
        UploadedPart {
            number: 1,
            etag: "\"p1\"".into(),
        },
        UploadedPart {
            number: 2,
            etag: "\"p<2>&\"".into(),
        },
    ]
}

#[test]
fn an_upload_goes_on_the_wire_as_s3_takes_it() {
    let server = Canned::start(vec![
        Reply::status(200).body(INITIATED),
        Reply::status(200).header("ETag", "\"p1\""),
        completed("&quot;whole-2&quot;").header("x-amz-version-id", "v7"),
        Reply::status(204),
    ]);
    let store = canned_store(&server);
    let metadata = [("owner".to_string(), "host-7".to_string())];
    let id = store
        .begin_upload(&BeginUpload::new("jobs/out", &metadata))
        .unwrap();
    assert_eq!(id, "2~a+b/c=d");
    let part = store
        .upload_part(&UploadPart::new("jobs/out", &id, 1, b"part one"))
        .unwrap();
    assert_eq!(
        part,
        UploadedPart {
            number: 1,
            etag: "\"p1\"".into()
        }
    );
    let version = store
        .complete_upload(&CompleteUpload::new(
            "jobs/out",
            &id,
            &parts(),
            &PutMode::Create,
        ))
        .unwrap();
    assert_eq!(version.etag.as_deref(), Some("\"whole-2\""));
    assert_eq!(version.version_id.as_deref(), Some("v7"));
    store
        .abort_upload(&AbortUpload::new("jobs/out", &id))
        .unwrap();

    let seen = server.seen();
    let lines: Vec<_> = seen
        .iter()
        .map(|s| format!("{} {}", s.method, s.path))
        .collect();
    assert_eq!(
        lines,
        [
            "POST /bkt/jobs/out?uploads",
            "PUT /bkt/jobs/out?partNumber=1&uploadId=2~a%2Bb%2Fc%3Dd",
            "POST /bkt/jobs/out?uploadId=2~a%2Bb%2Fc%3Dd",
            "DELETE /bkt/jobs/out?uploadId=2~a%2Bb%2Fc%3Dd",
        ]
    );
    assert_eq!(seen[0].header("x-amz-meta-owner"), Some("host-7"));
    assert_eq!(
        seen[0].header("content-type"),
        Some("application/octet-stream")
    );
    assert_eq!(seen[1].body, b"part one");
    assert_eq!(seen[2].header("if-none-match"), Some("*"));
    assert_eq!(
        String::from_utf8_lossy(&seen[2].body),
        "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
         <Part><PartNumber>1</PartNumber><ETag>&quot;p1&quot;</ETag></Part>\
         <Part><PartNumber>2</PartNumber><ETag>&quot;p&lt;2&gt;&amp;&quot;</ETag></Part>\
         </CompleteMultipartUpload>"
    );
    for request in &seen {
        let auth = request.header("authorization").unwrap();
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKID/"),
            "{auth}"
        );
    }
}

#[test]
fn completions_carry_the_mode_as_a_put_does() {
    let server = Canned::start(vec![
        completed("\"u\""),
        completed("\"o\"").header("ETag", "\"ignored\""),
    ]);
    let store = canned_store(&server);
    let mode = PutMode::Update(Version::etag("\"old-2\""));
    store
        .complete_upload(&CompleteUpload::new("k", "u1", &parts(), &mode))
        .unwrap();
    let version = store
        .complete_upload(&CompleteUpload::new(
            "k",
            "u1",
            &parts(),
            &PutMode::Overwrite,
        ))
        .unwrap();
    assert_eq!(version.etag.as_deref(), Some("\"o\""), "the result's ETag");
    let seen = server.seen();
    assert_eq!(seen[0].header("if-match"), Some("\"old-2\""));
    assert_eq!(seen[0].header("if-none-match"), None);
    assert_eq!(seen[1].header("if-match"), None);
    assert_eq!(seen[1].header("if-none-match"), None);
}

/// S3 may begin a completion's answer, `200`, before it is done, and say
/// in the body that it failed: the error its code says, never a success.
#[test]
fn an_error_in_the_body_of_a_completions_200_is_that_error() {
    let in_200 = |code: &str| Reply::error(200, code, "said late", "R200");
    let server = Canned::start(vec![
        in_200("InternalError"),
        in_200("PreconditionFailed"),
        in_200("NoSuchUpload"),
        Reply::status(200).body("<Unexpected/>"),
    ]);
    let store = canned_store(&server);
    let complete =
        || store.complete_upload(&CompleteUpload::new("k", "u1", &parts(), &PutMode::Create));
    let e = complete().unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transport, "{e}");
    assert_eq!(e.delivery(), Delivery::Answered, "{e}");
    assert!(e.may_have_landed());
    assert_eq!(e.code(), Some("InternalError"));
    assert!(e.to_string().contains("in the body of a 200 answer"), "{e}");
    assert_eq!(e.request_id(), Some("R200"));
    let e = complete().unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::AlreadyExists, "{e}");
    let e = complete().unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::NotFound, "{e}");
    assert!(
        e.to_string().contains("completed or aborted already"),
        "{e}"
    );
    let e = complete().unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transport, "{e}");
    assert!(e.may_have_landed(), "{e}");
    // Each sent once: a completion that may have landed is not sent again.
    assert_eq!(server.seen().len(), 4);
}

#[test]
fn refused_conflicting_and_unknown_completions_say_what_to_do() {
    let server = Canned::start(vec![
        Reply::error(501, "NotImplemented", "If-None-Match", "R1"),
        Reply::error(400, "NotImplemented", "A header you provided", "R2"),
        Reply::error(409, "ConditionalRequestConflict", "race", "R3"),
        Reply::error(404, "NoSuchUpload", "gone", "R4"),
        Reply::error(404, "NoSuchKey", "absent", "R5"),
        Reply::error(503, "SlowDown", "slow", "R6"),
    ]);
    let store = canned_store(&server);
    let complete =
        |mode: &PutMode| store.complete_upload(&CompleteUpload::new("k", "u1", &parts(), mode));
    for _ in 0..2 {
        let e = complete(&PutMode::Create).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::NotImplemented, "{e}");
        assert!(
            e.to_string()
                .contains("does not take conditions on completing an upload"),
            "{e}"
        );
    }
    let e = complete(&PutMode::Create).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Conflict, "{e}");
    assert!(e.to_string().contains("begun again"), "{e}");
    let e = complete(&PutMode::Create).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::NotFound, "{e}");
    let update = PutMode::Update(Version::etag("\"v\""));
    let e = complete(&update).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Precondition, "an absent key: {e}");
    let e = complete(&PutMode::Create).unwrap_err();
    assert!(e.is_throttled() && e.may_have_landed(), "{e}");
    assert_eq!(server.seen().len(), 6, "none sent twice");
}

#[test]
fn parts_begins_and_aborts_are_sent_again_after_a_transient_answer() {
    let server = Canned::start(vec![
        Reply::error(500, "InternalError", "x", "R1"),
        Reply::status(200).body(INITIATED),
        Reply::error(503, "SlowDown", "x", "R2"),
        Reply::status(200).header("ETag", "\"p1\""),
        Reply::error(500, "InternalError", "x", "R3"),
        Reply::error(404, "NoSuchUpload", "gone", "R4"),
    ]);
    let store = canned_store(&server);
    let id = store.begin_upload(&BeginUpload::new("k", &[])).unwrap();
    let part = store
        .upload_part(&UploadPart::new("k", &id, 1, b"bytes"))
        .unwrap();
    assert_eq!(part.etag, "\"p1\"");
    store.abort_upload(&AbortUpload::new("k", &id)).unwrap();
    let seen = server.seen();
    assert_eq!(seen.len(), 6);
    assert_eq!(seen[2].body, b"bytes");
    assert_eq!(seen[3].body, b"bytes", "the same part again");
}

#[test]
fn requests_the_store_cannot_form_are_refused_before_sending() {
    let server = Canned::start(vec![]);
    let store = canned_store(&server);
    for number in [0, 10_001] {
        let e = store
            .upload_part(&UploadPart::new("k", "u", number, b"x"))
            .unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Rejected, "{e}");
        assert!(e.to_string().contains("outside 1 to 10000"), "{e}");
    }
    let e = store
        .upload_part(&UploadPart::new("k", "", 1, b"x"))
        .unwrap_err();
    assert!(e.to_string().contains("upload id is empty"), "{e}");
    let e = store
        .complete_upload(&CompleteUpload::new("k", "u", &[], &PutMode::Create))
        .unwrap_err();
    assert!(e.to_string().contains("one part at least"), "{e}");
    let no_etag = PutMode::Update(Version::default());
    let e = store
        .complete_upload(&CompleteUpload::new("k", "u", &parts(), &no_etag))
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Rejected, "{e}");
    assert_not_sent(store.begin_upload(&BeginUpload::new("k", &[]).with_deadline(past())));
    assert_not_sent(store.complete_upload(
        &CompleteUpload::new("k", "u", &parts(), &PutMode::Create).with_deadline(past()),
    ));
    assert!(server.seen().is_empty(), "nothing sent");
}

#[test]
fn a_service_without_uploads_in_parts_says_to_write_with_one_put() {
    let server = Canned::start(vec![Reply::status(501), Reply::status(200).body("<x/>")]);
    let store = canned_store(&server);
    let e = store.begin_upload(&BeginUpload::new("k", &[])).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::NotImplemented, "{e}");
    assert!(e.to_string().contains("takes no uploads in parts"), "{e}");
    let e = store.begin_upload(&BeginUpload::new("k", &[])).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Rejected, "{e}");
    assert!(e.to_string().contains("without an <UploadId>"), "{e}");
}

#[test]
fn a_streamed_read_hands_out_the_body_past_the_cap_with_its_version() {
    let body = pattern(9, 3 * 1024 * 1024 + 5);
    let server = Canned::start(vec![
        Reply::status(200)
            .header("ETag", "\"big\"")
            .header("x-amz-version-id", "v2")
            .header("x-amz-meta-owner", "host-7")
            .body(body.clone()),
        Reply::error(404, "NoSuchKey", "no", "R1"),
    ]);
    let store = canned_store(&server);
    let mut reader = store.open("big", None).unwrap();
    assert_eq!(reader.object.version.etag.as_deref(), Some("\"big\""));
    assert_eq!(reader.object.version.version_id.as_deref(), Some("v2"));
    assert_eq!(
        reader.object.metadata,
        vec![("owner".into(), "host-7".into())]
    );
    let mut bytes = Vec::new();
    reader.body.read_to_end(&mut bytes).unwrap();
    assert!(bytes == body, "read whole, past the 64 KiB cap");
    let e = store.open("absent", None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::NotFound, "{e}");
    assert_eq!(e.method(), "GET");
}

/// A server whose every answer is a 200 declaring 1000 bytes of body,
/// sending 10, and closing the connection `stall` later.
fn stalling_server(stall: Duration) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\netag: \"e\"\r\ncontent-length: 1000\r\n\r\nxxxxxxxxxx",
                );
                std::thread::sleep(stall);
            });
        }
    });
    url
}

/// A body that stops coming: with a deadline, the read ends at it, timed
/// out, naming the object and how far it got; with none, the store's
/// timeout does not bound the body: the read ends when the server closes,
/// after it.
#[test]
fn a_streamed_body_is_bounded_by_the_deadline_and_else_by_nothing() {
    let url = stalling_server(Duration::from_millis(1500));
    let store = HttpStore::builder(common::any_profile())
        .endpoint(url)
        .bucket("bkt")
        .region("us-east-1")
        .credentials(bucket_lease_backends::Credentials::new("AKID", "SECRET"))
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let deadline = Some(Instant::now() + Duration::from_millis(400));
    let mut reader = store.open("stalled", deadline).unwrap();
    assert_eq!(reader.object.version.etag.as_deref(), Some("\"e\""));
    let mut bytes = Vec::new();
    let e = reader.body.read_to_end(&mut bytes).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    assert!(e.to_string().contains("://bkt/stalled"), "{e}");
    assert!(e.to_string().contains("after 10 bytes"), "{e}");
    assert_eq!(bytes, b"xxxxxxxxxx");

    let mut reader = store.open("stalled", None).unwrap();
    let started = Instant::now();
    let mut bytes = Vec::new();
    let e = reader.body.read_to_end(&mut bytes).unwrap_err();
    assert_ne!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    assert!(started.elapsed() > Duration::from_millis(500), "{e}");
    assert_eq!(bytes, b"xxxxxxxxxx");
}
