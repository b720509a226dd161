use super::*;
use crate::Credentials;
use bucket_lease_core::store::PutMode;
use std::time::UNIX_EPOCH;

pub(super) fn profile(name: &'static str) -> Profile {
    Profile::path_style(name)
}

fn store(endpoint: &str) -> HttpStore {
    HttpStore::builder(profile("test"))
        .endpoint(endpoint)
        .bucket("bkt")
        .credentials(Credentials::new("AKID", "SECRET"))
        .build()
        .unwrap()
}

#[test]
fn answers_map_by_meaning() {
    use StoreErrorKind::*;
    let cases: &[(Op, u16, Option<&str>, Option<StoreErrorKind>)] = &[
        (Op::Get, 200, None, None),
        (Op::Get, 404, Some("NoSuchKey"), Some(NotFound)),
        (Op::Get, 404, Some("NoSuchBucket"), Some(Rejected)),
        (Op::Create, 200, None, None),
        (
            Op::Create,
            412,
            Some("PreconditionFailed"),
            Some(AlreadyExists),
        ),
        (Op::Create, 304, None, Some(AlreadyExists)),
        (Op::Update, 412, None, Some(Precondition)),
        (Op::Update, 304, None, Some(Precondition)),
        (Op::Update, 404, Some("NoSuchKey"), Some(Precondition)),
        (
            Op::Update,
            409,
            Some("ConditionalRequestConflict"),
            Some(Conflict),
        ),
        (Op::Create, 409, None, Some(Conflict)),
        (
            Op::Overwrite,
            403,
            Some("AccessDenied"),
            Some(PermissionDenied),
        ),
        (
            Op::Get,
            403,
            Some("SignatureDoesNotMatch"),
            Some(PermissionDenied),
        ),
        (
            Op::Create,
            501,
            Some("NotImplemented"),
            Some(NotImplemented),
        ),
        (
            Op::Update,
            400,
            Some("NotImplemented"),
            Some(NotImplemented),
        ),
        (Op::DeleteIfMatch, 501, None, Some(NotImplemented)),
        (Op::Overwrite, 501, None, Some(Rejected)),
        (Op::Overwrite, 500, Some("InternalError"), Some(Transport)),
        (Op::Update, 503, Some("SlowDown"), Some(Transport)),
        (Op::Get, 429, None, Some(Transport)),
        (Op::Delete, 204, None, None),
        (Op::Delete, 404, Some("NoSuchKey"), None),
        (Op::DeleteIfMatch, 404, None, None),
        (Op::DeleteIfMatch, 412, None, Some(Precondition)),
        (Op::Delete, 404, Some("NoSuchBucket"), Some(Rejected)),
        (Op::Overwrite, 400, Some("InvalidArgument"), Some(Rejected)),
        (Op::Get, 301, Some("PermanentRedirect"), Some(Rejected)),
        (Op::Overwrite, 412, None, Some(Rejected)),
    ];
    for &(op, status, code, expected) in cases {
        assert_eq!(
            failure_kind(op, status, code),
            expected,
            "{op:?} {status} {code:?}"
        );
    }
}

#[test]
fn endpoints_parse_https_by_default() {
    let e = Endpoint::parse("s3.example.com").unwrap();
    assert_eq!(
        (e.scheme, e.authority.as_str()),
        ("https", "s3.example.com")
    );
    let e = Endpoint::parse("http://127.0.0.1:9000/base/").unwrap();
    assert_eq!(
        (e.scheme, e.authority.as_str(), e.base_path.as_str()),
        ("http", "127.0.0.1:9000", "/base")
    );
    assert!(e.host_is_ip());
    assert!(Endpoint::parse("https://[::1]:9000").unwrap().host_is_ip());
    assert!(!Endpoint::parse("https://minio.lan:9000")
        .unwrap()
        .host_is_ip());
    for bad in [
        "ftp://x",
        "https://",
        "https://u:p@host",
        "https://h/?q",
        "https://h:port",
    ] {
        assert!(Endpoint::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn keys_are_percent_encoded_except_slashes() {
    assert_eq!(encode_key("a/b c/LEASE"), "a/b%20c/LEASE");
    assert_eq!(encode_key("x+y=z&é~._-"), "x%2By%3Dz%26%C3%A9~._-");
}

#[test]
fn addressing_builds_the_base_url() {
    let virtual_hosted = |bucket: &str, endpoint: &str| {
        HttpStore::builder(profile("t"))
            .addressing(Addressing::VirtualHosted)
            .endpoint(endpoint)
            .bucket(bucket)
            .credentials(Credentials::new("A", "S"))
            .build()
            .unwrap()
            .base_url()
            .to_string()
    };
    assert_eq!(
        virtual_hosted("bkt", "https://s3.eu-west-1.amazonaws.com"),
        "https://bkt.s3.eu-west-1.amazonaws.com"
    );
    // Dotted buckets and IP endpoints cannot be host labels: path-style.
    assert_eq!(
        virtual_hosted("my.bkt", "https://s3.amazonaws.com"),
        "https://s3.amazonaws.com/my.bkt"
    );
    assert_eq!(
        virtual_hosted("bkt", "http://127.0.0.1:9000"),
        "http://127.0.0.1:9000/bkt"
    );
    assert_eq!(
        store("http://h:1/base/").url("a b"),
        "http://h:1/base/bkt/a%20b"
    );
}

/// The addressing rule: path-style for a custom endpoint, virtual-hosted
/// for AWS's own, and an explicit choice wins either way.
#[test]
fn custom_endpoints_are_path_style_unless_asked_otherwise() {
    let base = |endpoint: Option<&str>, addressing: Option<Addressing>, bucket: &str| {
        let mut profile = profile("s3");
        profile.addressing = Addressing::VirtualHosted;
        profile.endpoint_for_region =
            Some(|region, _| Ok(format!("https://s3.{region}.amazonaws.com")));
        let mut b = HttpStore::builder(profile)
            .bucket(bucket)
            .credentials(Credentials::new("A", "S"));
        if let Some(endpoint) = endpoint {
            b = b.endpoint(endpoint);
        }
        if let Some(addressing) = addressing {
            b = b.addressing(addressing);
        }
        b.build().unwrap().base_url().to_string()
    };
    // The region's own endpoint and AWS endpoints given explicitly.
    assert_eq!(
        base(None, None, "bkt"),
        "https://bkt.s3.us-east-1.amazonaws.com"
    );
    assert_eq!(
        base(Some("https://s3.eu-west-1.amazonaws.com"), None, "bkt"),
        "https://bkt.s3.eu-west-1.amazonaws.com"
    );
    assert_eq!(
        base(Some("https://s3.cn-north-1.amazonaws.com.cn"), None, "bkt"),
        "https://bkt.s3.cn-north-1.amazonaws.com.cn"
    );
    // Custom endpoints by host name: path-style.
    for (endpoint, url) in [
        ("http://localhost:4566", "http://localhost:4566/bkt"),
        ("http://minio:9000", "http://minio:9000/bkt"),
        (
            "https://ceph.internal/base",
            "https://ceph.internal/base/bkt",
        ),
        // Not AWS, whatever it ends with.
        ("https://notamazonaws.com", "https://notamazonaws.com/bkt"),
    ] {
        assert_eq!(base(Some(endpoint), None, "bkt"), url, "{endpoint}");
    }
    // Asked for: either way.
    assert_eq!(
        base(
            Some("http://minio:9000"),
            Some(Addressing::VirtualHosted),
            "bkt"
        ),
        "http://bkt.minio:9000"
    );
    assert_eq!(
        base(None, Some(Addressing::Path), "bkt"),
        "https://s3.us-east-1.amazonaws.com/bkt"
    );
    // Dotted buckets stay path-style even when virtual-hosted is asked for.
    assert_eq!(
        base(None, Some(Addressing::VirtualHosted), "my.bkt"),
        "https://s3.us-east-1.amazonaws.com/my.bkt"
    );
}

#[test]
fn missing_settings_name_what_to_set() {
    let e = HttpStore::builder(profile("minio")).build().unwrap_err();
    assert!(e.to_string().contains("bucket is not set"), "{e}");
    let e = HttpStore::builder(profile("minio"))
        .bucket("b")
        .credentials(Credentials::new("A", "S"))
        .build()
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "configuring the minio store: endpoint is not set; set AWS_ENDPOINT_URL, or call endpoint()"
    );
    let e = HttpStore::builder(profile("minio"))
        .bucket("b")
        .credentials(Credentials::new("A", "S"))
        .endpoint("gopher://x")
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("gopher"), "{e}");
}

#[test]
fn endpoint_user_information_is_refused_and_never_shown() {
    use crate::config::tests::{assert_no_user_information, ENDPOINTS_WITH_USER_INFO};
    for endpoint in ENDPOINTS_WITH_USER_INFO {
        let builder = HttpStore::builder(profile("minio"))
            .endpoint(endpoint)
            .bucket("b")
            .credentials(Credentials::new("id-in-code", "key-in-code"));
        assert_no_user_information(&format!("{builder:?} {builder:#?}"));
        let e = builder.build().unwrap_err();
        let text = format!("{e} {e:?} {e:#?}");
        assert_no_user_information(&text);
        assert!(
            text.starts_with("configuring the minio store: "),
            "{endpoint}: {text}"
        );
    }
    let e = HttpStore::builder(profile("minio"))
        .endpoint("http://AKID:secret@127.0.0.1:9000")
        .bucket("b")
        .credentials(Credentials::new("id-in-code", "key-in-code"))
        .build()
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "configuring the minio store: \"http://***@127.0.0.1:9000\" carries user \
         information (user:password@), which is never sent nor shown; put the credentials in \
         AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or call credentials()) and give the \
         endpoint as https://host[:port][/path]"
    );
}

#[test]
fn a_passed_deadline_fails_without_sending() {
    // Port 9 (discard) on loopback: nothing is sent anyway.
    let store = store("http://127.0.0.1:9");
    let past = Some(Instant::now() - Duration::from_millis(1));
    let e = store.get("k", past).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transport);
    assert!(e.is_timeout());
    assert_eq!((e.method(), e.key()), ("GET", "k"));
    let e = store
        .put(
            "k",
            b"x",
            &PutOptions::new(PutMode::Create).with_deadline(past),
        )
        .unwrap_err();
    assert!(e.is_timeout() && e.method() == "PUT");
}

#[test]
fn conditional_deletes_the_profile_does_not_send_are_not_implemented() {
    let store = HttpStore::builder(profile("r2"))
        .conditional_delete(false)
        .endpoint("http://127.0.0.1:9")
        .bucket("b")
        .credentials(Credentials::new("A", "S"))
        .build()
        .unwrap();
    let e = store
        .delete("k", &DeleteMode::IfVersion(Version::etag("\"e\"")), None)
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::NotImplemented);
    assert!(e.to_string().contains("r2 profile"), "{e}");
}

#[test]
fn a_version_without_an_etag_is_rejected_naming_what_is_missing() {
    // Port 9 (discard) on loopback: nothing is sent anyway.
    let store = store("http://127.0.0.1:9");
    for version in [
        Version::default(),
        Version {
            etag: None,
            version_id: Some("v1".into()),
        },
    ] {
        let update = PutOptions::new(PutMode::Update(version.clone()));
        let delete = DeleteMode::IfVersion(version);
        for e in [
            store.put("k", b"", &update).unwrap_err(),
            store.delete("k", &delete, None).unwrap_err(),
        ] {
            assert_eq!(e.kind(), StoreErrorKind::Rejected, "{e}");
            assert!(!e.may_have_landed() && !e.is_refusal(), "{e}");
            let text = e.to_string();
            assert!(
                text.contains("the version has no ETag")
                    && text.contains("If-Match cannot be sent"),
                "{text}"
            );
        }
    }
}

#[test]
fn a_get_over_the_cap_is_too_large_with_the_version_from_the_headers() {
    let answer = |headers: &[(&'static str, &'static str)]| Answer {
        status: 200,
        headers: headers
            .iter()
            .map(|&(n, v)| (HeaderName::from_static(n), HeaderValue::from_static(v)))
            .collect(),
        body: Err(DEFAULT_MAX_BODY),
        stream: None,
    };
    let e = object_of(
        "p/LEASE",
        answer(&[("etag", "\"e1\""), ("x-amz-version-id", "v1")]),
    )
    .unwrap_err();
    assert_eq!(
        (e.kind(), e.method(), e.key()),
        (StoreErrorKind::TooLarge, "GET", "p/LEASE")
    );
    assert_eq!(
        e.version(),
        Some(&Version {
            etag: Some("\"e1\"".into()),
            version_id: Some("v1".into())
        })
    );
    assert!(e.to_string().contains("65536-byte cap"), "{e}");
    let e = object_of("k", answer(&[])).unwrap_err();
    assert_eq!((e.kind(), e.version()), (StoreErrorKind::TooLarge, None));
    assert!(e.to_string().contains("named no version"), "{e}");
}

#[test]
fn etags_are_sent_as_received_or_unquoted() {
    let quoted = store("http://h");
    let request = quoted
        .request(Op::Update, "k", Some(&Version::etag("\"abc\"")), &[])
        .unwrap();
    assert_eq!(request.headers()["if-match"], "\"abc\"");
    let unquoted = HttpStore::builder(profile("t"))
        .unquoted_etags(true)
        .endpoint("http://h")
        .bucket("b")
        .credentials(Credentials::new("A", "S"))
        .build()
        .unwrap();
    let request = unquoted
        .request(Op::DeleteIfMatch, "k", Some(&Version::etag("\"abc\"")), &[])
        .unwrap();
    assert_eq!(request.headers()["if-match"], "abc");
}

#[test]
fn puts_carry_content_type_metadata_and_conditions() {
    let s = store("http://h");
    let meta = vec![("Owner".to_string(), "host-7 pid-42".to_string())];
    let request = s.request(Op::Create, "k", None, &meta).unwrap();
    let h = request.headers();
    assert_eq!(h["content-type"], "application/octet-stream");
    assert_eq!(h["if-none-match"], "*");
    assert_eq!(h["x-amz-meta-owner"], "host-7 pid-42");
    let bad = vec![("bad name".to_string(), "v".to_string())];
    let e = s.request(Op::Overwrite, "k", None, &bad).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Rejected);
    let bad = vec![("n".to_string(), "line\nbreak".to_string())];
    assert!(s.request(Op::Overwrite, "k", None, &bad).is_err());
}

#[test]
fn debug_never_shows_secrets() {
    let store = HttpStore::builder(profile("t"))
        .endpoint("http://h")
        .bucket("b")
        .credentials(Credentials::new("AKIDSHOWN", "secret-one").with_session_token("secret-two"))
        .build()
        .unwrap();
    let debug = format!("{store:?} {store:#?}");
    assert!(debug.contains("AKIDSHOWN"), "{debug}");
    assert!(!debug.contains("secret-"), "{debug}");
    // The signature is a secret too, while valid: it is in no error.
    let e = store
        .get("k", Some(Instant::now() - Duration::from_secs(1)))
        .unwrap_err();
    assert!(!format!("{e} {e:?}").contains("secret-"));
}

/// A request to sign: its kind, key, condition, metadata and body.
type Case<'a> = (
    Op,
    &'a str,
    Option<&'a Version>,
    &'a [(String, String)],
    &'a [u8],
);

/// One request as each profile sends it, signed by us and by botocore.
#[test]
// The pushes are each behind a profile's feature.
#[allow(clippy::vec_init_then_push)]
fn signatures_match_botocore_for_each_profile() {
    let Some(python) = std::env::var_os("BUCKET_LEASE_PYTHON") else {
        if std::env::var("BUCKET_LEASE_REQUIRE_SERVERS").as_deref() == Ok("1") {
            panic!("BUCKET_LEASE_PYTHON is not set (scripts/test-servers.sh start writes it)");
        }
        eprintln!("note: BUCKET_LEASE_PYTHON is not set; skipping the botocore comparison");
        return;
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/botocore_sign.py");
    let time = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let plain = Credentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
    let temporary = plain
        .clone()
        .with_session_token("FwoGZXIvYXdzEJr//////////token+/=");

    let mut stores = Vec::new();
    #[cfg(feature = "s3")]
    stores.push(
        crate::s3::builder()
            .region("us-west-2")
            .bucket("lease-bucket")
            .credentials(plain.clone())
            .build()
            .unwrap(),
    );
    #[cfg(feature = "r2")]
    stores.push(
        crate::r2::builder()
            .endpoint(crate::r2::endpoint("0123456789abcdef", Some("eu")))
            .bucket("lease-bucket")
            .credentials(temporary.clone())
            .build()
            .unwrap(),
    );
    #[cfg(feature = "minio")]
    stores.push(
        crate::minio::builder()
            .endpoint("http://127.0.0.1:9000")
            .bucket("lease-bucket")
            .credentials(temporary.clone())
            .build()
            .unwrap(),
    );
    stores.push(
        HttpStore::builder(profile("path-with-base"))
            .endpoint("https://storage.example.com:8443/s3/")
            .bucket("lease-bucket")
            .credentials(plain)
            .build()
            .unwrap(),
    );
    let _ = &temporary;

    let meta = vec![
        ("owner".to_string(), "host-7 pid-42".to_string()),
        ("epoch".to_string(), "12".to_string()),
    ];
    let etag = Version::etag("\"5d41402abc4b2a76b9719d911017c592\"");
    let spaced = vec![("Owner".to_string(), "  host-7   pid-42 ".to_string())];
    let mut lines = String::new();
    let mut ours = Vec::new();
    for store in &stores {
        let requests: Vec<Case> = vec![
            (Op::Get, "jobs/nightly/LEASE", None, &[], b""),
            (
                Op::Create,
                "jobs/nightly/LEASE",
                None,
                &meta,
                b"{\"holder\":1}",
            ),
            (
                Op::Update,
                "a key/with spaces+plus/é",
                Some(&etag),
                &[],
                b"x",
            ),
            (Op::Overwrite, "k", None, &[], b""),
            (
                Op::DeleteIfMatch,
                "jobs/nightly/LEASE",
                Some(&etag),
                &[],
                b"",
            ),
            (Op::Head, "percent%41%2F", None, &[], b""),
            (Op::Delete, "tilde~equals=amp&", None, &[], b""),
            (Op::Get, "slashes//run///of/", None, &[], b""),
            (Op::Create, "日本語/😀", None, &spaced, b"{}"),
            (Op::Overwrite, "colon:semi;comma,at@*", None, &[], b"body"),
        ];
        for (op, key, condition, metadata, body) in requests {
            let unsigned = store.request(op, key, condition, metadata).unwrap();
            let mut fields = vec![
                "20231114T221320Z".as_bytes().to_vec(),
                unsigned.method().as_str().as_bytes().to_vec(),
                unsigned.uri().to_string().into_bytes(),
                store.region.as_bytes().to_vec(),
                b"AKIDEXAMPLE".to_vec(),
                b"wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".to_vec(),
            ];
            let token = if store.credentials.current().unwrap().has_session_token() {
                b"FwoGZXIvYXdzEJr//////////token+/=".to_vec()
            } else {
                Vec::new()
            };
            fields.push(token);
            fields.push(body.to_vec());
            for (name, value) in unsigned.headers() {
                fields.push(name.as_str().as_bytes().to_vec());
                fields.push(value.as_bytes().to_vec());
            }
            let line: Vec<String> = fields
                .iter()
                .map(|f| {
                    format!(
                        "x{}",
                        f.iter().map(|b| format!("{b:02x}")).collect::<String>()
                    )
                })
                .collect();
            lines.push_str(&line.join(" "));
            lines.push('\n');

            let signed = store.signed(op, key, unsigned, body, time).unwrap();
            ours.push(
                signed.headers()["authorization"]
                    .to_str()
                    .unwrap()
                    .to_string(),
            );
        }
    }

    let mut child = std::process::Command::new(python)
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run the botocore signer");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "botocore_sign.py failed");
    let theirs: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(theirs.len(), ours.len());
    for (i, (ours, theirs)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(ours, theirs, "request {i}");
    }
    // R2's scope is region `auto`.
    #[cfg(feature = "r2")]
    assert!(ours.iter().any(|a| a.contains("/auto/s3/aws4_request")));
}

/// Read one request from `stream`: its head and its body.
fn read_request(stream: &mut std::net::TcpStream) -> Option<(String, Vec<u8>)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let length = head
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    stream.read_exact(&mut body).ok()?;
    Some((head, body))
}

/// A loopback server that hands each accepted connection to `serve`, with
/// its number; `http://127.0.0.1:PORT`.
fn raw_server(serve: impl Fn(usize, std::net::TcpStream) + Send + Sync + 'static) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let serve = Arc::new(serve);
    std::thread::spawn(move || {
        for (i, stream) in listener.incoming().enumerate() {
            let serve = serve.clone();
            std::thread::spawn(move || serve(i, stream.unwrap()));
        }
    });
    url
}

fn soon() -> Option<Instant> {
    Some(Instant::now() + Duration::from_secs(10))
}

#[test]
fn a_kept_connection_the_server_closed_while_idle_is_replaced() {
    use std::io::Write;
    let (closed, was_closed) = std::sync::mpsc::channel();
    let closed = std::sync::Mutex::new(closed);
    let url = raw_server(move |i, mut stream| {
        while read_request(&mut stream).is_some() {
            let answer = format!("HTTP/1.1 200 OK\r\nETag: \"v{i}\"\r\ncontent-length: 0\r\n\r\n");
            stream.write_all(answer.as_bytes()).unwrap();
            if i == 0 {
                // The first connection is closed once idle.
                drop(stream);
                closed.lock().unwrap().send(()).unwrap();
                return;
            }
        }
    });
    let store = store(&url);
    let put = || {
        store
            .put(
                "k",
                b"x",
                &PutOptions::new(PutMode::Overwrite).with_deadline(soon()),
            )
            .unwrap()
            .etag
    };
    assert_eq!(put().as_deref(), Some("\"v0\""));
    was_closed.recv().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    // Found closed when taken from the pool: a new connection, no error.
    assert_eq!(put().as_deref(), Some("\"v1\""));
    assert_eq!(put().as_deref(), Some("\"v1\""), "the new one is kept");
}

#[test]
fn bytes_nobody_asked_for_after_an_answer_close_the_connection() {
    use std::io::Write;
    let url = raw_server(move |i, mut stream| {
        while read_request(&mut stream).is_some() {
            let answer = format!("HTTP/1.1 200 OK\r\nETag: \"v{i}\"\r\ncontent-length: 0\r\n\r\n");
            stream.write_all(answer.as_bytes()).unwrap();
            if i == 0 {
                stream.write_all(b"garbage").unwrap();
            }
        }
    });
    let store = store(&url);
    let options = PutOptions::new(PutMode::Overwrite).with_deadline(soon());
    assert_eq!(
        store.put("k", b"x", &options).unwrap().etag.as_deref(),
        Some("\"v0\"")
    );
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        store.put("k", b"x", &options).unwrap().etag.as_deref(),
        Some("\"v1\"")
    );
}

#[test]
fn objects_up_to_the_cap_and_large_heads_go_both_ways_whole() {
    use std::io::Write;
    let cap = DEFAULT_MAX_BODY;
    let object: Vec<u8> = (0..cap).map(|i| (i % 251) as u8).collect();
    let expected = object.clone();
    // 40 metadata headers of 100 bytes: an answer head of about 4.5 KiB.
    let value = "v".repeat(100);
    let (v, seen) = (value.clone(), std::sync::Mutex::new(Vec::new()));
    let seen = Arc::new(seen);
    let seen_by_server = seen.clone();
    let url = raw_server(move |_, mut stream| {
        while let Some((head, body)) = read_request(&mut stream) {
            let mut answer = String::from("HTTP/1.1 200 OK\r\nETag: \"big\"\r\n");
            if head.starts_with("GET") {
                for i in 0..40 {
                    answer.push_str(&format!("x-amz-meta-m{i:02}: {v}\r\n"));
                }
                answer.push_str(&format!("content-length: {}\r\n\r\n", expected.len()));
                stream.write_all(answer.as_bytes()).unwrap();
                stream.write_all(&expected).unwrap();
            } else {
                seen_by_server.lock().unwrap().push((head, body));
                stream
                    .write_all(b"HTTP/1.1 200 OK\r\nETag: \"big\"\r\ncontent-length: 0\r\n\r\n")
                    .unwrap();
            }
        }
    });
    let store = store(&url);
    // A 64 KiB body and 2 KiB of metadata (S3's limit) in one request.
    let metadata = "m".repeat(2000);
    let options = PutOptions::new(PutMode::Overwrite)
        .with_deadline(soon())
        .with_metadata("big", metadata.clone());
    store.put("k", &object, &options).unwrap();
    let (head, body) = seen.lock().unwrap().pop().unwrap();
    assert_eq!(body, object);
    assert!(head.contains(&format!("x-amz-meta-big: {metadata}\r\n")));

    for _ in 0..2 {
        let got = store.get("k", soon()).unwrap();
        assert_eq!(got.body, object);
        assert_eq!(got.metadata.len(), 40);
        assert!(got.metadata.iter().all(|(_, v)| *v == value));
        assert_eq!(got.version.etag.as_deref(), Some("\"big\""));
    }
}

#[test]
fn an_answer_head_over_the_limit_is_an_error_not_a_hang() {
    use std::io::Write;
    let url = raw_server(move |_, mut stream| {
        while read_request(&mut stream).is_some() {
            let mut answer = String::from("HTTP/1.1 200 OK\r\n");
            for i in 0..100 {
                answer.push_str(&format!("x-amz-meta-m{i:03}: {}\r\n", "v".repeat(100)));
            }
            answer.push_str("content-length: 0\r\n\r\n");
            if stream.write_all(answer.as_bytes()).is_err() {
                return;
            }
        }
    });
    let e = store(&url).get("k", soon()).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transport, "{e}");
    assert!(!e.is_timeout(), "{e}");
}

#[test]
fn idle_connections_outlive_the_longest_renewal_interval() {
    use bucket_lease_core::record::MAX_SANE_TTL_S;
    // A lease renews every third of its TTL.
    let longest_interval = Duration::from_secs(MAX_SANE_TTL_S / 3);
    assert!(MAX_IDLE_AGE >= longest_interval + Duration::from_secs(60));
    let store = store("http://127.0.0.1:9");
    assert_eq!(store.agent.config().max_idle_age(), MAX_IDLE_AGE);
}

#[test]
fn an_acquire_sends_its_four_probe_writes_at_once() {
    use bucket_lease_core::{Contender, LeaseOptions};
    use std::io::Write;
    use std::sync::{Condvar, Mutex};
    // The first PUT (the acquire's create) lands; the next four (the
    // probe) are answered only once all four are in flight together, else
    // 500 after 5 s: the one on the record's own ETag lands, the others
    // are refused. Later writes (the release) land.
    let state = Arc::new((Mutex::new((0usize, 0usize)), Condvar::new()));
    let url = raw_server(move |_, mut stream| {
        while let Some((head, _)) = read_request(&mut stream) {
            let answer = if head.starts_with("GET") {
                "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_string()
            } else if head.starts_with("PUT") {
                let (lock, arrived) = &*state;
                let mut counts = lock.lock().unwrap();
                counts.0 += 1;
                let n = counts.0;
                if (2..=5).contains(&n) {
                    counts.1 += 1;
                    arrived.notify_all();
                    let (counts, waited) = arrived
                        .wait_timeout_while(counts, Duration::from_secs(5), |c| c.1 < 4)
                        .unwrap();
                    drop(counts);
                    if waited.timed_out() {
                        "HTTP/1.1 500 Alone\r\ncontent-length: 0\r\n\r\n".to_string()
                    } else if head.to_ascii_lowercase().contains("if-match: \"e1\"") {
                        "HTTP/1.1 200 OK\r\nETag: \"e1\"\r\ncontent-length: 0\r\n\r\n".to_string()
                    } else {
                        "HTTP/1.1 412 Precondition Failed\r\ncontent-length: 0\r\n\r\n".to_string()
                    }
                } else {
                    format!("HTTP/1.1 200 OK\r\nETag: \"e{n}\"\r\ncontent-length: 0\r\n\r\n")
                }
            } else {
                "HTTP/1.1 204 No Content\r\n\r\n".to_string()
            };
            if stream.write_all(answer.as_bytes()).is_err() {
                return;
            }
        }
    });
    let store: Arc<dyn Store> = Arc::new(store(&url));
    let lease = Contender::new(store, "jobs", LeaseOptions::new(30))
        .try_acquire()
        .expect("the probe's writes were in flight together");
    assert_eq!(lease.key(), "jobs/LEASE");
}

/// A bucket in another region: S3's `301 PermanentRedirect` (with the
/// region in `x-amz-bucket-region`, the endpoint in the body; a HEAD gets
/// the header alone) and `400 AuthorizationHeaderMalformed` (the region in
/// `<Region>`) name the bucket's region and what to set.
#[test]
fn a_bucket_in_another_region_is_named_with_what_to_set() {
    use std::io::Write;
    let url = raw_server(move |_, mut stream| {
        while let Some((head, _)) = read_request(&mut stream) {
            let (status, headers, body) = if head.starts_with("HEAD /bkt/head") {
                (
                    "301 Moved Permanently",
                    "x-amz-bucket-region: eu-west-1\r\n",
                    String::new(),
                )
            } else if head.starts_with("GET /bkt/get") {
                (
                    "301 Moved Permanently",
                    "x-amz-bucket-region: eu-west-1\r\n",
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>PermanentRedirect</Code>\
                     <Message>The bucket you are attempting to access must be addressed using the \
                     specified endpoint. Please send all future requests to this endpoint.</Message>\
                     <Endpoint>bkt.s3.eu-west-1.amazonaws.com</Endpoint><Bucket>bkt</Bucket>\
                     <RequestId>R1</RequestId></Error>"
                        .to_string(),
                )
            } else if head.starts_with("GET /bkt/endpoint-only") {
                (
                    "301 Moved Permanently",
                    "",
                    "<Error><Code>PermanentRedirect</Code><Message>Use the endpoint.</Message>\
                     <Endpoint>bkt.s3.ap-south-1.amazonaws.com</Endpoint></Error>"
                        .to_string(),
                )
            } else {
                (
                    "400 Bad Request",
                    "",
                    "<Error><Code>AuthorizationHeaderMalformed</Code><Message>The authorization \
                     header is malformed; the region 'us-east-1' is wrong; expecting \
                     'eu-west-1'</Message><Region>eu-west-1</Region><RequestId>R2</RequestId>\
                     </Error>"
                        .to_string(),
                )
            };
            let answer = format!(
                "HTTP/1.1 {status}\r\n{headers}content-length: {}\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(answer.as_bytes()).unwrap();
        }
    });
    let store = store(&url);
    let e = store.get("get", soon()).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Rejected);
    assert_eq!(
        e.to_string(),
        "GET test://bkt/get: rejected (PermanentRedirect: the bucket bkt is in region eu-west-1, not \
         us-east-1; set AWS_REGION=eu-west-1 and an endpoint in that region in \
         AWS_ENDPOINT_URL (its endpoint, as the service gives it: bkt.s3.eu-west-1.amazonaws.com); \
         request id R1)"
    );
    let e = store.head("head", soon()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "HEAD test://bkt/head: rejected (HTTP 301: the bucket bkt is in region eu-west-1, not us-east-1; \
         set AWS_REGION=eu-west-1 and an endpoint in that region in AWS_ENDPOINT_URL)"
    );
    let e = store.get("endpoint-only", soon()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "GET test://bkt/endpoint-only: rejected (PermanentRedirect: the bucket bkt is not in region \
         us-east-1: the service sends its requests to bkt.s3.ap-south-1.amazonaws.com; set \
         AWS_REGION to the bucket's region and an endpoint in that region in AWS_ENDPOINT_URL)"
    );
    let e = store
        .put(
            "put",
            b"x",
            &PutOptions::new(PutMode::Create).with_deadline(soon()),
        )
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Rejected);
    assert_eq!(
        e.to_string(),
        "PUT test://bkt/put: rejected (AuthorizationHeaderMalformed: the bucket bkt is in region \
         eu-west-1, not us-east-1; set AWS_REGION=eu-west-1 and an endpoint in that region in \
         AWS_ENDPOINT_URL; request id R2)"
    );

    // With the region's own endpoint, the region alone is to set.
    let mut profile = profile("s3");
    profile.region = None;
    profile.endpoint_for_region = Some(|region, _| Ok(format!("http://s3.{region}.amazonaws.com")));
    let store = HttpStore::builder(profile)
        .region("us-east-1")
        .addressing(Addressing::Path)
        .connect_to(url.trim_start_matches("http://").parse().unwrap())
        .bucket("bkt")
        .credentials(Credentials::new("AKID", "SECRET"))
        .build()
        .unwrap();
    let e = store.get("get", soon()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "GET s3://bkt/get: rejected (PermanentRedirect: the bucket bkt is in region eu-west-1, not \
         us-east-1; set AWS_REGION=eu-west-1 (its endpoint, as the service gives it: \
         bkt.s3.eu-west-1.amazonaws.com); request id R1)"
    );
}

/// A port nobody listens on: refused, nothing sent.
fn refused_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

/// Errors name the object as a user writes its URL, `PROFILE://BUCKET/KEY`
/// with what a URL must encode encoded, while the key stays the plain key.
#[test]
fn errors_name_the_object_by_its_url() {
    let store = store(&refused_url());
    assert_eq!(store.store_url(), Some("test://bkt/"));
    let e = store.get("jobs?x/LEASE", soon()).unwrap_err();
    assert_eq!(e.key(), "jobs?x/LEASE");
    assert_eq!(e.url(), "test://bkt/jobs%3Fx/LEASE");
    assert!(
        e.to_string()
            .starts_with("GET test://bkt/jobs%3Fx/LEASE: not sent"),
        "{e}"
    );
    let e = store
        .delete("k", &DeleteMode::Unconditional, soon())
        .unwrap_err();
    assert_eq!(e.url(), "test://bkt/k");
}

#[test]
fn a_refused_connection_says_nothing_was_sent_and_names_host_and_port() {
    let url = refused_url();
    let target = url.trim_start_matches("http://");
    let e = store(&url)
        .put(
            "k",
            b"x",
            &PutOptions::new(PutMode::Create).with_deadline(soon()),
        )
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transport, "{e}");
    assert!(!e.may_have_landed() && !e.is_timeout(), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "PUT test://bkt/k: not sent (could not connect to {target}: Connection refused (os error \
             111); check that the service listens at {target}, the endpoint's host and \
             port); nothing was sent, so the request took no effect and is safe to retry"
        )
    );
}

#[test]
fn a_failed_lookup_says_nothing_was_sent_and_names_the_host() {
    fn fails(host: &str, _: u16) -> std::io::Result<Vec<SocketAddr>> {
        assert_eq!(host, "nohost.invalid");
        Err(std::io::Error::other(
            "failed to lookup address information: Name or service not known",
        ))
    }
    let store = HttpStore::builder(profile("test"))
        .endpoint("http://nohost.invalid:9000")
        .lookup(fails)
        .bucket("bkt")
        .credentials(Credentials::new("AKID", "SECRET"))
        .build()
        .unwrap();
    let e = store.get("k", soon()).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transport, "{e}");
    assert!(!e.may_have_landed(), "{e}");
    assert_eq!(
        e.to_string(),
        "GET test://bkt/k: not sent (could not look up nohost.invalid (for nohost.invalid:9000): failed \
         to lookup address information: Name or service not known; check the endpoint's host \
         name, or the region); nothing was sent, so the request took no effect and is safe to \
         retry"
    );
}

/// `localhost` and every name under it are the loopback addresses (RFC
/// 6761), answered without a lookup, as curl does: virtual-hosted
/// addressing against `http://localhost:PORT` reaches the local server
/// with the bucket in the `Host`, and no query leaves the machine.
#[test]
fn names_under_localhost_are_loopback_without_a_lookup() {
    use std::io::Write;
    fn never(host: &str, _: u16) -> std::io::Result<Vec<SocketAddr>> {
        panic!("{host} was looked up")
    }
    let (tx, hosts) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let url = raw_server(move |_, mut stream| {
        while let Some((head, _)) = read_request(&mut stream) {
            let host = head
                .lines()
                .find_map(|l| {
                    l.strip_prefix("host: ")
                        .or_else(|| l.strip_prefix("Host: "))
                })
                .map(str::to_string);
            let first = head.lines().next().map(str::to_string);
            tx.lock().unwrap().send((host, first)).unwrap();
            let answer = "HTTP/1.1 200 OK\r\nETag: \"v1\"\r\ncontent-length: 1\r\n\r\nx";
            stream.write_all(answer.as_bytes()).unwrap();
        }
    });
    let port = url.rsplit(':').next().unwrap();
    for (endpoint, host) in [
        (
            format!("http://localhost:{port}"),
            format!("bkt.localhost:{port}"),
        ),
        (
            format!("http://LocalHost:{port}"),
            format!("bkt.localhost:{port}"),
        ),
        (
            format!("http://s3.localhost:{port}"),
            format!("bkt.s3.localhost:{port}"),
        ),
    ] {
        let store = HttpStore::builder(profile("test"))
            .endpoint(&endpoint)
            .addressing(Addressing::VirtualHosted)
            .lookup(never)
            .bucket("bkt")
            .credentials(Credentials::new("AKID", "SECRET"))
            .build()
            .unwrap();
        store.get("k", soon()).unwrap();
        let (seen, line) = hosts.recv().unwrap();
        assert_eq!(seen.as_deref(), Some(host.as_str()), "{endpoint}");
        assert!(line.unwrap().starts_with("GET /k "), "{endpoint}");
    }
}

#[test]
fn https_to_a_plain_http_server_says_to_check_the_scheme() {
    use std::io::Write;
    let url = raw_server(|_, mut stream| {
        let mut hello = [0u8; 512];
        let _ = stream.read(&mut hello);
        let _ = stream.write_all(
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        );
    });
    let target = url.trim_start_matches("http://").to_string();
    let e = store(&format!("https://{target}"))
        .get("k", soon())
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transport, "{e}");
    assert!(!e.may_have_landed(), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "GET test://bkt/k: not sent (the TLS handshake with {target} failed: the server did not \
             answer in TLS (received corrupt message of type InvalidContentType); check http:// \
             vs https:// in the endpoint); nothing was sent, so the request took no effect and \
             is safe to retry"
        )
    );
}

/// A plain-HTTP server that waits, silent, for a request line (moto under
/// waitress does): the handshake times out, nothing was sent, and the
/// error says to check the scheme.
#[test]
fn https_to_a_silent_plain_http_server_says_to_check_the_scheme() {
    let url = raw_server(|_, mut stream| {
        let mut hello = [0u8; 512];
        let _ = stream.read(&mut hello);
        std::thread::sleep(Duration::from_secs(5));
    });
    let target = url.trim_start_matches("http://").to_string();
    let e = store(&format!("https://{target}"))
        .get("k", Some(Instant::now() + Duration::from_millis(500)))
        .unwrap_err();
    assert!(!e.may_have_landed(), "{e}");
    let text = e.to_string();
    assert!(text.starts_with("GET test://bkt/k: not sent"), "{text}");
    for part in [
        &format!("the TLS handshake with {target} failed"),
        "check http:// vs https:// in the endpoint",
        "safe to retry",
    ] {
        assert!(text.contains(part), "{part:?} missing from: {text}");
    }
}

#[test]
fn a_connection_closed_after_the_request_may_have_landed_and_an_answered_5xx_says_so() {
    use std::io::Write;
    let url = raw_server(|i, mut stream| {
        if read_request(&mut stream).is_none() {
            return;
        }
        if i == 0 {
            // Read, then hang up without an answer.
            return;
        }
        let body = "<Error><Code>InternalError</Code><Message>We encountered an internal \
                    error. Please try again.</Message><RequestId>R5</RequestId></Error>";
        let _ = stream.write_all(
            format!(
                "HTTP/1.1 500 Internal Server Error\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
    });
    let target = url.trim_start_matches("http://").to_string();
    let store = store(&url);
    let options = PutOptions::new(PutMode::Create).with_deadline(soon());
    let e = store.put("k", b"x", &options).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transport, "{e}");
    assert!(e.may_have_landed(), "{e}");
    let text = e.to_string();
    assert!(
        text.starts_with(&format!(
            "PUT test://bkt/k: no answer (sent to {target}, then: "
        )),
        "{text}"
    );
    assert!(
        text.ends_with(
            "; the request may have taken effect; check the endpoint and network, then retry"
        ),
        "{text}"
    );
    let e = store.put("k", b"x", &options).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Transport, "{e}");
    assert!(e.may_have_landed(), "{e}");
    assert_eq!(
        e.to_string(),
        "PUT test://bkt/k: service error (InternalError: We encountered an internal error. Please try \
         again.; request id R5); the service answered with an error: the request may or may \
         not have taken effect; retry later"
    );
}

/// Transient answers to reads are retried (a bounded number of times,
/// within the deadline); a write that was sent is never re-sent.
#[test]
fn transient_answers_to_reads_are_retried_and_sent_writes_are_not() {
    use std::io::Write;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let url = raw_server(move |_, mut stream| {
        while let Some((head, _)) = read_request(&mut stream) {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let answer = if head.starts_with("GET /bkt/flaky") && n % 3 == 2 {
                "HTTP/1.1 200 OK\r\nETag: \"v1\"\r\ncontent-length: 2\r\n\r\nok".to_string()
            } else {
                let body = "<Error><Code>SlowDown</Code><Message>Please reduce your request \
                            rate.</Message></Error>";
                format!(
                    "HTTP/1.1 503 Slow Down\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                )
            };
            stream.write_all(answer.as_bytes()).unwrap();
        }
    });
    let store = store(&url);
    // Two SlowDowns, then the object.
    assert_eq!(store.get("flaky", soon()).unwrap().body, b"ok");
    assert_eq!(seen.swap(0, Ordering::SeqCst), 3);
    // Always SlowDown: three attempts, then the last answer.
    let e = store.get("slow", soon()).unwrap_err();
    assert_eq!(e.code(), Some("SlowDown"), "{e}");
    assert_eq!(seen.swap(0, Ordering::SeqCst), 3);
    // Within the deadline, however short.
    let started = Instant::now();
    let _ = store.get("slow", Some(Instant::now() + Duration::from_millis(30)));
    assert!(started.elapsed() < Duration::from_millis(500));
    seen.store(0, Ordering::SeqCst);
    // A conditional write that reached the service is not re-sent.
    let e = store
        .put(
            "k",
            b"x",
            &PutOptions::new(PutMode::Create).with_deadline(soon()),
        )
        .unwrap_err();
    assert_eq!(e.code(), Some("SlowDown"), "{e}");
    assert_eq!(seen.load(Ordering::SeqCst), 1);
}

/// A source that answers after `delay`, with credentials that last an hour.
struct SlowSource {
    delay: Duration,
}

impl crate::credentials::Fetch for SlowSource {
    fn fetch(&self, deadline: Instant) -> Result<crate::credentials::Fetched, String> {
        std::thread::sleep(
            self.delay
                .min(deadline.saturating_duration_since(Instant::now())),
        );
        if Instant::now() >= deadline {
            return Err("no answer by the deadline".into());
        }
        Ok(crate::credentials::Fetched {
            credentials: Credentials::new("AKIDSLOW", "SECRET").with_session_token("T"),
            expires: Some(SystemTime::now() + Duration::from_secs(3600)),
        })
    }
}

/// The time spent waiting for credentials comes off the request's
/// timeout: a request whose credentials took 500 ms of its 800 ms still
/// ends by its deadline, although the server takes 1.5 s to answer. (With
/// the timeout taken before the wait, the call returned 500 ms late.)
#[test]
fn time_spent_on_credentials_comes_off_the_request_timeout() {
    use bucket_lease_core::store::DEADLINE_SLACK;
    use std::io::Write;
    let url = raw_server(move |_, mut stream| {
        while read_request(&mut stream).is_some() {
            std::thread::sleep(Duration::from_millis(1500));
            let _ =
                stream.write_all(b"HTTP/1.1 200 OK\r\nETag: \"v\"\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let provider = CredentialsProvider::fetching(
        crate::credentials::Source::Code,
        Box::new(SlowSource {
            delay: Duration::from_millis(500),
        }),
    );
    let store = HttpStore::builder(profile("test"))
        .endpoint(&url)
        .bucket("bkt")
        .credentials_provider(provider)
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_millis(800);
    let options = PutOptions::new(PutMode::Overwrite).with_deadline(Some(deadline));
    let e = store.put("k", b"x", &options).unwrap_err();
    let late = Instant::now().saturating_duration_since(deadline);
    assert!(e.is_timeout() && e.may_have_landed(), "{e}");
    assert!(
        late <= DEADLINE_SLACK,
        "the call returned {late:?} after its deadline: {e}"
    );
}

/// A server that refuses every quoted `If-Match` (Ceph RGW 16.2), a bare
/// one but the object's own and, when `bare_too`, that one too; the
/// object's ETag is `"e1"`, or `"e2"` from the second HEAD on when
/// `raced` (another writer got there first). It notes each request line.
fn refusing_quoted_etags(
    bare_too: bool,
    raced: bool,
) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::Write;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let heads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let url = raw_server(move |_, mut stream| {
        while let Some((head, _)) = read_request(&mut stream) {
            let lower = head.to_ascii_lowercase();
            let line = head.lines().next().unwrap_or_default().to_string();
            log.lock().unwrap().push(line.clone());
            let answer = if line.starts_with("HEAD") {
                let n = heads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if raced && n > 0 {
                    "HTTP/1.1 200 OK\r\nETag: \"e2\"\r\ncontent-length: 0\r\n\r\n"
                } else {
                    "HTTP/1.1 200 OK\r\nETag: \"e1\"\r\ncontent-length: 0\r\n\r\n"
                }
            } else if lower.contains("if-match: \"")
                || (lower.contains("if-match: ") && !lower.contains("if-match: e1\r"))
                || (bare_too && lower.contains("if-match: e1"))
            {
                "HTTP/1.1 412 Precondition Failed\r\ncontent-length: 0\r\n\r\n"
            } else {
                "HTTP/1.1 200 OK\r\nETag: \"e1\"\r\ncontent-length: 0\r\n\r\n"
            };
            if stream.write_all(answer.as_bytes()).is_err() {
                return;
            }
        }
    });
    (url, seen)
}

#[test]
fn a_service_that_refuses_a_right_quoted_etag_is_answered_in_the_bare_spelling() {
    let (url, seen) = refusing_quoted_etags(false, false);
    let store = store(&url);
    let update = PutOptions::new(PutMode::Update(Version::etag("\"e1\""))).with_deadline(soon());
    assert_eq!(store.condition_spelling(), 0);
    store
        .put("k", b"x", &update)
        .expect("accepted in the bare spelling");
    assert_eq!(store.condition_spelling(), 1, "one change, counted");
    assert_eq!(seen.lock().unwrap().len(), 3, "PUT, HEAD, PUT again");
    // Settled: a wrong ETag is refused with no question asked.
    let wrong = PutOptions::new(PutMode::Update(Version::etag("\"e9\""))).with_deadline(soon());
    store.put("k", b"x", &wrong).unwrap_err();
    store.put("k", b"x", &update).unwrap();
    assert_eq!(
        seen.lock().unwrap().len(),
        5,
        "one request each from now on"
    );
}

#[test]
fn a_service_that_refuses_both_spellings_keeps_the_first_and_its_refusal() {
    let (url, seen) = refusing_quoted_etags(true, false);
    let store = store(&url);
    let update = PutOptions::new(PutMode::Update(Version::etag("\"e1\""))).with_deadline(soon());
    let e = store.put("k", b"x", &update).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Precondition, "{e}");
    assert_eq!(
        seen.lock().unwrap().len(),
        4,
        "PUT, HEAD, PUT again, HEAD: still that ETag"
    );
    assert!(!store.spelling.bare(), "the quoted spelling stays");
    // A configured spelling is never questioned.
    let fixed = HttpStore::builder(profile("test"))
        .endpoint(&url)
        .bucket("bkt")
        .credentials(Credentials::new("AKID", "SECRET"))
        .unquoted_etags(false)
        .build()
        .unwrap();
    seen.lock().unwrap().clear();
    fixed.put("k", b"x", &update).unwrap_err();
    assert_eq!(seen.lock().unwrap().len(), 1, "no HEAD, no second spelling");
}

/// The second spelling's write refused because another writer changed the
/// object meanwhile (the second HEAD shows another ETag) is a lost race,
/// not a refusal of that spelling: the new spelling stays. (Switching back
/// let five racing writers on RGW keep one another in the refused quoted
/// spelling for 1000 tries.)
#[test]
fn a_second_spelling_that_lost_a_race_is_kept() {
    let (url, seen) = refusing_quoted_etags(true, true);
    let store = store(&url);
    let update = PutOptions::new(PutMode::Update(Version::etag("\"e1\""))).with_deadline(soon());
    let e = store.put("k", b"x", &update).unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Precondition, "{e}");
    assert_eq!(seen.lock().unwrap().len(), 4, "PUT, HEAD, PUT again, HEAD");
    assert!(store.spelling.bare(), "the bare spelling stays");
    assert_eq!(store.condition_spelling(), 1);
}

/// Every request shape the store sends (each op, with and without
/// conditions, metadata and a body, in both ETag spellings), for keys that
/// need S3's percent-encoding, on path-style and virtual-hosted endpoints
/// with and without a port, with and without a session token: signed
/// directly with the store's cached key, byte for byte as aws-sigv4's full
/// signer signs it.
#[test]
fn every_request_shape_is_signed_as_aws_sigv4_signs_it() {
    use crate::sign::{header_list, sign_request, sign_with_aws_sigv4};
    let plain = Credentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
    let temporary = plain
        .clone()
        .with_session_token("FwoGZXIvYXdzEJr//////////token+/=");
    let mut stores = Vec::new();
    for endpoint in [
        "http://127.0.0.1:9000",
        "https://storage.example.com:8443/s3/",
        "http://h:80",
        "https://h:443",
        "http://[::1]:9000",
    ] {
        for credentials in [&plain, &temporary] {
            stores.push(
                HttpStore::builder(profile("t"))
                    .endpoint(endpoint)
                    .bucket("lease-bucket")
                    .credentials(credentials.clone())
                    .build()
                    .unwrap(),
            );
        }
    }
    #[cfg(feature = "s3")]
    stores.push(
        crate::s3::builder()
            .region("us-west-2")
            .bucket("lease-bucket")
            .credentials(temporary.clone())
            .build()
            .unwrap(),
    );
    let keys = [
        "k",
        "jobs/nightly/LEASE",
        "a key/with spaces",
        "plus+sign",
        "tilde~and-dot._",
        "equals=sign&amp",
        "percent%41%2F",
        "slashes//run///of/",
        "/leading",
        "é/ü/日本語/😀",
        "question?mark#hash",
        "star*paren()!'quote\"",
        "colon:semi;comma,at@",
    ];
    let etags = [
        Version::etag("\"5d41402abc4b2a76b9719d911017c592\""),
        Version::etag("5d41402abc4b2a76b9719d911017c592-2"),
    ];
    let meta = vec![
        ("Owner".to_string(), "  host-7   pid-42 ".to_string()),
        ("epoch".to_string(), "12".to_string()),
        ("empty".to_string(), String::new()),
    ];
    let times = [
        UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        UNIX_EPOCH + Duration::from_secs(1_772_409_599),
        UNIX_EPOCH + Duration::from_secs(1_772_409_600),
    ];
    let mut count = 0;
    for store in &stores {
        let credentials = store.credentials.current().unwrap();
        for key in keys {
            for bare in [false, true] {
                let cases: Vec<Case> = vec![
                    (Op::Get, key, None, &[], b""),
                    (Op::Head, key, None, &[], b""),
                    (Op::Create, key, None, &meta, b"{\"holder\":1}"),
                    (Op::Create, key, None, &[], b""),
                    (Op::Update, key, Some(&etags[0]), &meta, b"x"),
                    (Op::Update, key, Some(&etags[1]), &[], b""),
                    (Op::Overwrite, key, None, &meta, b"body"),
                    (Op::Delete, key, None, &[], b""),
                    (Op::DeleteIfMatch, key, Some(&etags[0]), &[], b""),
                ];
                for (op, key, condition, metadata, body) in cases {
                    for time in times {
                        let unsigned = store
                            .request_spelled(op, key, condition, metadata, bare)
                            .unwrap();
                        let mut ours = copy(&unsigned);
                        sign_request(
                            &credentials,
                            &store.region,
                            &store.keys,
                            &mut ours,
                            body,
                            time,
                        )
                        .unwrap();
                        let mut theirs = copy(&unsigned);
                        sign_with_aws_sigv4(&credentials, &store.region, &mut theirs, body, time)
                            .unwrap();
                        assert_eq!(
                            header_list(&ours),
                            header_list(&theirs),
                            "{op:?} {}",
                            unsigned.uri()
                        );
                        // And through the store's own path.
                        let signed = store.signed(op, key, unsigned, body, time).unwrap();
                        assert_eq!(header_list(&signed), header_list(&theirs));
                        count += 1;
                    }
                }
            }
        }
    }
    assert!(count > 1000, "{count}");
}

/// `Date` as services send it, and what is not it.
#[test]
fn http_dates_read_to_the_second() {
    let at = |s: u64| Some(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
    assert_eq!(
        parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
        at(784_111_777)
    );
    assert_eq!(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"), at(0));
    assert_eq!(
        parse_http_date("Wed, 02 Dec 2026 07:30:00 GMT"),
        at(1_796_196_600)
    );
    assert_eq!(
        parse_http_date("Tue, 29 Feb 2028 23:59:59 GMT"),
        at(1_835_481_599)
    );
    for bad in [
        "",
        "Sun, 06 Nov 1994 08:49:37",
        "Sun, 06 Nov 1994 08:49:37 PST",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun, 06 Foo 1994 08:49:37 GMT",
        "Sun, 32 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:49:37 GMT",
        "Sun, 06 Nov 1994 08:49 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMT extra",
    ] {
        assert_eq!(parse_http_date(bad), None, "{bad:?}");
    }
}
