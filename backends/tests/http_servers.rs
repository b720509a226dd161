//! The HTTP client against servers that deviate from S3, as observed: the
//! client reports what each server does; the lease's probe must catch them.
#![cfg(http)]

mod common;

use bucket_lease_backends::Credentials;
use bucket_lease_core::store::{DeleteMode, PutMode, PutOptions, Store, StoreErrorKind, Version};
use common::Server;

fn create() -> PutOptions {
    PutOptions::new(PutMode::Create)
}

fn update(etag: &str) -> PutOptions {
    PutOptions::new(PutMode::Update(Version::etag(etag)))
}

#[test]
fn nanio_accepts_our_signatures_and_refuses_a_wrong_secret() {
    let Some(builder) = common::builder(Server::Nanio) else {
        return;
    };
    let store = builder.clone().build().unwrap();
    let key = format!("{}/LEASE", common::unique_prefix("nanio"));
    let version = store.put(&key, b"signed", &create()).unwrap();
    let object = store.get(&key, None).unwrap();
    assert_eq!(object.body, b"signed");
    assert_eq!(object.version.etag, version.etag);
    store
        .delete(&key, &DeleteMode::Unconditional, None)
        .unwrap();

    let access_key = Server::Nanio.credentials().access_key_id().to_string();
    let wrong = builder
        .credentials(Credentials::new(access_key, "not-the-secret"))
        .build()
        .unwrap();
    let e = wrong.put(&key, b"forged", &create()).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::PermissionDenied, "{e}");
    assert_eq!(e.code(), Some("SignatureDoesNotMatch"), "{e}");
    assert!(e.to_string().contains("SignatureDoesNotMatch"));
    assert!(!e.to_string().contains("not-the-secret"));
    let e = wrong.get(&key, None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::PermissionDenied, "{e}");
}

#[test]
fn s3rver_ignores_both_conditions() {
    let Some(store) = common::store(Server::S3rver) else {
        return;
    };
    let key = format!("{}/LEASE", common::unique_prefix("s3rver"));
    let first = store.put(&key, b"one", &create()).unwrap();
    assert!(first.etag.is_some());
    // A create over an existing key is accepted: If-None-Match ignored.
    store.put(&key, b"two", &create()).unwrap();
    assert_eq!(store.get(&key, None).unwrap().body, b"two");
    // An update with a made-up ETag is accepted: If-Match ignored.
    store.put(&key, b"three", &update("\"made-up\"")).unwrap();
    assert_eq!(store.get(&key, None).unwrap().body, b"three");
    store
        .delete(&key, &DeleteMode::Unconditional, None)
        .unwrap();
    assert_eq!(
        store.get(&key, None).unwrap_err().kind(),
        StoreErrorKind::NotFound
    );
}

#[test]
fn localbucket_honours_if_none_match_and_ignores_if_match() {
    let Some(store) = common::store(Server::LocalBucket) else {
        return;
    };
    let prefix = common::unique_prefix("localbucket");
    let key = format!("{prefix}/LEASE");
    store.put(&key, b"one", &create()).unwrap();
    let e = store.put(&key, b"two", &create()).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::AlreadyExists, "{e}");
    assert_eq!(store.get(&key, None).unwrap().body, b"one");

    // If-Match is ignored: a made-up ETag is accepted...
    store.put(&key, b"three", &update("\"made-up\"")).unwrap();
    assert_eq!(store.get(&key, None).unwrap().body, b"three");
    // ...even on an absent key, which it creates.
    let absent = format!("{prefix}/absent");
    store.put(&absent, b"made", &update("\"made-up\"")).unwrap();
    assert_eq!(store.get(&absent, None).unwrap().body, b"made");

    for k in [&key, &absent] {
        store.delete(k, &DeleteMode::Unconditional, None).unwrap();
    }
}
