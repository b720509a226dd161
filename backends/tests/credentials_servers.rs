//! The credentials chain against scripted loopback servers: EC2 instance
//! metadata (IMDSv2) and container credentials, their refresh before
//! `Expiration`, one failed refresh survived, the source order, and the
//! one retry after a `403 ExpiredToken`.
#![cfg(any(feature = "s3", feature = "r2", feature = "minio"))]

mod common;

use bucket_lease_backends::credentials::{
    chain_with_env, CredentialsError, CredentialsProvider, Source,
};
use bucket_lease_backends::{Addressing, HttpStore};
use bucket_lease_core::store::{PutMode, PutOptions, Store};
use common::canned::{Canned, Reply, Seen};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Every secret handed out holds this.
const SECRET_MARK: &str = "sekrit";

fn assert_no_secret(text: &str) {
    assert!(!text.contains(SECRET_MARK), "a secret is shown: {text}");
}

/// `now + seconds` in RFC 3339.
fn expiration_in(seconds: u64) -> String {
    let at = time::OffsetDateTime::now_utc() + Duration::from_secs(seconds);
    at.format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

fn env(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    move |name| map.get(name).cloned()
}

fn temp_dir(name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "bucket-lease-creds-it-{name}-{}-{}-{:?}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The JSON of one set of temporary credentials numbered `n`.
fn credentials_json(prefix: &str, n: u32, lifetime_s: u64) -> String {
    format!(
        r#"{{"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": "{prefix}{n}",
            "SecretAccessKey": "{SECRET_MARK}-key-{n}", "Token": "{SECRET_MARK}-token-{n}",
            "Expiration": "{}"}}"#,
        expiration_in(lifetime_s)
    )
}

/// A scripted IMDSv2: tokens from `PUT /latest/api/token` (which must ask
/// for a TTL), role `lease-role`, credentials `AKIDIMDS<n>` living
/// `lifetime_s`; GETs without a token it issued are refused with 401;
/// the credential fetches numbered in `failing` answer 500.
struct Imds {
    server: Canned,
    fetches: Arc<AtomicU32>,
}

fn imds(lifetime_s: u64, failing: &'static [u32]) -> Imds {
    let tokens = Arc::new(Mutex::new(Vec::<String>::new()));
    let fetches = Arc::new(AtomicU32::new(0));
    let f = fetches.clone();
    let server = Canned::answering(move |seen: &Seen| {
        if seen.method == "PUT" && seen.path == "/latest/api/token" {
            if seen
                .header("x-aws-ec2-metadata-token-ttl-seconds")
                .is_none()
            {
                return Reply::status(400);
            }
            let mut tokens = tokens.lock().unwrap();
            let token = format!("{SECRET_MARK}-imds-token-{}", tokens.len());
            tokens.push(token.clone());
            return Reply::status(200).body(token);
        }
        let token_ok = seen
            .header("x-aws-ec2-metadata-token")
            .is_some_and(|t| tokens.lock().unwrap().iter().any(|k| k == t));
        if seen.method != "GET" || !token_ok {
            return Reply::status(401);
        }
        match seen.path.as_str() {
            "/latest/meta-data/iam/security-credentials/" => Reply::status(200).body("lease-role"),
            "/latest/meta-data/iam/security-credentials/lease-role" => {
                let n = f.fetch_add(1, Ordering::SeqCst) + 1;
                if failing.contains(&n) {
                    return Reply::status(500);
                }
                Reply::status(200).body(credentials_json("AKIDIMDS", n, lifetime_s))
            }
            _ => Reply::status(404),
        }
    });
    Imds { server, fetches }
}

/// A scripted container credentials endpoint at `/creds`, checking the
/// `Authorization` header against `expected` (read at each request), with
/// credentials `AKIDCTR<n>` living `lifetime_s`; fetches in `failing`
/// answer 500.
struct Container {
    server: Canned,
    fetches: Arc<AtomicU32>,
    expected: Arc<Mutex<String>>,
}

fn container(lifetime_s: u64, failing: &'static [u32], expected: &str) -> Container {
    let fetches = Arc::new(AtomicU32::new(0));
    let expected = Arc::new(Mutex::new(expected.to_string()));
    let (f, e) = (fetches.clone(), expected.clone());
    let server = Canned::answering(move |seen: &Seen| {
        if seen.path != "/creds" {
            return Reply::status(404);
        }
        if seen.header("authorization") != Some(e.lock().unwrap().as_str()) {
            return Reply::status(401);
        }
        let n = f.fetch_add(1, Ordering::SeqCst) + 1;
        if failing.contains(&n) {
            return Reply::status(500);
        }
        Reply::status(200).body(credentials_json("AKIDCTR", n, lifetime_s))
    });
    Container {
        server,
        fetches,
        expected,
    }
}

fn key_id(provider: &CredentialsProvider) -> String {
    provider
        .credentials(None)
        .unwrap()
        .access_key_id()
        .to_string()
}

/// Poll `done` every 20 ms until it holds; panics naming `what` once
/// `by` has passed.
fn until(what: &str, by: SystemTime, mut done: impl FnMut() -> bool) {
    while !done() {
        assert!(SystemTime::now() < by, "{what}: not by {by:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until the provider's credentials are within `window` of expiring.
fn wait_for_window(provider: &CredentialsProvider, window: Duration) -> SystemTime {
    let expires = provider.expires().expect("temporary credentials");
    while SystemTime::now() + window < expires {
        std::thread::sleep(Duration::from_millis(50));
    }
    expires
}

#[test]
fn imds_v2_is_found_with_its_token_and_refreshed_before_expiration() {
    let server = imds(4, &[]);
    let provider = chain_with_env(&env(&[(
        "AWS_EC2_METADATA_SERVICE_ENDPOINT",
        server.server.url(),
    )]))
    .unwrap()
    .refresh_window(Duration::from_secs(2));
    assert_eq!(provider.source(), &Source::InstanceMetadata);
    assert_eq!(key_id(&provider), "AKIDIMDS1");
    assert_eq!(key_id(&provider), "AKIDIMDS1", "fresh: not fetched again");
    // In the window, fetched again in the background before the expiry.
    let expires = wait_for_window(&provider, Duration::from_secs(2));
    until("the refresh before the expiry", expires, || {
        key_id(&provider) == "AKIDIMDS2"
    });
    assert!(provider.credentials(None).unwrap().has_session_token());
    // IMDSv2 only: every fetch starts with PUT, every GET carries a token.
    let seen = server.server.seen();
    assert_eq!(seen[0].method, "PUT");
    assert!(seen
        .iter()
        .filter(|s| s.method == "GET")
        .all(|s| s.header("x-aws-ec2-metadata-token").is_some()));
    assert!(seen.len() >= 6, "{seen:?}");
    assert_no_secret(&format!("{provider:?} {}", provider.source()));
}

#[test]
fn imds_survives_one_failed_refresh() {
    // The second credentials fetch fails; the third succeeds.
    let server = imds(4, &[2]);
    let provider = chain_with_env(&env(&[(
        "AWS_EC2_METADATA_SERVICE_ENDPOINT",
        server.server.url(),
    )]))
    .unwrap()
    .refresh_window(Duration::from_secs(3));
    assert_eq!(key_id(&provider), "AKIDIMDS1");
    let expires = wait_for_window(&provider, Duration::from_secs(3));
    // The background refresh fails: the still-valid credentials stay in
    // use.
    until("the failed refresh", expires, || {
        server.fetches.load(Ordering::SeqCst) >= 2
    });
    assert_eq!(key_id(&provider), "AKIDIMDS1");
    // It is tried again after a pause, and callers get new ones before
    // the expiry.
    until("the retried refresh", expires, || {
        key_id(&provider) == "AKIDIMDS3"
    });
}

#[test]
fn imds_turned_off_or_absent_is_no_source_and_fails_fast() {
    let e = chain_with_env(&env(&[("AWS_EC2_METADATA_DISABLED", "true".into())])).unwrap_err();
    assert!(matches!(e, CredentialsError::NotFound { .. }), "{e}");
    assert!(
        e.to_string().contains("AWS_EC2_METADATA_DISABLED is true"),
        "{e}"
    );
    // A closed port: refused at once, named in the "none found" error.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let started = Instant::now();
    let e = chain_with_env(&env(&[("AWS_EC2_METADATA_SERVICE_ENDPOINT", url)])).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    let shown = e.to_string();
    assert!(
        matches!(e, CredentialsError::NotFound { .. }) && shown.contains("EC2 instance metadata"),
        "{shown}"
    );
    // A server that refuses tokens (IMDSv1 only) is not used.
    let v1 = Canned::answering(|seen: &Seen| {
        if seen.method == "PUT" {
            Reply::status(403)
        } else {
            Reply::status(200).body("lease-role")
        }
    });
    let e = chain_with_env(&env(&[("AWS_EC2_METADATA_SERVICE_ENDPOINT", v1.url())])).unwrap_err();
    assert!(e.to_string().contains("IMDSv2 is required"), "{e}");
    assert!(v1.seen().iter().all(|s| s.method == "PUT"));
}

#[test]
fn container_credentials_send_the_token_and_refresh_before_expiration() {
    let token = format!("{SECRET_MARK}-auth");
    let server = container(4, &[], &token);
    let provider = chain_with_env(&env(&[
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{}/creds", server.server.url()),
        ),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN", token.clone()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]))
    .unwrap()
    .refresh_window(Duration::from_secs(2));
    assert_eq!(provider.source(), &Source::Container);
    assert_eq!(key_id(&provider), "AKIDCTR1");
    let expires = wait_for_window(&provider, Duration::from_secs(2));
    until("the refresh before the expiry", expires, || {
        key_id(&provider) == "AKIDCTR2"
    });
    assert_no_secret(&format!("{provider:?} {}", provider.source()));
}

#[test]
fn container_token_file_is_read_again_at_each_refresh_and_one_failure_is_survived() {
    let dir = temp_dir("container-token");
    let file = dir.join("token");
    std::fs::write(&file, format!("{SECRET_MARK}-one\n")).unwrap();
    // The second fetch fails.
    let server = container(4, &[2], &format!("{SECRET_MARK}-one"));
    let vars = [
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{}/creds", server.server.url()),
        ),
        (
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            file.to_str().unwrap().to_string(),
        ),
        // The file wins over the variable.
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "wrong".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ];
    let provider = chain_with_env(&env(&vars))
        .unwrap()
        .refresh_window(Duration::from_secs(3));
    assert_eq!(key_id(&provider), "AKIDCTR1");
    // The token is rotated on disk and at the server.
    std::fs::write(&file, format!("{SECRET_MARK}-two")).unwrap();
    *server.expected.lock().unwrap() = format!("{SECRET_MARK}-two");
    let expires = wait_for_window(&provider, Duration::from_secs(3));
    until("the failed refresh", expires, || {
        server.fetches.load(Ordering::SeqCst) >= 2
    });
    assert_eq!(key_id(&provider), "AKIDCTR1", "failed refresh: kept");
    until("the retried refresh, with the new token", expires, || {
        key_id(&provider) == "AKIDCTR3"
    });
    assert_eq!(server.fetches.load(Ordering::SeqCst), 3);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn container_errors_never_show_the_token_and_plain_http_elsewhere_is_refused() {
    let token = format!("{SECRET_MARK}-auth");
    // The server refuses the token: the error names the source, not it.
    let server = container(60, &[], "another");
    let e = chain_with_env(&env(&[
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{}/creds", server.server.url()),
        ),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN", token.clone()),
    ]))
    .unwrap_err();
    let shown = format!("{e} {e:?}");
    assert!(
        shown.contains("container credentials") && shown.contains("401"),
        "{shown}"
    );
    assert_no_secret(&shown);
    // A missing token file.
    let e = chain_with_env(&env(&[
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{}/creds", server.server.url()),
        ),
        (
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            "/nonexistent/t".into(),
        ),
    ]))
    .unwrap_err();
    assert!(e.to_string().contains("/nonexistent/t"), "{e}");
    // Plain HTTP to a host that is neither loopback nor a documented one.
    for uri in [
        "http://10.1.2.3/creds",
        "http://example.com/creds",
        "ftp://127.0.0.1/x",
    ] {
        let e = chain_with_env(&env(&[
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", uri.into()),
            ("AWS_CONTAINER_AUTHORIZATION_TOKEN", token.clone()),
        ]))
        .unwrap_err();
        let shown = format!("{e} {e:?}");
        assert!(shown.contains("is not allowed"), "{shown}");
        assert_no_secret(&shown);
    }
    // No request reached the server but the refused one.
    assert_eq!(server.server.seen().len(), 1);
}

/// What a pair test sets, and which source and key id it must find.
type Case = (
    &'static str,
    Vec<(&'static str, String)>,
    Source,
    &'static str,
);

/// The source order, pair by pair, among the sources served here and the
/// environment and a profile: the first configured wins and the later
/// one is not asked.
#[test]
fn each_pair_of_configured_sources_resolves_to_the_earlier_one() {
    let imds = imds(3600, &[]);
    let container = container(3600, &[], "auth");
    let home = temp_dir("pairs");
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(
        home.join(".aws/credentials"),
        format!("[default]\naws_access_key_id = AKIDFILE\naws_secret_access_key = {SECRET_MARK}\n"),
    )
    .unwrap();
    let environment = [
        ("AWS_ACCESS_KEY_ID", "AKIDENV".to_string()),
        ("AWS_SECRET_ACCESS_KEY", SECRET_MARK.to_string()),
    ];
    let profile = [("HOME", home.to_str().unwrap().to_string())];
    let container_vars = [
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{}/creds", container.server.url()),
        ),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "auth".to_string()),
    ];
    let imds_vars = [("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.server.url())];
    let cases: [Case; 6] = [
        (
            "environment over profile",
            [&environment[..], &profile[..]].concat(),
            Source::Environment,
            "AKIDENV",
        ),
        (
            "environment over container",
            [&environment[..], &container_vars[..]].concat(),
            Source::Environment,
            "AKIDENV",
        ),
        (
            "environment over instance metadata",
            [&environment[..], &imds_vars[..]].concat(),
            Source::Environment,
            "AKIDENV",
        ),
        (
            "profile over container",
            [&profile[..], &container_vars[..]].concat(),
            Source::Profile {
                name: "default".into(),
            },
            "AKIDFILE",
        ),
        (
            "profile over instance metadata",
            [&profile[..], &imds_vars[..]].concat(),
            Source::Profile {
                name: "default".into(),
            },
            "AKIDFILE",
        ),
        (
            "container over instance metadata",
            [&container_vars[..], &imds_vars[..]].concat(),
            Source::Container,
            "AKIDCTR1",
        ),
    ];
    for (what, vars, source, key) in cases {
        let provider = chain_with_env(&env(&vars)).unwrap();
        assert_eq!(provider.source(), &source, "{what}");
        assert_eq!(key_id(&provider), key, "{what}");
    }
    assert!(imds.server.seen().is_empty(), "instance metadata was asked");
    assert_eq!(container.fetches.load(Ordering::SeqCst), 1);
    let _ = std::fs::remove_dir_all(home);
}

/// A store whose service says `ExpiredToken` before the credentials' own
/// expiry: one refresh, one retry with the new key, within the deadline.
#[test]
fn an_expired_token_answer_is_refreshed_and_retried_once() {
    let credentials = container(3600, &[], "auth");
    let service = Canned::answering(|seen: &Seen| {
        let auth = seen.header("authorization").unwrap_or_default();
        if auth.contains("Credential=AKIDCTR1/") {
            Reply::error(403, "ExpiredToken", "The provided token has expired.", "r1")
        } else {
            Reply::status(200).header("etag", "\"e2\"")
        }
    });
    let provider = chain_with_env(&env(&[
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{}/creds", credentials.server.url()),
        ),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "auth".into()),
    ]))
    .unwrap();
    let store = HttpStore::builder(common::any_profile())
        .endpoint(service.url())
        .bucket("b")
        .region("us-east-1")
        .addressing(Addressing::Path)
        .credentials_provider(provider)
        .build()
        .unwrap();
    assert_eq!(store.credentials_source(), &Source::Container);
    let options = PutOptions::new(PutMode::Overwrite)
        .with_deadline(Some(Instant::now() + Duration::from_secs(10)));
    let version = store.put("k", b"x", &options).unwrap();
    assert_eq!(version.etag.as_deref(), Some("\"e2\""));
    let seen = service.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen[1]
        .header("authorization")
        .unwrap()
        .contains("Credential=AKIDCTR2/"));
    assert_eq!(
        seen[1].header("x-amz-security-token"),
        Some("sekrit-token-2")
    );
    assert_eq!(credentials.fetches.load(Ordering::SeqCst), 2);

    // Fixed credentials cannot be refreshed: the 403 is the answer.
    let fixed = HttpStore::builder(common::any_profile())
        .endpoint(service.url())
        .bucket("b")
        .region("us-east-1")
        .addressing(Addressing::Path)
        .credentials(bucket_lease_backends::Credentials::new(
            "AKIDCTR1",
            SECRET_MARK,
        ))
        .build()
        .unwrap();
    let e = fixed.put("k", b"x", &options).unwrap_err();
    assert_eq!(e.code(), Some("ExpiredToken"));
    assert_no_secret(&format!("{e} {e:?} {store:?} {fixed:?}"));
}
