//! The HTTP client against a real Ceph RGW 16.2 (Debian bookworm's, started
//! by `scripts/test-servers.sh`), with the profile's default settings: the
//! ETag spelling in `If-Match` is learned from RGW's answers, not
//! configured. RGW refuses a quoted `If-Match` even when the ETag is right,
//! accepts the bare one, and ignores `If-Match` on DELETE (which the store
//! finds out before it sends one: it then sends none).
#![cfg(http)]

mod common;

use bucket_lease_core::conformance;
use bucket_lease_core::store::{DeleteMode, PutMode, PutOptions, Store, StoreErrorKind, Version};
use common::Server;

fn update(version: &Version) -> PutOptions {
    PutOptions::new(PutMode::Update(version.clone()))
}

/// The whole suite, with the minio profile's default (conditional deletes
/// on, once the service passed the store's check): RGW passes every check;
/// it fails the store's check of conditional deletes (it deletes on a
/// wrong ETag), so the store sends none and answers NotImplemented,
/// deleting nothing, rather than letting RGW ignore the condition. The
/// store learned the bare spelling on its first right ETag refused, once.
#[test]
fn rgw_passes_the_conformance_suite_and_is_sent_no_conditional_delete() {
    let Some(store) = common::store(Server::Rgw) else {
        return;
    };
    assert_eq!(store.condition_spelling(), 0, "quoted, the profile's");
    let prefix = common::unique_prefix("conformance-rgw");
    let capabilities = conformance::run_all(&store, &prefix);
    assert!(!capabilities.conditional_delete, "{capabilities:?}");
    assert!(!capabilities.ignores_delete_conditions, "{capabilities:?}");
    assert_eq!(store.condition_spelling(), 1, "learned bare, once");
    // And the whole of the conditional-delete check passes on its own.
    assert!(!conformance::delete_if_version(&store, &prefix));
}

/// A fresh store on RGW, no spelling configured: the quoted ETag is
/// refused, one HEAD shows it was right, the write is sent bare and lands;
/// a stale or made-up ETag is still refused, and so is an update of an
/// absent key; once settled, no more questions.
#[test]
fn each_store_learns_the_bare_spelling_and_refusals_still_hold() {
    let Some(store) = common::store(Server::Rgw) else {
        return;
    };
    let key = format!("{}/LEASE", common::unique_prefix("spelling"));
    let v1 = store
        .put(&key, b"one", &PutOptions::new(PutMode::Create))
        .unwrap();
    let etag = v1.etag.clone().expect("an ETag");
    assert!(etag.starts_with('"'), "ETag as received: {etag}");
    let e = store
        .put(&key, b"again", &PutOptions::new(PutMode::Create))
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::AlreadyExists, "{e}");

    let v2 = store
        .put(&key, b"two", &update(&v1))
        .expect("a right ETag, learned to be sent bare");
    assert_eq!(store.condition_spelling(), 1);
    assert_ne!(v2.etag, v1.etag);
    for stale in [v1.clone(), Version::etag("\"0123456789abcdef\"")] {
        let e = store.put(&key, b"stale", &update(&stale)).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Precondition, "{stale:?}: {e}");
    }
    let absent = format!("{key}-absent");
    let e = store.put(&absent, b"x", &update(&v2)).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Precondition, "{e}");
    assert_eq!(
        store.get(&absent, None).unwrap_err().kind(),
        StoreErrorKind::NotFound
    );
    let v3 = store.put(&key, b"three", &update(&v2)).unwrap();
    assert_eq!(store.get(&key, None).unwrap().version, v3);
    assert_eq!(store.condition_spelling(), 1, "settled: no more questions");
    store
        .delete(&key, &DeleteMode::Unconditional, None)
        .unwrap();
}

/// 4 workers × 10 update-if-ETag increments on one counter, each worker's
/// first refusal possibly the spelling question: the counter ends at
/// exactly 40.
#[test]
fn compare_and_swap_race_ends_at_the_exact_total_on_rgw() {
    let Some(store) = common::store(Server::Rgw) else {
        return;
    };
    conformance::compare_and_swap_race(&store, &common::unique_prefix("race-rgw"), 4, 10);
}

/// Signatures: a wrong secret is refused as RGW's `SignatureDoesNotMatch`,
/// and the secret appears in no message.
#[test]
fn rgw_refuses_a_wrong_secret_and_the_message_shows_no_secret() {
    let Some(builder) = common::builder(Server::Rgw) else {
        return;
    };
    let access_key = Server::Rgw.credentials().access_key_id().to_string();
    let wrong = builder
        .credentials(bucket_lease_backends::Credentials::new(
            access_key,
            "not-the-rgw-secret",
        ))
        .build()
        .unwrap();
    let key = format!("{}/LEASE", common::unique_prefix("rgw-signature"));
    let e = wrong
        .put(&key, b"forged", &PutOptions::new(PutMode::Create))
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::PermissionDenied, "{e}");
    assert_eq!(e.code(), Some("SignatureDoesNotMatch"), "{e}");
    assert!(!e.to_string().contains("not-the-rgw-secret"), "{e}");
    assert!(!format!("{e:?}").contains("not-the-rgw-secret"), "{e:?}");
}
