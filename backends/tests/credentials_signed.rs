//! A server that checks signatures sees the refreshed keys: a lease held
//! for several refresh periods, with container credentials that expire
//! every few seconds, keeps renewing; once the credentials can no longer
//! be refreshed and have expired, the renewal fails naming the source and
//! the lease is fenced at its write deadline.
//!
//! The server is scripted here: an S3 stand-in over the core's
//! `MemoryStore` that recomputes each request's SigV4 signature (with
//! aws-sigv4) from the secret it issued for the request's access key, and
//! refuses unknown keys (`InvalidAccessKeyId`), wrong signatures or tokens
//! (`SignatureDoesNotMatch`) and keys past their expiry (`ExpiredToken`).
#![cfg(any(feature = "s3", feature = "r2", feature = "minio"))]

mod common;

use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use bucket_lease_backends::credentials::{chain_with_env, Source};
use bucket_lease_backends::{Addressing, HttpStore};
use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::{
    store::DeleteMode, store::PutMode, store::PutOptions, store::StoreErrorKind, store::Version,
    Lease, LeaseOptions, Store,
};
use common::canned::{Canned, Reply, Seen};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

const SECRET_MARK: &str = "sekrit";
const BUCKET: &str = "signed";

/// A secret, a session token and an expiry, by access key id.
type Issued = Arc<Mutex<HashMap<String, (String, String, SystemTime)>>>;

/// `x-amz-date` (`20261130T080000Z`) as a `SystemTime`.
fn amz_date(text: &str) -> Option<SystemTime> {
    let n = |range: std::ops::Range<usize>| text.get(range)?.parse::<u32>().ok();
    let date = time::Date::from_calendar_date(
        n(0..4)? as i32,
        time::Month::try_from(n(4..6)? as u8).ok()?,
        n(6..8)? as u8,
    )
    .ok()?;
    let at = time::Time::from_hms(n(9..11)? as u8, n(11..13)? as u8, n(13..15)? as u8).ok()?;
    Some(SystemTime::from(
        time::PrimitiveDateTime::new(date, at).assume_utc(),
    ))
}

/// The signature `seen` should carry if signed with `secret` and `token`.
fn expected_signature(seen: &Seen, key: &str, secret: &str, token: &str) -> Option<String> {
    let auth = seen.header("authorization")?;
    let signed: Vec<&str> = auth
        .split("SignedHeaders=")
        .nth(1)?
        .split(',')
        .next()?
        .split(';')
        .collect();
    let time = amz_date(seen.header("x-amz-date")?)?;
    let identity = aws_credential_types::Credentials::new(
        key,
        secret,
        Some(token.to_string()),
        None,
        "checking-server",
    )
    .into();
    let mut settings = SigningSettings::default();
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("s3")
        .time(time)
        .settings(settings)
        .build()
        .ok()?
        .into();
    // The signer adds these itself (from the URI, the time, the body and
    // the token).
    let added = [
        "host",
        "x-amz-date",
        "x-amz-content-sha256",
        "x-amz-security-token",
    ];
    let headers = seen
        .headers
        .iter()
        .filter(|(n, _)| signed.contains(&n.as_str()) && !added.contains(&n.as_str()))
        .map(|(n, v)| (n.as_str(), v.as_str()));
    let uri = format!("http://{}{}", seen.header("host")?, seen.path);
    let request =
        SignableRequest::new(&seen.method, uri, headers, SignableBody::Bytes(&seen.body)).ok()?;
    Some(sign(request, &params).ok()?.into_parts().1)
}

fn s3_error(status: u16, code: &str) -> Reply {
    Reply::error(status, code, code, "checking-server")
}

/// The S3 stand-in: checks the signature, then answers from `store`.
fn checking_server(issued: Issued, seen_keys: Arc<Mutex<Vec<String>>>) -> Canned {
    let store = MemoryStore::new();
    Canned::answering(move |seen: &Seen| {
        let auth = seen.header("authorization").unwrap_or_default();
        let Some(key) = auth
            .split("Credential=")
            .nth(1)
            .and_then(|c| c.split('/').next())
        else {
            return s3_error(403, "AccessDenied");
        };
        let Some((secret, token, expires)) = issued.lock().unwrap().get(key).cloned() else {
            return s3_error(403, "InvalidAccessKeyId");
        };
        let signature = auth.split("Signature=").nth(1).unwrap_or_default();
        if seen.header("x-amz-security-token") != Some(token.as_str())
            || expected_signature(seen, key, &secret, &token).as_deref() != Some(signature)
        {
            return s3_error(403, "SignatureDoesNotMatch");
        }
        if SystemTime::now() >= expires {
            return s3_error(403, "ExpiredToken");
        }
        seen_keys.lock().unwrap().push(key.to_string());
        let Some(object) = seen.path.strip_prefix(&format!("/{BUCKET}/")) else {
            return s3_error(404, "NoSuchBucket");
        };
        let with_version = |reply: Reply, v: &Version| match &v.etag {
            Some(etag) => reply.header("etag", etag),
            None => reply,
        };
        let refused = |kind: StoreErrorKind| match kind {
            StoreErrorKind::NotFound => s3_error(404, "NoSuchKey"),
            StoreErrorKind::AlreadyExists | StoreErrorKind::Precondition => {
                s3_error(412, "PreconditionFailed")
            }
            _ => s3_error(500, "InternalError"),
        };
        match seen.method.as_str() {
            "GET" | "HEAD" => match store.get(object, None) {
                Ok(found) => {
                    let reply = Reply::status(200);
                    let reply = if seen.method == "GET" {
                        reply.body(found.body)
                    } else {
                        reply
                    };
                    with_version(reply, &found.version)
                }
                Err(e) => refused(e.kind()),
            },
            "PUT" => {
                let mode = match (seen.header("if-none-match"), seen.header("if-match")) {
                    (Some("*"), _) => PutMode::Create,
                    (_, Some(etag)) => PutMode::Update(Version {
                        etag: Some(etag.to_string()),
                        version_id: None,
                    }),
                    _ => PutMode::Overwrite,
                };
                let mut options = PutOptions::new(mode);
                for (name, value) in &seen.headers {
                    if let Some(meta) = name.strip_prefix("x-amz-meta-") {
                        options = options.with_metadata(meta, value.clone());
                    }
                }
                match store.put(object, &seen.body, &options) {
                    Ok(version) => with_version(Reply::status(200), &version),
                    Err(e) => refused(e.kind()),
                }
            }
            "DELETE" => {
                let mode = match seen.header("if-match") {
                    Some(etag) => DeleteMode::IfVersion(Version {
                        etag: Some(etag.to_string()),
                        version_id: None,
                    }),
                    None => DeleteMode::Unconditional,
                };
                match store.delete(object, &mode, None) {
                    Ok(()) => Reply::status(204),
                    Err(e) => refused(e.kind()),
                }
            }
            _ => s3_error(405, "MethodNotAllowed"),
        }
    })
}

/// A container credentials endpoint issuing `AKIDSIG<n>` for `lifetime`
/// and registering them with the checking server; answers 500 once
/// `broken` is set.
fn issuer(issued: Issued, lifetime: Duration, broken: Arc<AtomicBool>) -> Canned {
    let n = AtomicU32::new(0);
    Canned::answering(move |_seen: &Seen| {
        if broken.load(Ordering::SeqCst) {
            return Reply::status(500);
        }
        let n = n.fetch_add(1, Ordering::SeqCst) + 1;
        let (key, secret, token) = (
            format!("AKIDSIG{n}"),
            format!("{SECRET_MARK}-key-{n}"),
            format!("{SECRET_MARK}-token-{n}"),
        );
        let expires = SystemTime::now() + lifetime;
        issued
            .lock()
            .unwrap()
            .insert(key.clone(), (secret.clone(), token.clone(), expires));
        let expiration = time::OffsetDateTime::from(expires)
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap();
        Reply::status(200).body(format!(
            r#"{{"AccessKeyId": "{key}", "SecretAccessKey": "{secret}", "Token": "{token}", "Expiration": "{expiration}"}}"#
        ))
    })
}

#[test]
fn a_lease_outlives_many_credential_refreshes_and_is_fenced_once_they_cannot_be_refreshed() {
    let issued: Issued = Arc::default();
    let seen_keys = Arc::new(Mutex::new(Vec::new()));
    let server = checking_server(issued.clone(), seen_keys.clone());
    let broken = Arc::new(AtomicBool::new(false));
    let credentials = issuer(issued.clone(), Duration::from_secs(3), broken.clone());
    let provider = chain_with_env(&|name: &str| match name {
        "AWS_CONTAINER_CREDENTIALS_FULL_URI" => Some(format!("{}/creds", credentials.url())),
        "AWS_EC2_METADATA_DISABLED" => Some("true".into()),
        _ => None,
    })
    .unwrap()
    .refresh_window(Duration::from_secs(2));
    let store = Arc::new(
        HttpStore::builder(common::any_profile())
            .endpoint(server.url())
            .bucket(BUCKET)
            .region("us-east-1")
            .addressing(Addressing::Path)
            .conditional_delete(true)
            .credentials_provider(provider)
            .build()
            .unwrap(),
    );
    assert_eq!(store.credentials_source(), &Source::Container);

    // Credentials fixed at the first key would be refused after 3 s; the
    // lease renews for 7 s, every 300 ms.
    let lease = Lease::acquire(store.clone(), "job", LeaseOptions::new(6)).unwrap();
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(7) {
        std::thread::sleep(Duration::from_millis(300));
        lease.renew().unwrap();
        assert!(
            lease.may_write(),
            "{:?} after {:?}",
            lease.status(),
            started.elapsed()
        );
    }
    let keys: BTreeSet<String> = seen_keys.lock().unwrap().iter().cloned().collect();
    assert!(keys.len() >= 5, "the server saw only {keys:?}");

    // From now on no credentials can be had: once the current ones expire,
    // the renewal fails naming the source, and the lease is fenced.
    broken.store(true, Ordering::SeqCst);
    // A refresh the issuer answered before it broke may land after this
    // read, with credentials good for 3 s more: wait out whichever are
    // current until none newer arrive.
    loop {
        let expires = store.credentials_expire().unwrap();
        std::thread::sleep(
            expires
                .duration_since(SystemTime::now())
                .unwrap_or_default()
                + Duration::from_millis(100),
        );
        if store.credentials_expire().unwrap() <= expires {
            break;
        }
    }
    let e = lease.renew().unwrap_err().to_string();
    assert!(
        e.contains("container credentials") && e.contains("expired"),
        "{e}"
    );
    assert!(!e.contains(SECRET_MARK), "{e}");
    // The write deadline (4 s after the last renewal) is still ahead.
    let fence = lease.write_deadline().expect("a write deadline");
    std::thread::sleep(fence.saturating_duration_since(std::time::Instant::now()));
    assert!(
        !lease.may_write(),
        "still writable after the write deadline"
    );
}

#[test]
fn the_checking_server_refuses_wrong_and_expired_credentials() {
    let issued: Issued = Arc::default();
    issued.lock().unwrap().insert(
        "AKIDKNOWN".into(),
        (
            "right".into(),
            "tok".into(),
            SystemTime::now() + Duration::from_secs(3600),
        ),
    );
    issued.lock().unwrap().insert(
        "AKIDOLD".into(),
        ("old".into(), "tok".into(), SystemTime::now()),
    );
    let server = checking_server(issued, Arc::default());
    let store = |key: &str, secret: &str| {
        HttpStore::builder(common::any_profile())
            .endpoint(server.url())
            .bucket(BUCKET)
            .region("us-east-1")
            .addressing(Addressing::Path)
            .credentials(
                bucket_lease_backends::Credentials::new(key, secret).with_session_token("tok"),
            )
            .build()
            .unwrap()
    };
    let put = |s: &HttpStore| s.put("k", b"x", &PutOptions::new(PutMode::Overwrite));
    assert!(put(&store("AKIDKNOWN", "right")).is_ok());
    for (key, secret, code) in [
        ("AKIDKNOWN", "wrong", "SignatureDoesNotMatch"),
        ("AKIDNOPE", "right", "InvalidAccessKeyId"),
        ("AKIDOLD", "old", "ExpiredToken"),
    ] {
        let e = put(&store(key, secret)).unwrap_err();
        assert_eq!(e.code(), Some(code), "{e}");
    }
}
