//! The HTTP client against a scripted loopback server: what goes on the
//! wire, keep-alive, answers real test servers never give, body caps and
//! timeouts.
#![cfg(http)]

mod common;

use bucket_lease_backends::{Credentials, HttpStore};
use bucket_lease_core::store::{DeleteMode, PutMode, PutOptions, Store, StoreErrorKind, Version};
use common::canned::{Canned, Reply};
use std::time::{Duration, Instant};

use common::canned::store_builder as builder;

fn store(server: &Canned) -> HttpStore {
    builder(server).build().unwrap()
}

fn update(etag: &str) -> PutOptions {
    PutOptions::new(PutMode::Update(Version::etag(etag)))
}

#[test]
fn renewals_reuse_one_connection_and_carry_signed_conditions() {
    let server = Canned::start(vec![
        Reply::status(200).header("ETag", "\"v1\""),
        Reply::status(200).header("ETag", "\"v2\""),
        Reply::status(200).header("ETag", "\"v3\""),
    ]);
    let store = store(&server);
    let mut version = Version::etag("\"v0\"");
    for _ in 0..3 {
        let options = PutOptions::new(PutMode::Update(version.clone()))
            .with_metadata("owner", "host-7")
            .with_deadline(Some(Instant::now() + Duration::from_secs(5)));
        version = store.put("jobs/LEASE", b"{\"n\":1}", &options).unwrap();
    }
    assert_eq!(version.etag.as_deref(), Some("\"v3\""));
    assert_eq!(server.connections(), 1, "one keep-alive connection");

    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0].method, "PUT");
    assert_eq!(seen[0].path, "/bkt/jobs/LEASE");
    assert_eq!(seen[0].header("if-match"), Some("\"v0\""));
    assert_eq!(seen[2].header("if-match"), Some("\"v2\""));
    assert_eq!(
        seen[0].header("content-type"),
        Some("application/octet-stream")
    );
    assert_eq!(seen[0].header("x-amz-meta-owner"), Some("host-7"));
    assert_eq!(seen[0].header("x-amz-security-token"), Some("the-token"));
    assert_eq!(seen[0].body, b"{\"n\":1}");
    // The SHA-256 of the body, as S3 wants it.
    assert_eq!(
        seen[0].header("x-amz-content-sha256"),
        Some("2bfd14f43d17fc7cea24e0917a8879b4b2f880b8baeec1b9d90fbaad655e71bd")
    );
    let auth = seen[0].header("authorization").unwrap();
    assert!(
        auth.starts_with("AWS4-HMAC-SHA256 Credential=AKID/"),
        "{auth}"
    );
    assert!(
        auth.contains("if-match") && auth.contains("x-amz-content-sha256"),
        "{auth}"
    );
}

/// The answers of a service that passes the check made before a store's
/// first conditional delete: the scratch object created, a delete on a
/// wrong ETag refused (the object kept), one on its own ETag accepted (the
/// object gone).
fn delete_check_passes() -> Vec<Reply> {
    vec![
        Reply::status(200).header("ETag", "\"scratch\""),
        Reply::error(412, "PreconditionFailed", "no", "RC412"),
        Reply::status(200).header("ETag", "\"scratch\""),
        Reply::status(204),
        Reply::status(404),
    ]
}

#[test]
fn create_sends_if_none_match_and_delete_sends_if_match() {
    let mut replies = vec![Reply::status(200).header("ETag", "\"a\"")];
    replies.extend(delete_check_passes());
    replies.extend([Reply::status(204), Reply::status(204), Reply::status(204)]);
    let server = Canned::start(replies);
    let store = store(&server);
    store
        .put("k", b"x", &PutOptions::new(PutMode::Create))
        .unwrap();
    store
        .delete("k", &DeleteMode::IfVersion(Version::etag("\"a\"")), None)
        .unwrap();
    store.delete("k", &DeleteMode::Unconditional, None).unwrap();
    // Checked once: the next conditional delete is sent at once.
    store
        .delete("k", &DeleteMode::IfVersion(Version::etag("\"b\"")), None)
        .unwrap();
    let seen = server.seen();
    assert_eq!(seen.len(), 9);
    assert_eq!(seen[0].header("if-none-match"), Some("*"));
    // The check, on a scratch key beside "k".
    let scratch = &seen[1].path;
    assert!(scratch.starts_with("/bkt/k.probe-"), "{scratch}");
    assert_eq!(seen[1].header("if-none-match"), Some("*"));
    assert_eq!(
        (seen[2].method.as_str(), &seen[2].path),
        ("DELETE", scratch)
    );
    assert_ne!(seen[2].header("if-match"), Some("\"scratch\""));
    assert_eq!(seen[3].method, "HEAD");
    assert_eq!(seen[4].header("if-match"), Some("\"scratch\""));
    assert_eq!(seen[5].method, "HEAD");
    assert_eq!(
        (seen[6].method.as_str(), seen[6].path.as_str()),
        ("DELETE", "/bkt/k")
    );
    assert_eq!(seen[6].header("if-match"), Some("\"a\""));
    assert_eq!(seen[7].header("if-match"), None);
    assert_eq!(seen[8].header("if-match"), Some("\"b\""));
}

/// A service that deletes on a wrong ETag (as Ceph RGW 16.2 does) fails
/// the check: the conditional delete asked for is not sent, nor is any
/// later one, and each answers NotImplemented saying why.
#[test]
fn a_service_that_ignores_if_match_on_delete_is_sent_no_conditional_delete() {
    let server = Canned::start(vec![
        Reply::status(200).header("ETag", "\"scratch\""),
        // The delete on a wrong ETag: accepted, the object deleted.
        Reply::status(204),
        // The clean-up delete of the scratch object.
        Reply::status(204),
    ]);
    let store = store(&server);
    for _ in 0..2 {
        let e = store
            .delete("k", &DeleteMode::IfVersion(Version::etag("\"a\"")), None)
            .unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::NotImplemented, "{e}");
        assert!(e.to_string().contains("ignore If-Match on DELETE"), "{e}");
    }
    let seen = server.seen();
    assert_eq!(seen.len(), 3, "nothing sent after the check");
    assert!(
        seen.iter().all(|s| s.path != "/bkt/k"),
        "k was never touched"
    );
    assert_eq!(seen[2].header("if-match"), None, "the clean-up");
}

/// A check whose request fails decides nothing: the delete fails with that
/// error, and the next conditional delete checks again.
#[test]
fn a_delete_check_that_could_not_finish_is_made_again() {
    let mut replies = vec![Reply::error(403, "AccessDenied", "no writes here", "R403")];
    replies.extend(delete_check_passes());
    replies.push(Reply::status(204));
    let server = Canned::start(replies);
    let store = store(&server);
    let delete = DeleteMode::IfVersion(Version::etag("\"a\""));
    let e = store.delete("k", &delete, None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::PermissionDenied, "{e}");
    store.delete("k", &delete, None).unwrap();
    let seen = server.seen();
    assert_eq!(seen.len(), 7);
    assert_eq!(seen[6].header("if-match"), Some("\"a\""));
}

/// The check of conditional deletes holds only for the spelling of ETags
/// it was made in (issue 28). A service that refuses every quoted
/// `If-Match`, a right one too (Ceph RGW 16.2 on PUT), fails it in quotes;
/// once the store learned the bare spelling, the next conditional delete
/// checks again, bare, and is sent, bare, when that check passes.
#[test]
fn the_delete_check_is_made_again_in_a_new_spelling() {
    let mut replies = vec![
        // The check in quotes: the scratch object created, a delete on a
        // wrong ETag refused and the object kept, one on its own ETag
        // refused too; then the clean-up.
        Reply::status(200).header("ETag", "\"scratch\""),
        Reply::error(412, "PreconditionFailed", "no", "RC1"),
        Reply::status(200).header("ETag", "\"scratch\""),
        Reply::error(412, "PreconditionFailed", "no", "RC2"),
        Reply::status(204),
        // A write on k's own ETag refused in quotes, the HEAD showing it
        // was right, the write sent bare: accepted.
        Reply::error(412, "PreconditionFailed", "no", "RK1"),
        Reply::status(200).header("ETag", "\"e1\""),
        Reply::status(200).header("ETag", "\"e2\""),
    ];
    replies.extend(delete_check_passes());
    replies.push(Reply::status(204));
    let server = Canned::start(replies);
    let store = store(&server);
    let e = store
        .delete("k", &DeleteMode::IfVersion(Version::etag("\"a\"")), None)
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::NotImplemented, "{e}");
    store.put("k", b"x", &update("\"e1\"")).unwrap();
    assert_eq!(store.condition_spelling(), 1, "learned bare");
    store
        .delete("k", &DeleteMode::IfVersion(Version::etag("\"e2\"")), None)
        .expect("checked again in the bare spelling, and sent");
    let seen = server.seen();
    assert_eq!(seen.len(), 14, "5 for the first check, 3, 5 again, 1");
    assert_eq!(seen[3].header("if-match"), Some("\"scratch\""), "quoted");
    let scratch = &seen[8].path;
    assert!(scratch.starts_with("/bkt/k.probe-"), "{scratch}");
    assert_eq!(seen[8].header("if-none-match"), Some("*"));
    let wrong = seen[9].header("if-match").unwrap();
    assert!(
        !wrong.contains('"'),
        "the check's deletes go out bare: {wrong}"
    );
    assert_eq!(seen[11].header("if-match"), Some("scratch"));
    assert_eq!(
        (seen[13].method.as_str(), seen[13].path.as_str()),
        ("DELETE", "/bkt/k")
    );
    assert_eq!(seen[13].header("if-match"), Some("e2"));
}

/// A spelling a right ETag was accepted in is not switched by a question
/// another thread opened before that (issue 28). One store, a service that
/// honours quoted ETags (and bare ones): thread A's write on the pointer's
/// `"e1"` is refused while the spelling is open (the pointer had moved);
/// while A's HEAD is on its way the pointer comes back to `"e1"` (an ABA,
/// or a stale replica), and thread B's write on its lease's `"f1"` is
/// accepted in quotes, which settles them. A's HEAD then answers `"e1"`:
/// A's refusal stands, the spelling stays quoted and uncounted, and B's
/// next renewal goes out quoted as its probe checked.
#[test]
fn a_spelling_settled_while_another_threads_question_was_open_stays() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc, Mutex};
    let (head_arrived, arrived) = mpsc::channel::<()>();
    let (release, released) = mpsc::channel::<()>();
    let (head_arrived, released) = (Mutex::new(head_arrived), Mutex::new(released));
    let heads = AtomicUsize::new(0);
    let server = Canned::answering(move |seen| {
        let ok = |etag: &str| Reply::status(200).header("ETag", etag);
        let path = seen.path.as_str();
        match (seen.method.as_str(), path, seen.header("if-match")) {
            ("PUT", "/bkt/a/ptr", Some("\"e1\"")) => {
                Reply::error(412, "PreconditionFailed", "moved", "RA1")
            }
            ("HEAD", "/bkt/a/ptr", _) => {
                // The first HEAD is held until B's write was answered.
                if heads.fetch_add(1, Ordering::SeqCst) == 0 {
                    head_arrived.lock().unwrap().send(()).unwrap();
                    let wait = released.lock().unwrap();
                    wait.recv_timeout(Duration::from_secs(60)).unwrap();
                }
                ok("\"e1\"")
            }
            ("PUT", "/bkt/a/ptr", Some("e1")) => ok("\"e3\""),
            ("PUT", "/bkt/b/LEASE", Some("\"f1\"")) => ok("\"f2\""),
            ("PUT", "/bkt/b/LEASE", Some("\"f2\"" | "f2")) => ok("\"f3\""),
            _ => Reply::status(500),
        }
    });
    let store = Arc::new(store(&server));
    let within = || Some(Instant::now() + Duration::from_secs(60));
    let a = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            store.put("a/ptr", b"A", &update("\"e1\"").with_deadline(within()))
        })
    };
    // A's refusal came while the spelling was open: its HEAD is waiting.
    arrived.recv_timeout(Duration::from_secs(60)).unwrap();
    let f2 = store
        .put("b/LEASE", b"B", &update("\"f1\"").with_deadline(within()))
        .expect("B's right ETag, accepted in quotes");
    release.send(()).unwrap();
    let a = a.join().unwrap();
    assert_eq!(
        store.condition_spelling(),
        0,
        "settled quoted: not switched"
    );
    let e = a.expect_err("A's refusal stands");
    assert_eq!(e.kind(), StoreErrorKind::Precondition, "{e}");
    let options = PutOptions::new(PutMode::Update(f2)).with_deadline(within());
    store.put("b/LEASE", b"B", &options).unwrap();
    let seen = server.seen();
    let renewals: Vec<_> = seen.iter().filter(|s| s.path == "/bkt/b/LEASE").collect();
    assert_eq!(renewals.len(), 2);
    assert_eq!(
        renewals[1].header("if-match"),
        Some("\"f2\""),
        "still quoted"
    );
    let pointer: Vec<_> = seen.iter().filter(|s| s.path == "/bkt/a/ptr").collect();
    assert_eq!(pointer.len(), 2, "A's PUT and HEAD, no second spelling");
}

#[test]
fn unquoted_etags_go_on_the_wire_without_quotes() {
    let server = Canned::start(vec![Reply::status(200).header("ETag", "\"b\"")]);
    let store = builder(&server).unquoted_etags(true).build().unwrap();
    store.put("k", b"x", &update("\"a\"")).unwrap();
    assert_eq!(server.seen()[0].header("if-match"), Some("a"));
}

#[test]
fn answers_are_mapped_by_meaning_and_name_the_request() {
    let server = Canned::start(
        vec![
            Reply::error(409, "ConditionalRequestConflict", "try again", "R409"),
            Reply::error(
                501,
                "NotImplemented",
                "A header you provided implies functionality that is not implemented",
                "R501",
            ),
            Reply::error(500, "InternalError", "oops", "R500"),
            // A GET is tried three times in all.
            Reply::status(503).header("x-amz-request-id", "HDR503a"),
            Reply::status(503).header("x-amz-request-id", "HDR503b"),
            Reply::status(503).header("x-amz-request-id", "HDR503"),
            Reply::error(
                403,
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match",
                "R403",
            ),
            Reply::status(304),
            Reply::error(404, "NoSuchKey", "gone", "R404"),
            // The HEAD asking whether the refused ETag was the object's own
            // (the spelling is not settled yet): the key is absent, so no.
            Reply::status(404),
        ]
        .into_iter()
        .chain(delete_check_passes())
        .chain([
            Reply::error(412, "PreconditionFailed", "no", "R412"),
            Reply::error(404, "NoSuchKey", "gone", "R404b"),
            Reply::status(418),
            Reply::error(404, "NoSuchBucket", "no bucket", "RNB"),
        ])
        .collect(),
    );
    let store = store(&server);
    let create = PutOptions::new(PutMode::Create);

    let e = store.put("k", b"1", &update("\"x\"")).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Conflict);
    assert_eq!(e.code(), Some("ConditionalRequestConflict"));

    let e = store.put("k", b"2", &create).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::NotImplemented);

    let e = store.put("k", b"3", &create).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transport);
    assert!(e.may_have_landed() && !e.is_timeout());
    assert_eq!(e.request_id(), Some("R500"));

    let e = store.get("k", None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transport);
    assert_eq!(e.code(), Some("HTTP 503"));
    assert_eq!(e.request_id(), Some("HDR503"));

    let e = store
        .put("a/LEASE", b"5", &PutOptions::new(PutMode::Overwrite))
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::PermissionDenied);
    assert_eq!(
        (e.method(), e.key(), e.code(), e.request_id()),
        (
            "PUT",
            "a/LEASE",
            Some("SignatureDoesNotMatch"),
            Some("R403")
        )
    );
    let text = e.to_string();
    // Named by its URL, the profile's scheme and the bucket first.
    let scheme = common::any_profile().name;
    assert!(
        text.starts_with(&format!(
            "PUT {scheme}://bkt/a/LEASE: permission denied (SignatureDoesNotMatch: The request \
             signature"
        )),
        "{text}"
    );
    assert!(!text.contains("the-secret") && !text.contains("the-token"));

    let e = store.put("k", b"6", &create).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::AlreadyExists);

    let e = store.put("k", b"7", &update("\"x\"")).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Precondition);

    let e = store
        .delete("k", &DeleteMode::IfVersion(Version::etag("\"x\"")), None)
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Precondition);

    store
        .delete("k", &DeleteMode::IfVersion(Version::etag("\"x\"")), None)
        .expect("404 on a delete: gone");

    let e = store.get("k", None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Rejected);
    assert_eq!(e.code(), Some("HTTP 418"));

    let e = store.get("k", None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Rejected);
    assert_eq!(e.code(), Some("NoSuchBucket"));
}

#[test]
fn get_returns_the_version_and_the_metadata() {
    let server = Canned::start(vec![Reply::status(200)
        .header("ETag", "\"e1\"")
        .header("x-amz-version-id", "ver-1")
        .header("x-amz-meta-Owner", "host-7 pid-42")
        .header("x-amz-meta-epoch", "3")
        .header("x-amz-request-id", "ignored")
        .body("hello")]);
    let object = store(&server).get("k", None).unwrap();
    assert_eq!(object.body, b"hello");
    assert_eq!(object.version.etag.as_deref(), Some("\"e1\""));
    assert_eq!(object.version.version_id.as_deref(), Some("ver-1"));
    let mut metadata = object.metadata;
    metadata.sort();
    assert_eq!(
        metadata,
        vec![
            ("epoch".to_string(), "3".to_string()),
            ("owner".to_string(), "host-7 pid-42".to_string())
        ]
    );
}

#[test]
fn an_object_over_the_cap_is_too_large_and_carries_its_version() {
    let big = vec![b'x'; 64 * 1024 + 1];
    let versioned = |reply: Reply| {
        reply
            .header("ETag", "\"big\"")
            .header("x-amz-version-id", "v-big")
    };
    let server = Canned::start(vec![
        versioned(Reply::status(200).body(big.clone())),
        versioned(Reply {
            close_delimited: true,
            ..Reply::status(200).body(big.clone())
        }),
        Reply::status(200).body(big.clone()),
        Reply::status(412).body(big.clone()),
        Reply::status(200).body(vec![b'y'; 64 * 1024]),
    ]);
    let store = store(&server);
    let version = Version {
        etag: Some("\"big\"".into()),
        version_id: Some("v-big".into()),
    };
    for _ in 0..2 {
        let e = store.get("k", None).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::TooLarge, "{e}");
        assert_eq!(e.version(), Some(&version));
        assert!(e.to_string().contains("65536-byte cap"), "{e}");
    }
    let e = store.get("k", None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::TooLarge, "{e}");
    assert_eq!(e.version(), None, "the answer named no version");
    // An error body over the cap: the status still says what happened.
    let e = store
        .put("k", b"x", &PutOptions::new(PutMode::Create))
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::AlreadyExists);
    assert!(e.to_string().contains("65536-byte cap"), "{e}");
    assert_eq!(store.get("k", None).unwrap().body.len(), 64 * 1024);

    let server = Canned::start(vec![Reply::status(200)
        .header("ETag", "\"z\"")
        .body(vec![b'z'; 2000])]);
    let small = builder(&server).max_body(1000).build().unwrap();
    let e = small.get("k", None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::TooLarge, "{e}");
    assert_eq!(e.version(), Some(&Version::etag("\"z\"")));
    assert!(e.to_string().contains("1000-byte cap"), "{e}");
}

#[test]
fn an_object_over_the_cap_is_not_read() {
    // A declared length over the cap is answered from the headers, although
    // the promised bytes never come; a close-delimited body is read up to
    // one byte over the cap, although the connection stays open after it.
    let server = Canned::start(vec![
        Reply {
            declared_length: Some(1 << 40),
            linger: Duration::from_secs(10),
            ..Reply::status(200)
                .header("ETag", "\"declared\"")
                .body("only this")
        },
        Reply {
            close_delimited: true,
            linger: Duration::from_secs(10),
            ..Reply::status(200)
                .header("ETag", "\"endless\"")
                .body(vec![b'x'; 64 * 1024 + 1])
        },
    ]);
    let store = builder(&server)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    for etag in ["\"declared\"", "\"endless\""] {
        let e = store.get("k", None).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::TooLarge, "{etag}: {e}");
        assert!(!e.is_timeout(), "{etag}: {e}");
        assert_eq!(e.version(), Some(&Version::etag(etag)));
    }
}

#[test]
fn a_read_cap_as_large_as_memory_does_not_overflow() {
    let server = Canned::start(vec![
        Reply::status(200).body("small"),
        Reply {
            close_delimited: true,
            ..Reply::status(200).body("small")
        },
    ]);
    let store = builder(&server).max_body(usize::MAX).build().unwrap();
    assert_eq!(store.get("k", None).unwrap().body, b"small");
    assert_eq!(store.get("k", None).unwrap().body, b"small");
}

#[test]
fn a_version_without_an_etag_is_refused_without_sending_anything() {
    let server = Canned::start(vec![]);
    let store = store(&server);
    let no_etag = Version {
        etag: None,
        version_id: Some("v1".into()),
    };
    let e = store
        .put(
            "k",
            b"x",
            &PutOptions::new(PutMode::Update(no_etag.clone())),
        )
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Rejected, "{e}");
    let e = store
        .delete("k", &DeleteMode::IfVersion(no_etag), None)
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Rejected, "{e}");
    assert_eq!(server.connections(), 0);
}

#[test]
fn slow_answers_time_out_at_the_timeout_or_the_deadline() {
    let slow = || Reply {
        delay: Duration::from_secs(3),
        ..Reply::status(200)
    };
    let server = Canned::start(vec![slow(), slow()]);
    let store = builder(&server)
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = Instant::now();
    let e = store.get("k", None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transport);
    assert!(e.is_timeout(), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2));

    let store = builder(&server).build().unwrap();
    let started = Instant::now();
    let options = PutOptions::new(PutMode::Create)
        .with_deadline(Some(Instant::now() + Duration::from_millis(200)));
    let e = store.put("k", b"x", &options).unwrap_err();
    assert!(e.is_timeout() && e.may_have_landed(), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_deadline_already_passed_sends_nothing() {
    let server = Canned::start(vec![]);
    let store = store(&server);
    let past = Some(Instant::now() - Duration::from_millis(5));
    let e = store.get("k", past).unwrap_err();
    assert!(e.is_timeout() && e.kind() == StoreErrorKind::Transport);
    let e = store
        .delete("k", &DeleteMode::Unconditional, past)
        .unwrap_err();
    assert!(e.is_timeout());
    assert_eq!(server.connections(), 0);
}

#[test]
fn a_closed_port_is_a_transport_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let store = HttpStore::builder(common::any_profile())
        .endpoint(format!("http://127.0.0.1:{port}"))
        .bucket("b")
        .region("us-east-1")
        .credentials(Credentials::new("A", "S"))
        .build()
        .unwrap();
    let e = store.get("k", None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transport);
}
