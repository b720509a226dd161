//! Every HTTP profile against moto (behind one global lock), each with its
//! own addressing and region: the conformance suite, its compare-and-swap
//! race, and the round trips that depend on a real server.
#![cfg(http)]

mod common;

use bucket_lease_backends::config;
use bucket_lease_core::conformance;
use bucket_lease_core::store::{DeleteMode, PutMode, PutOptions, Store, StoreErrorKind, Version};
use common::Server;

#[test]
fn every_profile_passes_the_conformance_suite_on_moto() {
    let Some(stores) = common::profile_stores_on_moto() else {
        return;
    };
    for (name, store) in &stores {
        let prefix = common::unique_prefix(&format!("conformance-{name}"));
        let capabilities = conformance::run_all(store, &prefix);
        // R2's profile does not send conditional deletes; moto honours them.
        assert_eq!(capabilities.conditional_delete, *name != "r2", "{name}");
        assert!(!capabilities.ignores_delete_conditions, "{name}");
    }
}

#[test]
fn etags_metadata_and_absent_keys_round_trip_on_every_profile() {
    let Some(stores) = common::profile_stores_on_moto() else {
        return;
    };
    for (name, store) in &stores {
        let prefix = common::unique_prefix(name);
        let key = format!("{prefix}/odd key+é&=/LEASE");
        let e = store.get(&key, None).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::NotFound, "{name}: {e}");
        assert_eq!((e.method(), e.key()), ("GET", key.as_str()));

        let created = store
            .put(
                &key,
                b"{\"holder\":\"a\"}",
                &PutOptions::new(PutMode::Create).with_metadata("Owner", "host-7 pid-42"),
            )
            .unwrap();
        let etag = created.etag.clone().expect("an ETag");
        assert!(etag.starts_with('"'), "{name}: ETag as received: {etag}");

        let object = store.get(&key, None).unwrap();
        assert_eq!(object.body, b"{\"holder\":\"a\"}");
        assert_eq!(object.version.etag.as_deref(), Some(etag.as_str()));
        assert_eq!(
            object.metadata,
            vec![("owner".to_string(), "host-7 pid-42".to_string())],
            "{name}"
        );

        let e = store
            .put(&key, b"again", &PutOptions::new(PutMode::Create))
            .unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::AlreadyExists, "{name}: {e}");
        assert_eq!(e.code(), Some("PreconditionFailed"));

        let renewed = store
            .put(
                &key,
                b"{\"holder\":\"a\",\"n\":2}",
                &PutOptions::new(PutMode::Update(object.version.clone())),
            )
            .unwrap();
        assert_ne!(renewed.etag, created.etag);
        let e = store
            .put(&key, b"stale", &PutOptions::new(PutMode::Update(created)))
            .unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Precondition, "{name}: {e}");

        let absent = format!("{prefix}/absent");
        let e = store
            .put(
                &absent,
                b"x",
                &PutOptions::new(PutMode::Update(Version::etag("\"made-up\""))),
            )
            .unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Precondition, "{name}: {e}");
        assert_eq!(
            store.get(&absent, None).unwrap_err().kind(),
            StoreErrorKind::NotFound
        );

        let stale = DeleteMode::IfVersion(Version::etag("\"made-up\""));
        match store.delete(&key, &stale, None) {
            Err(e) if *name == "r2" => assert_eq!(e.kind(), StoreErrorKind::NotImplemented),
            Err(e) => assert_eq!(e.kind(), StoreErrorKind::Precondition, "{name}: {e}"),
            Ok(()) => panic!("{name}: a stale conditional delete succeeded"),
        }
        store.get(&key, None).expect("still there");
        store
            .delete(&key, &DeleteMode::Unconditional, None)
            .unwrap();
        store
            .delete(&key, &DeleteMode::Unconditional, None)
            .expect("deleting an absent key succeeds");
        assert_eq!(
            store.get(&key, None).unwrap_err().kind(),
            StoreErrorKind::NotFound
        );
    }
}

#[test]
fn compare_and_swap_race_ends_at_the_exact_total() {
    let Some(store) = common::store(Server::Moto) else {
        return;
    };
    // 4 workers × 10 update-if-ETag increments on one counter, retrying on
    // refusal: the suite panics unless the counter ends at exactly 40.
    conformance::compare_and_swap_race(&store, &common::unique_prefix("race"), 4, 10);
}

#[test]
fn an_object_over_the_cap_is_too_large_and_can_be_replaced_by_its_version() {
    let Some(store) = common::store(Server::Moto) else {
        return;
    };
    let key = format!("{}/big", common::unique_prefix("cap"));
    let body = vec![b'x'; 100 * 1024];
    let written = store
        .put(&key, &body, &PutOptions::new(PutMode::Overwrite))
        .unwrap();
    let e = store.get(&key, None).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::TooLarge, "{e}");
    assert!(e.to_string().contains("65536-byte cap"), "{e}");
    let version = e.version().expect("the version from the answer's headers");
    assert_eq!(version.etag, written.etag);
    // The version read from the headers is enough to replace it.
    store
        .put(
            &key,
            b"small",
            &PutOptions::new(PutMode::Update(version.clone())),
        )
        .unwrap();
    assert_eq!(store.get(&key, None).unwrap().body, b"small");
    store
        .delete(&key, &DeleteMode::Unconditional, None)
        .unwrap();
}

#[test]
fn head_reads_the_version_and_metadata_of_an_object_of_any_size() {
    let Some(store) = common::store(Server::Moto) else {
        return;
    };
    let key = format!("{}/big", common::unique_prefix("head"));
    let body = vec![b'x'; 100 * 1024];
    let options = PutOptions::new(PutMode::Overwrite).with_metadata("bucket-lease-epoch", "7");
    let written = store.put(&key, &body, &options).unwrap();
    let object = store.head(&key, None).unwrap();
    assert_eq!(object.version.etag, written.etag);
    assert!(object.body.is_empty());
    assert!(object
        .metadata
        .contains(&("bucket-lease-epoch".to_string(), "7".to_string())));
    let missing = store.head(&format!("{key}-absent"), None).unwrap_err();
    assert_eq!(missing.kind(), StoreErrorKind::NotFound, "{missing}");
    store
        .delete(&key, &DeleteMode::Unconditional, None)
        .unwrap();
}

#[test]
// The pushes are each behind a profile's feature.
#[allow(clippy::vec_init_then_push)]
fn a_url_and_an_injected_environment_open_a_working_store() {
    let Some(url) = common::server(Server::Moto) else {
        return;
    };
    let env = |name: &str| match name {
        "AWS_ENDPOINT_URL" => Some(url.clone()),
        "AWS_ACCESS_KEY_ID" => Some("test-key".into()),
        "AWS_SECRET_ACCESS_KEY" => Some("test-secret".into()),
        "AWS_SESSION_TOKEN" => Some("session-token".into()),
        "AWS_REGION" => Some("us-east-1".into()),
        "R2_ACCOUNT_ID" => Some("unused-when-an-endpoint-is-set".into()),
        _ => None,
    };
    let bucket = common::bucket();
    let mut schemes = Vec::new();
    #[cfg(feature = "s3")]
    schemes.push("s3");
    #[cfg(feature = "r2")]
    schemes.push("r2");
    #[cfg(feature = "minio")]
    schemes.push("minio");
    for scheme in schemes {
        let prefix = common::unique_prefix(scheme);
        let (store, got_prefix) =
            config::open_with_env(&format!("{scheme}://{bucket}/{prefix}/"), env).unwrap();
        assert_eq!(got_prefix, prefix);
        let key = format!("{got_prefix}/LEASE");
        store
            .put(&key, b"via url", &PutOptions::new(PutMode::Create))
            .unwrap();
        assert_eq!(store.get(&key, None).unwrap().body, b"via url");
        store
            .delete(&key, &DeleteMode::Unconditional, None)
            .unwrap();
    }
}

/// A prefix with `?`, `#` and `@`, percent-encoded in the store URL, is
/// decoded once: the object lands at the decoded key (listed by moto
/// without our client), and nanio, which checks signatures, accepts the
/// requests for it. (An `s3://` URL: built with the `s3` feature.)
#[cfg(feature = "s3")]
#[test]
fn a_percent_encoded_prefix_lands_at_the_decoded_key() {
    use std::io::{Read, Write};
    let Some(url) = common::server(Server::Moto) else {
        return;
    };
    let bucket = common::bucket();
    let unique = common::unique_prefix("encoded");
    let env = |name: &str| match name {
        "AWS_ACCESS_KEY_ID" => Some("test-key".to_string()),
        "AWS_SECRET_ACCESS_KEY" => Some("test-secret".to_string()),
        "AWS_REGION" => Some("us-east-1".to_string()),
        "AWS_EC2_METADATA_DISABLED" => Some("true".to_string()),
        "HOME" => Some("/nonexistent-bucket-lease-home".to_string()),
        "AWS_ENDPOINT_URL" => Some(url.clone()),
        _ => None,
    };
    // moto (through waitress) cuts a key at a `?` whoever sends it
    // (botocore too): the `?` is checked on nanio below.
    let (store, prefix) =
        config::open_with_env(&format!("s3://{bucket}/{unique}/h%23a%40b%25%20c"), env).unwrap();
    assert_eq!(prefix, format!("{unique}/h#a@b% c"));
    let key = format!("{prefix}/LEASE");
    store
        .put(&key, b"here", &PutOptions::new(PutMode::Create))
        .unwrap();
    assert_eq!(store.get(&key, None).unwrap().body, b"here");

    // moto's own listing of the prefix, asked without our client.
    let addr = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET /{bucket}?list-type=2&prefix={unique}/ HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut listing = String::new();
    stream.read_to_string(&mut listing).unwrap();
    assert!(
        listing.contains(&format!("<Key>{unique}/h#a@b% c/LEASE</Key>")),
        "{listing}"
    );
    store
        .delete(&key, &DeleteMode::Unconditional, None)
        .unwrap();

    // nanio checks the signature of the encoded path, and keeps each
    // object as a file named by its key.
    if let Some(nanio) = common::store(Server::Nanio) {
        let unique = common::unique_prefix("encoded");
        let key = format!("{unique}/q?h#a@b% c+é/LEASE");
        nanio
            .put(&key, b"signed", &PutOptions::new(PutMode::Create))
            .unwrap();
        assert_eq!(nanio.get(&key, None).unwrap().body, b"signed");
        let cut = format!("{unique}/q");
        assert_eq!(
            nanio.get(&cut, None).unwrap_err().kind(),
            StoreErrorKind::NotFound
        );
        if let Ok(data) = std::env::var("BUCKET_LEASE_TEST_NANIO_DATA") {
            let file = std::path::Path::new(&data).join(&bucket).join(&key);
            assert_eq!(
                std::fs::read(&file).unwrap(),
                b"signed",
                "{}",
                file.display()
            );
        }
        nanio
            .delete(&key, &DeleteMode::Unconditional, None)
            .unwrap();
    }
}
