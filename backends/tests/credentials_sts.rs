//! Web identity: STS `AssumeRoleWithWebIdentity` on moto (from
//! `scripts/test-servers.sh`), then a lease acquired and renewed on moto
//! with the credentials it returned, refreshed between renewals; and a
//! scripted STS for what moto does not check (the token re-read at each
//! refresh, errors, the source order).
#![cfg(any(feature = "s3", feature = "r2", feature = "minio"))]

mod common;

use bucket_lease_backends::credentials::{chain_with_env, CredentialsError, Source};
use bucket_lease_core::{Lease, LeaseOptions};
use common::canned::{Canned, Reply, Seen};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

const SECRET_MARK: &str = "sekrit";
const ROLE: &str = "arn:aws:iam::123456789012:role/lease-holder";

fn assert_no_secret(text: &str) {
    assert!(!text.contains(SECRET_MARK), "a secret is shown: {text}");
}

fn env(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> {
    let mut map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    map.entry("AWS_EC2_METADATA_DISABLED".into())
        .or_insert_with(|| "true".into());
    move |name| map.get(name).cloned()
}

fn token_file(name: &str, token: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "bucket-lease-sts-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, token).unwrap();
    file
}

fn web_identity_env(file: &std::path::Path, sts: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_WEB_IDENTITY_TOKEN_FILE", file.to_str().unwrap().into()),
        ("AWS_ROLE_ARN", ROLE.into()),
        ("AWS_ROLE_SESSION_NAME", "lease-test".into()),
        ("AWS_ENDPOINT_URL_STS", sts.into()),
    ]
}

#[test]
fn web_identity_on_moto_sts_then_a_lease_renewed_across_refreshes() {
    let Some(moto) = common::server(common::Server::Moto) else {
        return;
    };
    let file = token_file("moto", &format!("{SECRET_MARK}.jwt.token"));
    let provider = chain_with_env(&env(&web_identity_env(&file, &moto))).unwrap();
    assert_eq!(
        provider.source(),
        &Source::WebIdentity {
            role_arn: ROLE.into()
        }
    );
    let credentials = provider.credentials(None).unwrap();
    assert!(
        credentials.access_key_id().starts_with("ASIA"),
        "{credentials:?}"
    );
    assert!(credentials.has_session_token());
    let first_expiry = provider.expires().expect("STS credentials expire");
    // Scale the refresh window so the credentials are due 1 s from now.
    let lifetime = first_expiry.duration_since(SystemTime::now()).unwrap();
    let provider = provider.refresh_window(lifetime - Duration::from_secs(1));
    assert_no_secret(&format!("{provider:?} {}", provider.source()));

    let store = Arc::new(
        common::builder(common::Server::Moto)
            .unwrap()
            .credentials_provider(provider)
            .build()
            .unwrap(),
    );
    let prefix = common::unique_prefix("web-identity");
    let lease = Lease::acquire(store.clone(), &prefix, LeaseOptions::new(30)).unwrap();
    let mut expiries = vec![store.credentials_expire().unwrap()];
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(1100));
        lease.renew().unwrap();
        expiries.push(store.credentials_expire().unwrap());
    }
    // Each renewal after the credentials were due fetched new ones.
    assert!(
        expiries.windows(2).all(|w| w[1] > w[0]),
        "not refreshed: {expiries:?}"
    );
    assert_eq!(
        store.credentials_source(),
        &Source::WebIdentity {
            role_arn: ROLE.into()
        }
    );
    lease.release_before(None).unwrap();
    let _ = std::fs::remove_file(&file);
}

/// A scripted STS: checks the form, answers credentials `ASIASTUB<n>`
/// living `lifetime_s`, or an `InvalidIdentityToken` error echoing the
/// token when it is not `expected`.
fn scripted_sts(
    lifetime_s: u64,
    expected: Arc<Mutex<String>>,
) -> (Canned, Arc<Mutex<Vec<String>>>) {
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let t = tokens.clone();
    let n = AtomicU32::new(0);
    let server = Canned::answering(move |seen: &Seen| {
        let form: HashMap<String, String> = String::from_utf8_lossy(&seen.body)
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.to_string(), percent_decode(v)))
            .collect();
        let token = form.get("WebIdentityToken").cloned().unwrap_or_default();
        t.lock().unwrap().push(token.clone());
        let good = seen.method == "POST"
            && seen.header("authorization").is_none()
            && form.get("Action").map(String::as_str) == Some("AssumeRoleWithWebIdentity")
            && form.get("RoleArn").map(String::as_str) == Some(ROLE)
            && form.get("RoleSessionName").map(String::as_str) == Some("lease-test");
        if !good {
            return Reply::status(400)
                .body("<ErrorResponse><Error><Code>BadForm</Code></Error></ErrorResponse>");
        }
        if token != *expected.lock().unwrap() {
            return Reply::status(400).body(format!(
                "<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>\
                 <Message>Token {token} is not valid</Message></Error></ErrorResponse>"
            ));
        }
        let n = n.fetch_add(1, Ordering::SeqCst) + 1;
        let expiration = (time::OffsetDateTime::now_utc() + Duration::from_secs(lifetime_s))
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap();
        Reply::status(200).body(format!(
            "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
             <AccessKeyId>ASIASTUB{n}</AccessKeyId><SecretAccessKey>{SECRET_MARK}-k{n}</SecretAccessKey>\
             <SessionToken>{SECRET_MARK}-t{n}</SessionToken><Expiration>{expiration}</Expiration>\
             </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"
        ))
    });
    (server, tokens)
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

#[test]
fn the_token_file_is_read_again_at_each_refresh() {
    let first = format!("{SECRET_MARK}/first+token=");
    let expected = Arc::new(Mutex::new(first.clone()));
    let (sts, tokens) = scripted_sts(4, expected.clone());
    let file = token_file("reread", &format!("{first}\n"));
    let provider = chain_with_env(&env(&web_identity_env(&file, &sts.url())))
        .unwrap()
        .refresh_window(Duration::from_secs(2));
    assert_eq!(
        provider.credentials(None).unwrap().access_key_id(),
        "ASIASTUB1"
    );
    let second = format!("{SECRET_MARK}-second");
    std::fs::write(&file, &second).unwrap();
    *expected.lock().unwrap() = second.clone();
    let expires = provider.expires().unwrap();
    while SystemTime::now() + Duration::from_secs(2) < expires {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Fetched again in the background, before the expiry.
    while provider.credentials(None).unwrap().access_key_id() != "ASIASTUB2" {
        assert!(
            SystemTime::now() < expires,
            "not refreshed before the expiry"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(*tokens.lock().unwrap(), vec![first, second]);
}

#[test]
fn sts_errors_name_the_source_and_never_show_the_token() {
    let (sts, _) = scripted_sts(3600, Arc::new(Mutex::new("another".into())));
    let file = token_file("refused", &format!("{SECRET_MARK}-token"));
    let e = chain_with_env(&env(&web_identity_env(&file, &sts.url()))).unwrap_err();
    let shown = format!("{e} {e:?}");
    assert!(
        shown.contains("web identity") && shown.contains("InvalidIdentityToken"),
        "{shown}"
    );
    assert_no_secret(&shown);
    // One variable without the other.
    let e = chain_with_env(&env(&[("AWS_ROLE_ARN", ROLE.into())])).unwrap_err();
    assert!(
        e.to_string()
            .contains("AWS_WEB_IDENTITY_TOKEN_FILE is not set"),
        "{e}"
    );
    let e = chain_with_env(&env(&[(
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        file.to_str().unwrap().into(),
    )]))
    .unwrap_err();
    assert!(e.to_string().contains("AWS_ROLE_ARN is not set"), "{e}");
    // A missing token file.
    let e = chain_with_env(&env(&web_identity_env(
        std::path::Path::new("/nonexistent/token"),
        &sts.url(),
    )))
    .unwrap_err();
    assert!(
        matches!(e, CredentialsError::Source { .. })
            && e.to_string().contains("/nonexistent/token"),
        "{e}"
    );
}

/// Web identity against each source before and after it: environment and
/// profile win over it; it wins over container credentials and instance
/// metadata, which are not asked.
#[test]
fn web_identity_pairs_with_each_other_source() {
    let token = format!("{SECRET_MARK}-pairs");
    let (sts, tokens) = scripted_sts(3600, Arc::new(Mutex::new(token.clone())));
    let file = token_file("pairs", &token);
    let web = web_identity_env(&file, &sts.url());
    let other = Canned::answering(|_| Reply::status(500));
    let home = file.parent().unwrap().join("home");
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(
        home.join(".aws/credentials"),
        format!("[default]\naws_access_key_id = AKIDFILE\naws_secret_access_key = {SECRET_MARK}\n"),
    )
    .unwrap();
    let with = |extra: &[(&'static str, String)]| {
        let mut vars = web.clone();
        vars.extend_from_slice(extra);
        chain_with_env(&env(&vars)).unwrap()
    };
    let p = with(&[
        ("AWS_ACCESS_KEY_ID", "AKIDENV".into()),
        ("AWS_SECRET_ACCESS_KEY", SECRET_MARK.into()),
    ]);
    assert_eq!(
        p.source(),
        &Source::Environment,
        "environment over web identity"
    );
    let p = with(&[("HOME", home.to_str().unwrap().into())]);
    assert_eq!(
        p.source(),
        &Source::Profile {
            name: "default".into()
        },
        "profile over web identity"
    );
    assert!(tokens.lock().unwrap().is_empty(), "STS was asked");
    let web_source = Source::WebIdentity {
        role_arn: ROLE.into(),
    };
    let p = with(&[
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("{}/creds", other.url()),
        ),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]);
    assert_eq!(p.source(), &web_source, "web identity over container");
    let mut vars = web.clone();
    vars.push(("AWS_EC2_METADATA_SERVICE_ENDPOINT", other.url()));
    vars.push(("AWS_EC2_METADATA_DISABLED", "false".into()));
    let p = chain_with_env(&env(&vars)).unwrap();
    assert_eq!(
        p.source(),
        &web_source,
        "web identity over instance metadata"
    );
    assert!(other.seen().is_empty(), "a later source was asked");
}
