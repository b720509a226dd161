//! TLS and proxies as the AWS CLI does them, on loopback doubles
//! (`loopback/`): a CA this run makes, an HTTPS server with a certificate
//! it signs, and a forwarding proxy that notes what it was asked.
//!
//! - The roots: the built-in ones, and beside them a PEM bundle from
//!   `AWS_CA_BUNDLE` or the profile's `ca_bundle` (the variable wins), and
//!   the system's store with `BUCKET_LEASE_SYSTEM_TRUST=on`. A bundle that
//!   cannot be used fails the configuration, before any request.
//! - A certificate failure is permanent: one handshake, no retry, and a
//!   message naming the problem and the setting that fixes it.
//! - Proxies by the endpoint's scheme: `http://` endpoints through
//!   `HTTP_PROXY` in absolute form, `https://` endpoints through
//!   `HTTPS_PROXY` with CONNECT, neither for a `NO_PROXY` host; proxy
//!   credentials go in `Proxy-Authorization` and are never shown.
#![cfg(feature = "s3")]

mod common;
mod loopback;

use bucket_lease_backends::config::{self, ConfigError, StoreUrl};
use bucket_lease_core::conformance::{self, NoWire};
use bucket_lease_core::store::{Store, StoreError, StoreErrorKind};
use bucket_lease_core::{Contender, LeaseOptions, Wait};
use common::canned::{Canned, Reply};
use common::Server;
use loopback::ca::TestCa;
use loopback::proxy::Proxy;
use loopback::tls_server::TlsServer;
use loopback::TempDir;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The environment of a store on `s3://`: test credentials, a region, no
/// shared files and no home (so nothing of the developer's is read), and
/// `vars` over them.
fn env(vars: &[(&str, String)]) -> impl Fn(&str) -> Option<String> {
    let mut all: Vec<(String, String)> = vec![
        ("AWS_ACCESS_KEY_ID".into(), "test-key".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "test-secret".into()),
        ("AWS_REGION".into(), "us-east-1".into()),
        ("HOME".into(), "/nonexistent-bucket-lease-home".into()),
        (
            "AWS_CONFIG_FILE".into(),
            "/nonexistent-bucket-lease-home/config".into(),
        ),
        (
            "AWS_SHARED_CREDENTIALS_FILE".into(),
            "/nonexistent-bucket-lease-home/credentials".into(),
        ),
    ];
    for (name, value) in vars {
        all.retain(|(n, _)| n != name);
        all.push((name.to_string(), value.clone()));
    }
    move |name: &str| all.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
}

fn open(vars: &[(&str, String)]) -> Result<Arc<dyn Store>, ConfigError> {
    config::open_with_env("s3://bkt/tls-proxy", env(vars)).map(|(store, _)| store)
}

fn deadline() -> Option<Instant> {
    Some(Instant::now() + Duration::from_secs(10))
}

/// An HTTPS server with a certificate of `ca` for `localhost`.
fn tls_server(ca: &TestCa) -> TlsServer {
    TlsServer::start(ca.server(&["localhost", "127.0.0.1"]))
}

/// A GET that reached the server: its 404 NoSuchKey.
fn assert_reached(result: Result<bucket_lease_core::store::Object, StoreError>) {
    let e = result.expect_err("the server answers 404");
    assert_eq!(e.kind(), StoreErrorKind::NotFound, "{e}");
}

/// A certificate failure: not sent, permanent, not retried, and a message
/// with each of `parts`.
fn assert_certificate_failure(e: &StoreError, parts: &[&str]) {
    let text = e.to_string();
    assert!(!e.may_have_landed(), "{text}");
    assert!(e.is_permanent(), "{text}");
    assert!(!text.contains("safe to retry"), "{text}");
    for part in parts {
        assert!(text.contains(part), "{part:?} missing from: {text}");
    }
}

#[test]
fn an_unknown_ca_fails_once_without_a_retry_and_names_the_settings() {
    let ca = TestCa::new("bucket-lease test CA (unknown)");
    let server = tls_server(&ca);
    let store = open(&[("AWS_ENDPOINT_URL", server.url())]).unwrap();
    let e = store.get("k", deadline()).unwrap_err();
    assert_certificate_failure(
        &e,
        &[
            &format!("the TLS handshake with {}", server.authority()),
            "UnknownIssuer",
            "AWS_CA_BUNDLE",
            "ca_bundle in the profile",
            "BUCKET_LEASE_SYSTEM_TRUST=on",
        ],
    );
    assert_eq!((server.accepted(), server.handshakes()), (1, 0), "{e}");

    // A lease waiting for its turn gives up at once: the failure is
    // permanent, not a reason to try again until the wait ends.
    let started = Instant::now();
    let error = Contender::new(store, "tls-proxy", LeaseOptions::new(30))
        .acquire_with(&Wait::until(Instant::now() + Duration::from_secs(60)))
        .unwrap_err();
    assert!(error.is_permanent(), "{error}");
    assert_eq!(server.accepted(), 2, "{error}");
    assert!(started.elapsed() < Duration::from_secs(30), "{error}");
}

#[test]
fn aws_ca_bundle_adds_the_ca_beside_the_built_in_roots() {
    let ca = TestCa::new("bucket-lease test CA (env)");
    let server = tls_server(&ca);
    let dir = TempDir::new("ca-env");
    let bundle = dir.write("ca.pem", ca.pem());
    let store = open(&[
        ("AWS_ENDPOINT_URL", server.url()),
        ("AWS_CA_BUNDLE", bundle),
    ])
    .unwrap();
    assert_reached(store.get("k", deadline()));
    assert_eq!(server.handshakes(), 1);
}

#[test]
fn a_profile_ca_bundle_is_used_as_the_aws_cli_reads_it() {
    let ca = TestCa::new("bucket-lease test CA (profile)");
    let server = tls_server(&ca);
    let dir = TempDir::new("ca-profile");
    let bundle = dir.write("ca.pem", ca.pem());
    let config = dir.write(
        "config",
        &format!("[default]\nregion = us-east-1\n\n[profile other]\nca_bundle = {bundle}\n"),
    );
    let vars = [
        ("AWS_ENDPOINT_URL", server.url()),
        ("AWS_CONFIG_FILE", config),
        ("AWS_PROFILE", "other".to_string()),
    ];
    assert_reached(open(&vars).unwrap().get("k", deadline()));
    // The default profile names no bundle: the CA is unknown there.
    let e = open(&vars[..2]).unwrap().get("k", deadline()).unwrap_err();
    assert_certificate_failure(&e, &["UnknownIssuer"]);
}

#[test]
fn aws_ca_bundle_wins_over_the_profile() {
    let ca = TestCa::new("bucket-lease test CA (both)");
    let server = tls_server(&ca);
    let dir = TempDir::new("ca-both");
    let bundle = dir.write("ca.pem", ca.pem());
    let missing = dir.path().join("missing.pem").display().to_string();
    let config = dir.write("config", &format!("[default]\nca_bundle = {missing}\n"));
    let vars = [
        ("AWS_ENDPOINT_URL", server.url()),
        ("AWS_CONFIG_FILE", config),
    ];
    // The profile's file alone is missing: its own error.
    let e = open(&vars)
        .expect_err("the profile's bundle is missing")
        .to_string();
    assert!(
        e.contains(&missing) && e.contains("ca_bundle in the profile"),
        "{e}"
    );
    // The variable's file is used instead, and the profile's is not read.
    let mut with_env = vars.to_vec();
    with_env.push(("AWS_CA_BUNDLE", bundle));
    assert_reached(open(&with_env).unwrap().get("k", deadline()));
}

#[test]
fn a_bundle_that_cannot_be_used_is_a_configuration_error_before_any_request() {
    let ca = TestCa::new("bucket-lease test CA (bad bundles)");
    let server = tls_server(&ca);
    let dir = TempDir::new("ca-bad");
    let missing = dir.path().join("missing.pem").display().to_string();
    let empty = dir.write("empty.pem", "");
    let text = dir.write("text.pem", "not a certificate\n");
    let key_only = dir.write(
        "key.pem",
        "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIBm5cW1m\n-----END PRIVATE KEY-----\n",
    );
    let garbled = dir.write(
        "garbled.pem",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    );
    let directory = dir.path().display().to_string();
    for (path, why) in [
        (&missing, "cannot be read"),
        (&directory, "cannot be read"),
        (&empty, "holds no certificate"),
        (&text, "holds no certificate"),
        (&key_only, "holds no certificate"),
        (&garbled, "cannot be used as a root"),
    ] {
        let e = open(&[
            ("AWS_ENDPOINT_URL", server.url()),
            ("AWS_CA_BUNDLE", path.clone()),
        ])
        .expect_err("refused when configured");
        let text = e.to_string();
        for part in [
            path.as_str(),
            "AWS_CA_BUNDLE",
            why,
            "configuring the s3 store",
        ] {
            assert!(text.contains(part), "{part:?} missing from: {text}");
        }
    }
    assert_eq!(server.accepted(), 0, "no request was made");
}

#[test]
fn system_trust_adds_the_system_store_and_is_parsed_as_a_switch() {
    let ca = TestCa::new("bucket-lease test CA (system)");
    let server = tls_server(&ca);
    let dir = TempDir::new("ca-system");
    let system = dir.write("system.pem", ca.pem());
    let endpoint = ("AWS_ENDPOINT_URL", server.url());
    // The system's store is found through SSL_CERT_FILE, as OpenSSL finds it.
    let on = open(&[
        endpoint.clone(),
        ("BUCKET_LEASE_SYSTEM_TRUST", "on".into()),
        ("SSL_CERT_FILE", system.clone()),
    ])
    .unwrap();
    assert_reached(on.get("k", deadline()));
    // Off (or unset), SSL_CERT_FILE alone changes nothing.
    for value in ["off", ""] {
        let off = open(&[
            endpoint.clone(),
            ("BUCKET_LEASE_SYSTEM_TRUST", value.into()),
            ("SSL_CERT_FILE", system.clone()),
        ])
        .unwrap();
        let e = off.get("k", deadline()).unwrap_err();
        assert_certificate_failure(&e, &["UnknownIssuer"]);
    }
    // A value that is not a switch is named.
    let e = open(&[
        endpoint.clone(),
        ("BUCKET_LEASE_SYSTEM_TRUST", "maybe".into()),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("\"maybe\" is not on or off (BUCKET_LEASE_SYSTEM_TRUST)"),
        "{e}"
    );
    // This machine's own store builds (or, where there is none, the error
    // says where to point).
    match open(&[endpoint, ("BUCKET_LEASE_SYSTEM_TRUST", "true".into())]) {
        Ok(_) => {}
        Err(e) => assert!(e.to_string().contains("SSL_CERT_FILE"), "{e}"),
    }
}

#[test]
fn an_expired_certificate_and_a_wrong_name_are_named_and_not_retried() {
    let ca = TestCa::new("bucket-lease test CA (expired)");
    let dir = TempDir::new("ca-expired");
    let bundle = dir.write("ca.pem", ca.pem());
    for (cert, parts) in [
        (
            ca.expired_server(&["localhost"]),
            &["expired", "the server's certificate"][..],
        ),
        (
            ca.server(&["s3.example.com"]),
            &["not valid for", "localhost", "the endpoint's host name"][..],
        ),
    ] {
        let server = TlsServer::start(cert);
        let store = open(&[
            ("AWS_ENDPOINT_URL", server.url()),
            ("AWS_CA_BUNDLE", bundle.clone()),
        ])
        .unwrap();
        let e = store.get("k", deadline()).unwrap_err();
        assert_certificate_failure(&e, parts);
        assert_eq!(server.accepted(), 1, "{e}");
    }
}

/// An http:// endpoint through HTTP_PROXY, with the proxy's credentials
/// in `vars`; the store and its prefix.
fn through_proxy(server: Server, endpoint: &str, proxy: &Proxy) -> (Arc<dyn Store>, String) {
    let secret = match server {
        Server::Nanio => std::env::var("BUCKET_LEASE_TEST_NANIO_SECRET_KEY").unwrap(),
        _ => "test-secret".into(),
    };
    let vars = [
        ("AWS_ENDPOINT_URL", endpoint.to_string()),
        (
            "AWS_ACCESS_KEY_ID",
            server.credentials().access_key_id().to_string(),
        ),
        ("AWS_SECRET_ACCESS_KEY", secret),
        (
            "HTTP_PROXY",
            proxy.url_with("lease-user:pa%3Ass%40word%2F%2B"),
        ),
        // The proxy for the other scheme is not used.
        ("HTTPS_PROXY", "http://127.0.0.1:9".into()),
    ];
    let url = format!(
        "s3://{}/{}",
        common::bucket(),
        common::unique_prefix("proxied")
    );
    config::open_with_env(&url, env(&vars)).unwrap()
}

/// Each request `proxy` was asked: in absolute form to `endpoint`'s
/// bucket, with the proxy's credentials and the endpoint's own `Host`.
fn assert_absolute_form(proxy: &Proxy, endpoint: &str, at_least: usize) {
    let authority = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let asked = proxy.asked();
    assert!(asked.len() >= at_least, "{asked:#?}");
    for a in &asked {
        let (method, rest) = a.line.split_once(' ').unwrap();
        assert!(
            ["GET", "HEAD", "PUT", "DELETE"].contains(&method)
                && rest.starts_with(&format!("http://{authority}/{}/", common::bucket()))
                && rest.ends_with(" HTTP/1.1"),
            "{a:?}"
        );
        assert_eq!(
            a.authorization.as_deref(),
            Some("Basic bGVhc2UtdXNlcjpwYTpzc0B3b3JkLys="),
            "{a:?}"
        );
        assert_eq!(a.host.as_deref(), Some(authority), "{a:?}");
    }
}

/// An http:// endpoint through HTTP_PROXY: every request of a whole lease
/// on moto (acquire with its probe, renew, release) goes to the proxy in
/// absolute form with the proxy's credentials.
#[test]
fn a_whole_lease_goes_through_http_proxy_in_absolute_form() {
    let Some(endpoint) = common::server(Server::Moto) else {
        return;
    };
    let proxy = Proxy::forwarding();
    let (store, prefix) = through_proxy(Server::Moto, &endpoint, &proxy);
    let mut contender = Contender::new(store, &prefix, LeaseOptions::new(30));
    let lease = contender.try_acquire().unwrap();
    lease.renew().unwrap();
    lease.release().unwrap();
    // GET, the create, four probe writes, the renewal, the release.
    assert_absolute_form(&proxy, &endpoint, 8);
}

/// Through the proxy, the signature still covers the endpoint's host and
/// path: nanio, which verifies SigV4, accepts the requests.
#[test]
fn signatures_through_http_proxy_hold_for_the_endpoint() {
    let Some(endpoint) = common::server(Server::Nanio) else {
        return;
    };
    let proxy = Proxy::forwarding();
    let (store, prefix) = through_proxy(Server::Nanio, &endpoint, &proxy);
    let key = format!("{prefix}/odd key+é/LEASE");
    let create =
        bucket_lease_core::store::PutOptions::new(bucket_lease_core::store::PutMode::Create);
    store.put(&key, b"through the proxy", &create).unwrap();
    assert_eq!(store.get(&key, None).unwrap().body, b"through the proxy");
    store
        .delete(
            &key,
            &bucket_lease_core::store::DeleteMode::Unconditional,
            None,
        )
        .unwrap();
    assert_absolute_form(&proxy, &endpoint, 3);
}

/// An https:// endpoint through HTTPS_PROXY: one CONNECT to the endpoint's
/// host and port, with the proxy's credentials, and TLS to the endpoint
/// inside the tunnel (its certificate checked as without a proxy).
#[test]
fn https_endpoints_tunnel_through_https_proxy_with_connect() {
    let ca = TestCa::new("bucket-lease test CA (connect)");
    let server = tls_server(&ca);
    let dir = TempDir::new("connect");
    let bundle = dir.write("ca.pem", ca.pem());
    let proxy = Proxy::forwarding();
    let other = Proxy::refusing("403 Forbidden");
    let store = open(&[
        ("AWS_ENDPOINT_URL", server.url()),
        ("AWS_CA_BUNDLE", bundle),
        ("HTTPS_PROXY", proxy.url_with("u:p")),
        ("HTTP_PROXY", other.url()),
    ])
    .unwrap();
    assert_reached(store.get("k", deadline()));
    assert_reached(store.get("k2", deadline()));
    let asked = proxy.asked();
    assert_eq!(asked.len(), 1, "one tunnel, kept alive: {asked:#?}");
    assert_eq!(
        asked[0].line,
        format!("CONNECT {} HTTP/1.1", server.authority())
    );
    assert_eq!(asked[0].host.as_deref(), Some(server.authority().as_str()));
    assert_eq!(asked[0].authorization.as_deref(), Some("Basic dTpw"));
    assert_eq!((server.handshakes(), server.requests()), (1, 2));
    assert!(other.asked().is_empty());

    // Through the tunnel, an unknown CA is still refused, once.
    let untrusted = tls_server(&TestCa::new("bucket-lease test CA (stranger)"));
    let store = open(&[
        ("AWS_ENDPOINT_URL", untrusted.url()),
        ("HTTPS_PROXY", proxy.url()),
    ])
    .unwrap();
    let e = store.get("k", deadline()).unwrap_err();
    assert_certificate_failure(&e, &["UnknownIssuer", "AWS_CA_BUNDLE"]);
    assert_eq!(untrusted.accepted(), 1);
}

/// A server on 127.0.0.1 answering every request 404.
fn plain_server() -> Canned {
    Canned::answering(|_| Reply::error(404, "NoSuchKey", "no such key", "R1"))
}

#[test]
fn the_proxy_is_chosen_by_the_endpoints_scheme_and_no_proxy_hosts_go_direct() {
    let server = plain_server();
    let proxy = Proxy::forwarding();
    // An http:// endpoint does not use HTTPS_PROXY, as in the AWS CLI.
    let direct = open(&[
        ("AWS_ENDPOINT_URL", server.url()),
        ("HTTPS_PROXY", proxy.url()),
    ])
    .unwrap();
    assert_reached(direct.get("k", deadline()));
    assert!(proxy.asked().is_empty(), "{:?}", proxy.asked());

    // NO_PROXY (or no_proxy): a listed host goes direct, others through.
    for (variable, list, proxied) in [
        ("NO_PROXY", "example.com, 127.0.0.1", false),
        ("no_proxy", "127.0.0.1", false),
        ("NO_PROXY", "*", false),
        ("NO_PROXY", ".example.com,localhost", true),
    ] {
        let before = proxy.asked().len();
        let store = open(&[
            ("AWS_ENDPOINT_URL", server.url()),
            ("HTTP_PROXY", proxy.url()),
            (variable, list.to_string()),
        ])
        .unwrap();
        assert_reached(store.get("k", deadline()));
        let through = proxy.asked().len() > before;
        assert_eq!(through, proxied, "{variable}={list}");
    }

    // And for https://, NO_PROXY skips the CONNECT.
    let ca = TestCa::new("bucket-lease test CA (no proxy)");
    let tls = tls_server(&ca);
    let dir = TempDir::new("no-proxy");
    let before = proxy.asked().len();
    let store = open(&[
        ("AWS_ENDPOINT_URL", tls.url()),
        ("AWS_CA_BUNDLE", dir.write("ca.pem", ca.pem())),
        ("HTTPS_PROXY", proxy.url()),
        ("NO_PROXY", "localhost".into()),
    ])
    .unwrap();
    assert_reached(store.get("k", deadline()));
    assert_eq!(proxy.asked().len(), before);
}

/// A proxy that refuses (407, 403) is named with the setting, never with
/// its password, and not asked again.
#[test]
fn a_refusing_proxy_is_named_and_not_asked_again() {
    let ca = TestCa::new("bucket-lease test CA (refused)");
    let tls = tls_server(&ca);
    let plain = plain_server();
    for (endpoint, variable) in [(tls.url(), "HTTPS_PROXY"), (plain.url(), "HTTP_PROXY")] {
        let proxy = Proxy::refusing("407 Proxy Authentication Required");
        let store = open(&[
            ("AWS_ENDPOINT_URL", endpoint.clone()),
            (variable, proxy.url_with("user:hunter2")),
        ])
        .unwrap();
        let e = store.get("k", deadline()).unwrap_err();
        let text = format!("{e} {e:?}");
        assert!(e.is_permanent(), "{text}");
        for part in [
            "407",
            variable,
            &format!(
                "http://***@127.0.0.1:{}",
                proxy.url().rsplit(':').next().unwrap()
            ),
        ] {
            assert!(text.contains(part), "{part:?} missing from: {text}");
        }
        assert!(
            !text.contains("hunter2") && !text.contains("dXNlcjpodW50ZXIy"),
            "{text}"
        );
        assert_eq!(proxy.asked().len(), 1, "{endpoint}: {text}");
    }
}

/// Proxy credentials appear in no `Debug` of the builder or the store, and
/// in no error (a proxy nobody listens on).
#[test]
fn proxy_credentials_never_show() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    for (endpoint, variable) in [
        ("https://s3.example.com", "HTTPS_PROXY"),
        ("http://127.0.0.1:9", "HTTP_PROXY"),
    ] {
        let vars = [
            ("AWS_ENDPOINT_URL", endpoint.to_string()),
            (
                variable,
                format!("http://proxy-user:hunter2@127.0.0.1:{port}"),
            ),
        ];
        let url = StoreUrl::parse("s3://bkt/p").unwrap();
        let builder = config::http_builder(&url, &env(&vars)).unwrap();
        let store = builder.clone().build().unwrap();
        let e = store.get("k", deadline()).unwrap_err();
        let shown = format!("{builder:?} {builder:#?} {store:?} {store:#?} {e} {e:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(!shown.contains("cHJveHktdXNlcjpodW50ZXIy"), "{shown}");
        assert!(
            shown.contains(&format!("http://***@127.0.0.1:{port}")),
            "{shown}"
        );
        assert!(!e.may_have_landed(), "{e}");
    }
}

/// A proxy that never answers holds no request past its deadline: the
/// CONNECT, and a request in absolute form, each give up by the deadline
/// plus the slack (`conformance::deadline_kept` checks the return).
#[test]
fn a_silent_proxy_keeps_the_deadline() {
    let plain = plain_server();
    for (endpoint, variable) in [
        ("https://s3.example.com".to_string(), "HTTPS_PROXY"),
        (plain.url(), "HTTP_PROXY"),
    ] {
        let proxy = Proxy::silent();
        let store = open(&[
            ("AWS_ENDPOINT_URL", endpoint.clone()),
            (variable, proxy.url()),
        ])
        .unwrap();
        let results =
            conformance::deadline_kept(&*store, "silent", Duration::from_millis(400), &NoWire);
        for (method, result) in results {
            let e = result.expect_err("a silent proxy answers nothing");
            assert_eq!(
                e.kind(),
                StoreErrorKind::Transport,
                "{endpoint} {method}: {e}"
            );
            assert!(e.is_timeout(), "{endpoint} {method}: {e}");
        }
        assert!(!proxy.asked().is_empty());
        assert_eq!(plain.seen().len(), 0);
    }
}
