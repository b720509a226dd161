//! What the README's "Configuration" section promises about speaking to an
//! S3-compatible service, shown end to end: the built `bucket-lease`
//! command (and, where a single request is the point, the library) against
//! moto, nanio (which verifies SigV4 signatures) and Ceph RGW 16.2 (a real
//! service, which refuses a quoted `If-Match`), each behind the
//! fault-injecting proxy of `tests/s3_proxy`, which can answer for the
//! server, drop an answer, and refuses keys over S3's 1024-byte limit.
//!
//! Checked against each server: a custom endpoint is addressed path-style
//! (and `virtual` puts the bucket in the host name); transient answers to
//! reads are retried, up to three attempts; an acquire whose write is
//! throttled or loses its answer reads again and takes the lease; a
//! redirect or a refused signing region says which `AWS_REGION` to set; a
//! dropped answer, a refused connection and `https://` to a plain server
//! each say what happened and where; `%3F`, `%23`, `%40` in a prefix land
//! as `?`, `#`, `@` in the key; a prefix without room for the probe's key
//! (or bench's scratch keys) is refused before any request, and bench
//! removes its scratch lease even when it fails; an `r2://` URL with both
//! an endpoint and `R2_ACCOUNT_ID` uses the endpoint and warns.
//!
//! Start the servers with `scripts/test-servers.sh start` and source
//! `.ci/tmp/servers.env`; without them each test prints a note and passes,
//! unless `BUCKET_LEASE_REQUIRE_SERVERS=1`. The command runs with an empty
//! environment apart from what each test sets, a fresh `HOME` with no AWS
//! files, and instance metadata off: only loopback traffic.
#![cfg(feature = "s3")]

mod cli_common;
mod s3_proxy;

use bucket_lease::store::{PutMode, PutOptions};
use bucket_lease::{record::LeaseRecord, LeaseOptions, Store};
use cli_common::{finish, Done, CONFIG, STORE};
use s3_proxy::{Answer, FaultProxy, Outcome};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// How long one command of these tests may take: every one is bounded
/// far below this by its own deadlines.
const RUN_BOUND: std::time::Duration = std::time::Duration::from_secs(120);

/// A server of `scripts/test-servers.sh` and the keys it accepts.
struct Server {
    name: &'static str,
    url: String,
    access_key: String,
    secret_key: String,
    /// Whether it honours `If-None-Match` / `If-Match` on PUT (RGW with the
    /// ETag bare): nanio ignores both, so `run` is asked for a best-effort
    /// lease there.
    conditional: bool,
    /// Whether it refuses a quoted `If-Match` even when the ETag is right
    /// (RGW 16.2): a fresh process's first conditional write is refused,
    /// then sent bare.
    refuses_quoted_if_match: bool,
}

/// moto, nanio and Ceph RGW, each when configured. A missing one is
/// skipped with a note, or fails the test under
/// `BUCKET_LEASE_REQUIRE_SERVERS=1`.
fn servers(test: &str) -> Vec<Server> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mut found = Vec::new();
    for (name, url_var, keys) in [
        ("moto", "BUCKET_LEASE_TEST_MOTO_URL", None),
        (
            "nanio",
            "BUCKET_LEASE_TEST_NANIO_URL",
            Some((
                "BUCKET_LEASE_TEST_NANIO_ACCESS_KEY",
                "BUCKET_LEASE_TEST_NANIO_SECRET_KEY",
            )),
        ),
        (
            "rgw",
            "BUCKET_LEASE_TEST_RGW_URL",
            Some((
                "BUCKET_LEASE_TEST_RGW_ACCESS_KEY",
                "BUCKET_LEASE_TEST_RGW_SECRET_KEY",
            )),
        ),
    ] {
        let Some(url) = var(url_var) else {
            let note = format!(
                "{url_var} is not set: run scripts/test-servers.sh start and source \
                 .ci/tmp/servers.env"
            );
            assert!(
                std::env::var("BUCKET_LEASE_REQUIRE_SERVERS").as_deref() != Ok("1"),
                "{note}"
            );
            eprintln!("note: {test}: skipping {name}: {note}");
            continue;
        };
        let (access_key, secret_key) = match keys {
            None => ("test-key".to_string(), "test-secret".to_string()),
            Some((access, secret)) => (
                var(access).unwrap_or_else(|| panic!("{access} is not set")),
                var(secret).unwrap_or_else(|| panic!("{secret} is not set")),
            ),
        };
        found.push(Server {
            name,
            url,
            access_key,
            secret_key,
            conditional: name != "nanio",
            refuses_quoted_if_match: name == "rgw",
        });
    }
    found
}

fn bucket() -> String {
    std::env::var("BUCKET_LEASE_TEST_BUCKET").unwrap_or_else(|_| "bucket-lease-test".into())
}

/// A prefix no other test or earlier run uses.
fn unique(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("speak-{test}-{}-{nanos:x}", std::process::id())
}

/// The settings the command and the library see: the server's keys,
/// region `us-east-1`, an endpoint, and a fresh `HOME` with no AWS files.
struct Env {
    vars: Vec<(String, String)>,
    home: PathBuf,
}

impl Env {
    fn new(server: &Server, endpoint: &str) -> Env {
        let home = std::env::temp_dir().join(format!("bucket-lease-{}", unique("home")));
        std::fs::create_dir_all(&home).expect("a temporary HOME");
        let mut env = Env {
            vars: Vec::new(),
            home,
        };
        let home = env.home.display().to_string();
        env.set("HOME", &home);
        env.set("AWS_CONFIG_FILE", &format!("{home}/.aws/config"));
        env.set(
            "AWS_SHARED_CREDENTIALS_FILE",
            &format!("{home}/.aws/credentials"),
        );
        env.set("AWS_EC2_METADATA_DISABLED", "true");
        env.set("AWS_ACCESS_KEY_ID", &server.access_key);
        env.set("AWS_SECRET_ACCESS_KEY", &server.secret_key);
        env.set("AWS_REGION", "us-east-1");
        env.set("AWS_ENDPOINT_URL", endpoint);
        if !server.conditional {
            env.set("BUCKET_LEASE_CONDITIONAL", "off");
        }
        env
    }

    /// Set (or replace) `name`.
    fn set(&mut self, name: &str, value: &str) {
        self.vars.retain(|(n, _)| n != name);
        self.vars.push((name.to_string(), value.to_string()));
    }

    fn get(&self, name: &str) -> Option<String> {
        self.vars
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    /// `bucket-lease ARGS`, with these settings and `PATH` only.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_bucket-lease"));
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .args(args)
            .stdin(Stdio::null());
        command
    }

    /// `bucket-lease ARGS` to the end, which must come within
    /// [`RUN_BOUND`]: a command that hangs fails the test, showing what it
    /// had said, rather than holding the suite.
    fn run(&self, args: &[&str]) -> Done {
        let mut child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary runs");
        let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
            let (sent, received) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = pipe.read_to_end(&mut bytes);
                let _ = sent.send(bytes);
            });
            received
        };
        // The output ends soon after the command does, unless a process it
        // left holds the pipe: a failure too.
        let ended = |pipe: std::sync::mpsc::Receiver<Vec<u8>>, what: &str| {
            pipe.recv_timeout(std::time::Duration::from_secs(10))
                .unwrap_or_else(|_| {
                    panic!("bucket-lease {args:?} exited, but its {what} stayed open")
                })
        };
        let stdout = drain(Box::new(child.stdout.take().expect("piped")));
        let stderr = drain(Box::new(child.stderr.take().expect("piped")));
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("waiting for the binary") {
                break status;
            }
            if start.elapsed() > RUN_BOUND {
                let _ = child.kill();
                let _ = child.wait();
                let said = String::from_utf8_lossy(&ended(stderr, "stderr")).into_owned();
                panic!("bucket-lease {args:?} did not end within {RUN_BOUND:?}; it said:\n{said}");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        Done::from(std::process::Output {
            status,
            stdout: ended(stdout, "stdout"),
            stderr: ended(stderr, "stderr"),
        })
    }

    /// The store `url` names, opened by the library with these settings,
    /// and its prefix.
    fn store(&self, url: &str) -> (Arc<dyn Store>, String) {
        bucket_lease::backends::config::open_with_env(url, |name| self.get(name))
            .expect("the store opens")
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

/// A proxy in front of `server`, the settings pointing at it, and a prefix
/// of the test's own.
fn behind_a_proxy(server: &Server, test: &str) -> (FaultProxy, Env, String) {
    let proxy = FaultProxy::start(&server.url);
    let env = Env::new(server, &proxy.endpoint());
    (proxy, env, unique(test))
}

fn slow_down() -> Answer {
    Answer::error(503, "SlowDown", "Please reduce your request rate.", &[])
}

/// `done` ended with `code` and its stderr holds each of `parts`.
fn assert_fails(done: &Done, code: i32, parts: &[&str], context: &str) {
    assert_eq!(done.code, Some(code), "{context}: {done:?}");
    for part in parts {
        assert!(done.stderr.contains(part), "{context}: {part:?}: {done:?}");
    }
}

/// `run URL -- true` against `http://localhost:PORT` succeeds, and every
/// request reached the proxy path-style (`/bucket/prefix/LEASE`) with the
/// `Host` the endpoint names. With `BUCKET_LEASE_ADDRESSING_STYLE=virtual`
/// the bucket moves into the host name, `bucket.localhost`, which is
/// loopback without a lookup (RFC 6761): the requests reach the proxy
/// with that `Host` and the bare key as the path.
#[test]
fn a_custom_endpoint_is_path_style_and_virtual_puts_the_bucket_in_the_host() {
    for server in servers("addressing") {
        let (proxy, _, prefix) = behind_a_proxy(&server, "addressing");
        let port = proxy.port();
        let mut env = Env::new(&server, &format!("http://localhost:{port}"));
        let url = format!("s3://{}/{prefix}", bucket());
        let done = env.run(&["run", &url, "--", "true"]);
        assert_eq!(done.code, Some(0), "{}: {done:?}", server.name);
        let key_path = format!("/{}/{prefix}/LEASE", bucket());
        assert!(proxy.count("PUT", &key_path) >= 1, "{}", server.name);
        for seen in proxy.log() {
            assert_eq!(seen.host, format!("localhost:{port}"), "{}", server.name);
            assert!(
                seen.path.starts_with(&format!("/{}/{prefix}/", bucket())),
                "{}: {seen:?}",
                server.name
            );
        }

        let before = proxy.log().len();
        env.set("BUCKET_LEASE_ADDRESSING_STYLE", "virtual");
        let done = env.run(&["inspect", &url]);
        let host = format!("{}.localhost:{port}", bucket());
        let virtual_requests = &proxy.log()[before..];
        assert!(!virtual_requests.is_empty(), "{}: {done:?}", server.name);
        for seen in virtual_requests {
            assert_eq!(seen.host, host, "{}: {done:?}", server.name);
            assert!(
                seen.path.starts_with(&format!("/{prefix}/")),
                "{}: {seen:?}",
                server.name
            );
        }
        if server.name != "nanio" {
            // moto, and RGW (its `rgw dns name` is `localhost`), serve
            // virtual-hosted requests on `*.localhost`: the record written
            // path-style above is read back.
            assert_eq!(done.code, Some(0), "{done:?}");
            assert!(done.stdout.contains("last epoch 1"), "{done:?}");
        } else {
            // nanio takes the first path segment for the bucket.
            assert_fails(&done, CONFIG, &["NoSuchBucket"], server.name);
        }
    }
}

/// Two `503 SlowDown` answers to the GET of the record: `inspect` still
/// succeeds, on the third GET. Three: `inspect` exits 69 naming the
/// service's error, after exactly three GETs (no fourth).
#[test]
fn two_slow_downs_on_a_read_are_retried_and_a_third_is_reported() {
    for server in servers("slow-down") {
        let (proxy, env, prefix) = behind_a_proxy(&server, "slow-down");
        let url = format!("s3://{}/{prefix}", bucket());
        let key_path = format!("/{prefix}/LEASE");
        proxy.inject("GET", &key_path, 2, slow_down());
        let done = env.run(&["inspect", &url]);
        assert_eq!(done.code, Some(0), "{}: {done:?}", server.name);
        assert!(done.stdout.contains("free"), "{}: {done:?}", server.name);
        assert_eq!(proxy.count("GET", &key_path), 3, "{}", server.name);
        assert_eq!(
            proxy.count_outcome("GET", &key_path, Outcome::Forwarded),
            1,
            "{}",
            server.name
        );

        proxy.inject("GET", &key_path, 3, slow_down());
        let done = env.run(&["inspect", &url]);
        assert_fails(
            &done,
            STORE,
            &[&format!("GET {url}/LEASE"), "service error (SlowDown"],
            server.name,
        );
        assert_eq!(proxy.count("GET", &key_path), 6, "{}", server.name);
    }
}

/// Two `500 InternalError` answers to the GET `run` reads the record with
/// while acquiring: the lease is still taken and the command run.
#[test]
fn internal_errors_on_the_acquire_read_are_retried() {
    for server in servers("internal-error") {
        let (proxy, env, prefix) = behind_a_proxy(&server, "internal-error");
        let url = format!("s3://{}/{prefix}", bucket());
        let key_path = format!("/{prefix}/LEASE");
        let error = Answer::error(
            500,
            "InternalError",
            "We encountered an internal error.",
            &[],
        );
        proxy.inject("GET", &key_path, 2, error);
        let done = env.run(&["run", &url, "--", "true"]);
        assert_eq!(done.code, Some(0), "{}: {done:?}", server.name);
        assert_eq!(
            proxy.count_outcome("GET", &key_path, Outcome::Injected(500)),
            2,
            "{}: both faults were met",
            server.name
        );
        assert!(proxy.count("PUT", &key_path) >= 1, "{}", server.name);
    }
}

/// The library's `get` through the proxy: two `503 SlowDown` answers, then
/// the object, read on the third attempt.
#[test]
fn the_library_get_retries_two_slow_downs() {
    for server in servers("library-get") {
        let (proxy, env, prefix) = behind_a_proxy(&server, "library-get");
        let (store, prefix) = env.store(&format!("s3://{}/{prefix}", bucket()));
        let key = format!("{prefix}/object");
        store
            .put(&key, b"body", &PutOptions::new(PutMode::Overwrite))
            .unwrap_or_else(|e| panic!("{}: {e}", server.name));
        proxy.inject("GET", &key, 2, slow_down());
        let object = store
            .get(&key, None)
            .unwrap_or_else(|e| panic!("{}: {e}", server.name));
        assert_eq!(object.body, b"body", "{}", server.name);
        assert_eq!(proxy.count("GET", &key), 3, "{}", server.name);
    }
}

/// A `301 PermanentRedirect` naming the bucket's region in
/// `x-amz-bucket-region` (and an `<Endpoint>`), and a `400
/// AuthorizationHeaderMalformed` naming it in `<Region>`: `inspect` exits 69
/// at once (one GET, not retried) saying to set `AWS_REGION=eu-west-1`.
#[test]
fn a_redirect_or_a_refused_signing_region_names_the_region_to_set() {
    for server in servers("region") {
        let (proxy, env, prefix) = behind_a_proxy(&server, "region");
        let url = format!("s3://{}/{prefix}", bucket());
        let key_path = format!("/{prefix}/LEASE");
        let redirect = Answer::error(
            301,
            "PermanentRedirect",
            "The bucket you are attempting to access must be addressed using the specified \
             endpoint.",
            &[("Endpoint", "s3.eu-west-1.amazonaws.com")],
        )
        .header("x-amz-bucket-region", "eu-west-1");
        let malformed = Answer::error(
            400,
            "AuthorizationHeaderMalformed",
            "The authorization header is malformed; the region 'us-east-1' is wrong; \
             expecting 'eu-west-1'",
            &[("Region", "eu-west-1")],
        );
        for (n, (answer, code)) in [
            (redirect, "PermanentRedirect"),
            (malformed, "AuthorizationHeaderMalformed"),
        ]
        .into_iter()
        .enumerate()
        {
            proxy.inject("GET", &key_path, 1, answer);
            let done = env.run(&["inspect", &url]);
            let context = format!("{}: {code}", server.name);
            assert_fails(&done, STORE, &[code, "AWS_REGION=eu-west-1"], &context);
            assert_eq!(proxy.count("GET", &key_path), n + 1, "{context}");
        }
    }
}

/// The proxy forwards a `break`'s PUT and drops its answer: `break` reads
/// the record back, finds its own and reports the break (exit 0), with
/// one PUT only (on RGW the answer lost is the bare PUT's, after the
/// quoted one was refused: two); the record is broken. The library's `put`, which has no
/// record to read back, says the request was sent to the proxy's
/// `host:port` with no answer and may have taken effect; and it did.
#[test]
fn a_write_whose_answer_is_lost_is_read_back_or_said_to_have_maybe_landed() {
    for server in servers("dropped") {
        let (proxy, env, prefix) = behind_a_proxy(&server, "dropped");
        let direct = Env::new(&server, &server.url);
        let url = format!("s3://{}/{prefix}", bucket());
        let holder = direct
            .command(&["run", "--ttl", "30", &url, "--", "sleep", "30"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the holder starts");
        let inspect = |env: &Env| {
            let done = env.run(&["inspect", "--json", &url]);
            assert_eq!(done.code, Some(0), "{}: {done:?}", server.name);
            serde_json::from_str::<serde_json::Value>(&done.stdout).expect("JSON")
        };
        let mut seen = inspect(&direct);
        for _ in 0..250 {
            if seen["state"] == "held" {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            seen = inspect(&direct);
        }
        assert_eq!(seen["state"], "held", "{}: {seen}", server.name);
        let id = seen["holder"].as_str().expect("a holder").to_string();

        let key_path = format!("/{prefix}/LEASE");
        let puts = if server.refuses_quoted_if_match {
            // The quoted PUT is refused (412, seen); the bare one after
            // the HEAD lands and loses its answer.
            proxy.pass("PUT", &key_path, 1);
            2
        } else {
            1
        };
        proxy.drop_answer("PUT", &key_path, 1);
        let done = env.run(&["break", "--holder", &id, &url]);
        let target = format!("127.0.0.1:{}", proxy.port());
        assert_eq!(done.code, Some(0), "{}: {done:?}", server.name);
        assert!(done.stdout.starts_with("broke lease"), "{done:?}");
        assert_eq!(
            proxy.count_outcome("PUT", &key_path, Outcome::Dropped),
            1,
            "{}",
            server.name
        );
        assert_eq!(proxy.count("PUT", &key_path), puts, "{}", server.name);
        assert_eq!(inspect(&direct)["broken"], true, "{}", server.name);
        let mut holder = holder;
        let _ = holder.kill();
        finish(holder, std::time::Duration::from_secs(10));

        let (store, prefix) = env.store(&url);
        let key = format!("{prefix}/object");
        proxy.drop_answer("PUT", &key, 1);
        let e = store
            .put(&key, b"landed", &PutOptions::new(PutMode::Overwrite))
            .expect_err("no answer");
        let text = e.to_string();
        for part in [&format!("sent to {target}, then"), "may have taken effect"] {
            assert!(text.contains(part), "{}: {part}: {text}", server.name);
        }
        let (direct_store, _) = direct.store(&url);
        assert_eq!(
            direct_store.get(&key, None).expect("it landed").body,
            b"landed",
            "{}",
            server.name
        );
    }
}

/// A port nobody listens on: "not sent", naming `127.0.0.1:PORT`. And
/// `https://` to the proxy (plain HTTP, in front of each server): not
/// sent, naming its `host:port` and saying to check http:// vs https://.
#[test]
fn a_refused_connection_and_https_to_plain_http_say_not_sent_and_where() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = listener.local_addr().unwrap().to_string();
    drop(listener);
    for server in servers("not-sent") {
        let url = format!("s3://{}/{}", bucket(), unique("not-sent"));
        let env = Env::new(&server, &format!("http://{closed}"));
        let done = env.run(&["inspect", &url]);
        assert_fails(
            &done,
            STORE,
            &["not sent", &format!("could not connect to {closed}")],
            server.name,
        );
        assert!(!done.stderr.contains("may have taken effect"), "{done:?}");

        let proxy = FaultProxy::start(&server.url);
        let target = format!("127.0.0.1:{}", proxy.port());
        let env = Env::new(&server, &format!("https://{target}"));
        let done = env.run(&["inspect", &url]);
        assert_fails(
            &done,
            STORE,
            &[
                "not sent",
                &format!("the TLS handshake with {target} failed"),
                "check http:// vs https://",
            ],
            server.name,
        );
        assert!(
            proxy.log().iter().all(|s| s.outcome == Outcome::NotHttp),
            "{}: {:?}",
            server.name,
            proxy.log()
        );
    }
}

/// The prefix `jobs%3Fnightly%23x%40y` is the prefix `jobs?nightly#x@y`:
/// `run` sends its record's key with the `?` escaped (the proxy finds no
/// query, and the decoded path ends in `jobs?nightly#x@y/LEASE`), and the
/// record is read back at that key without the proxy. On nanio the file in
/// its data directory has that name. moto cannot show more: behind
/// waitress it cuts every key at a decoded `?` (it stores `.../jobs`,
/// whoever sends the request), so there the read-back only shows the
/// round trip.
#[test]
fn escaped_characters_in_a_prefix_land_decoded_in_the_key() {
    for server in servers("escaped") {
        let (proxy, env, prefix) = behind_a_proxy(&server, "escaped");
        let url = format!("s3://{}/{prefix}/jobs%3Fnightly%23x%40y", bucket());
        let done = env.run(&["run", &url, "--", "true"]);
        assert_eq!(done.code, Some(0), "{}: {done:?}", server.name);
        let key = format!("{prefix}/jobs?nightly#x@y/LEASE");
        let key_path = format!("/{}/{key}", bucket());
        let puts: Vec<_> = proxy
            .log()
            .into_iter()
            .filter(|s| s.method == "PUT" && s.path == key_path)
            .collect();
        assert!(!puts.is_empty(), "{}: {:?}", server.name, proxy.log());
        assert!(puts.iter().all(|s| s.query.is_empty()), "{puts:?}");

        let (direct, _) = Env::new(&server, &server.url).store(&url);
        let object = direct
            .get(&key, None)
            .unwrap_or_else(|e| panic!("{}: {e}", server.name));
        let record = LeaseRecord::parse(&object.body).expect("a lease record");
        assert!(record.is_released(), "{}: {record:?}", server.name);
        if server.name == "nanio" {
            if let Ok(data) = std::env::var("BUCKET_LEASE_TEST_NANIO_DATA") {
                let file = PathBuf::from(data).join(bucket()).join(&key);
                assert!(file.is_file(), "{} is not there", file.display());
            }
        }
    }
}

/// A prefix of `bytes` bytes starting with `base`, in parts under 255
/// bytes (nanio keeps each part as a file name).
fn prefix_of(base: &str, bytes: usize) -> String {
    let mut p = format!("{base}-{bytes}");
    while p.len() < bytes {
        let part = (bytes - p.len() - 1).min(200);
        p.push('/');
        p.push_str(&"k".repeat(part));
    }
    assert_eq!(p.len(), bytes);
    p
}

/// S3 takes keys of at most 1024 bytes, and the acquire's probe writes a
/// key 39 bytes longer than `{prefix}/LEASE`. The longest prefix allowed,
/// 979 bytes, takes the lease with no key refused (its probe key is
/// exactly 1024 bytes where the lease is conditional); 980 bytes, and a
/// prefix whose lease key alone is 1024 bytes, are refused when the store
/// is configured (exit 78) naming the limit and the longest prefix, and no
/// request for them reaches the proxy.
#[test]
fn key_limit_a_prefix_without_room_for_the_probe_key_is_refused_before_any_request() {
    for server in servers("key-limit") {
        let (proxy, env, prefix) = behind_a_proxy(&server, "key-limit");
        let fits = prefix_of(&prefix, 979);
        let done = env.run(&["run", &format!("s3://{}/{fits}", bucket()), "--", "true"]);
        let context = format!("{}: a 979-byte prefix", server.name);
        assert_eq!(done.code, Some(0), "{context}: {done:?}");
        let log = proxy.log();
        assert!(
            log.iter().all(|s| s.outcome != Outcome::KeyTooLong),
            "{context}: {log:?}"
        );
        let longest = log
            .iter()
            .map(|s| s.path.len() - format!("/{}/", bucket()).len())
            .max()
            .unwrap();
        let expected = if server.conditional { 1024 } else { 985 };
        assert_eq!(longest, expected, "{context}: {log:?}");
        for bytes in [980, 1024 - "/LEASE".len()] {
            let too_long = prefix_of(&prefix, bytes);
            let url = format!("s3://{}/{too_long}", bucket());
            let done = env.run(&["run", &url, "--", "true"]);
            let context = format!("{}: a {bytes}-byte prefix", server.name);
            assert_fails(
                &done,
                CONFIG,
                &[
                    &format!("is a prefix of {bytes} bytes"),
                    "1024 bytes",
                    "at most 979 bytes",
                ],
                &context,
            );
            assert_eq!(proxy.count("", &too_long[..100]), 0, "{context}");
        }
    }
}

/// `bench` works under a scratch prefix 15 bytes longer than the URL's: a
/// 964-byte prefix benches (every key fits, and the scratch lease is gone
/// afterwards), a 965-byte one is refused before anything is created.
#[test]
fn key_limit_bench_needs_room_for_its_scratch_prefix_and_leaves_nothing() {
    for server in servers("bench-limit") {
        let (proxy, env, prefix) = behind_a_proxy(&server, "bench-limit");
        let fits = prefix_of(&prefix, 964);
        let url = format!("s3://{}/{fits}", bucket());
        let done = env.run(&["bench", "--iters", "2", "--renewals", "2", "-q", &url]);
        let context = format!("{}: bench on a 964-byte prefix", server.name);
        assert_eq!(done.code, Some(0), "{context}: {done:?}");
        let log = proxy.log();
        assert!(
            log.iter().all(|s| s.outcome != Outcome::KeyTooLong),
            "{context}: {log:?}"
        );
        assert_scratch_removed(&env, &proxy, &context);

        let too_long = prefix_of(&prefix, 965);
        let url = format!("s3://{}/{too_long}", bucket());
        let done = env.run(&["bench", "--iters", "1", &url]);
        let context = format!("{}: bench on a 965-byte prefix", server.name);
        assert_fails(
            &done,
            CONFIG,
            &["at most 964 bytes", "nothing was created"],
            &context,
        );
        assert_eq!(proxy.count("", &too_long[..100]), 0, "{context}");
    }
}

/// The scratch `LEASE` the proxy saw `bench` write is gone when read back
/// (no rule left on the proxy).
fn assert_scratch_removed(env: &Env, proxy: &FaultProxy, context: &str) {
    let written: Vec<String> = proxy
        .log()
        .into_iter()
        .filter(|s| s.method == "PUT" && s.path.ends_with("/LEASE") && s.path.contains("/bench-"))
        .map(|s| s.path)
        .collect();
    assert!(!written.is_empty(), "{context}: no scratch lease written");
    let bucket_path = format!("/{}/", bucket());
    let key = written[0].strip_prefix(&bucket_path).unwrap().to_string();
    let (store, _) = env.store(&format!("s3://{}/x", bucket()));
    let err = store
        .get(&key, None)
        .expect_err("the scratch lease is removed");
    assert_eq!(
        err.kind(),
        bucket_lease::store::StoreErrorKind::NotFound,
        "{context}: {err}"
    );
}

/// A bench whose renewals are throttled past its retries fails (exit 69,
/// naming `SlowDown`) and still removes its scratch lease.
#[test]
fn a_failed_bench_removes_its_scratch_lease() {
    for server in servers("bench-fails") {
        let (proxy, env, prefix) = behind_a_proxy(&server, "bench-fails");
        // The acquire's write and the probe's pass; every later PUT of a
        // scratch LEASE is throttled.
        proxy.pass("PUT", "/bench-", if server.conditional { 4 } else { 1 });
        proxy.inject("PUT", "/bench-", 1000, slow_down());
        let url = format!("s3://{}/{prefix}", bucket());
        let done = env.run(&["bench", "--iters", "3", "--renewals", "3", "-q", &url]);
        let context = format!("{}: a throttled bench", server.name);
        assert_fails(&done, STORE, &["SlowDown"], &context);
        proxy.clear();
        assert_scratch_removed(&env, &proxy, &context);
    }
}

/// `run` without `--wait` whose acquire write is throttled twice: the
/// lease reads again and takes it on the third write (exit 0, and the
/// record is released afterwards); throttled three times, `run` fails
/// with exit 69 naming `SlowDown`, and the key is still free.
#[test]
fn a_throttled_acquire_write_is_decided_again_by_reading() {
    for server in servers("acquire-503") {
        let (proxy, env, prefix) = behind_a_proxy(&server, "acquire-503");
        let url = format!("s3://{}/{prefix}", bucket());
        proxy.inject("PUT", &format!("{prefix}/LEASE"), 2, slow_down());
        let done = env.run(&["run", &url, "--", "true"]);
        let context = format!("{}: two throttled writes", server.name);
        assert_eq!(done.code, Some(0), "{context}: {done:?}");
        assert_eq!(
            proxy.count_outcome("PUT", &format!("{prefix}/LEASE"), Outcome::Injected(503)),
            2,
            "{context}"
        );
        let (store, _) = env.store(&url);
        let key = format!("{prefix}/LEASE");
        let record = LeaseRecord::parse(&store.get(&key, None).unwrap().body).unwrap();
        assert!(record.is_released(), "{context}: {record:?}");

        let again = format!("{prefix}-again");
        let url = format!("s3://{}/{again}", bucket());
        proxy.inject("PUT", &format!("{again}/LEASE"), 3, slow_down());
        let done = env.run(&["run", &url, "--", "true"]);
        let context = format!("{}: three throttled writes", server.name);
        assert_fails(
            &done,
            STORE,
            &["SlowDown", &format!("{again}/LEASE")],
            &context,
        );
        let gets = proxy.count("GET", &format!("{again}/LEASE"));
        assert!(gets >= 3, "{context}: read before each write: {gets}");
    }
}

/// The create lands but its answer is dropped: `run` reads its own record
/// back, takes it at epoch 1 and runs the command (before, it exited 69
/// and left a record naming it until its TTL ran out).
#[test]
fn a_create_whose_answer_is_dropped_is_taken_back() {
    for server in servers("acquire-dropped") {
        let (proxy, env, prefix) = behind_a_proxy(&server, "acquire-dropped");
        let url = format!("s3://{}/{prefix}", bucket());
        proxy.drop_answer("PUT", &format!("{prefix}/LEASE"), 1);
        let done = env.run(&["run", &url, "--", "true"]);
        let context = format!("{}: a dropped create answer", server.name);
        assert_eq!(done.code, Some(0), "{context}: {done:?}");
        assert_eq!(
            proxy.count_outcome("PUT", &format!("{prefix}/LEASE"), Outcome::Dropped),
            1,
            "{context}"
        );
        let (store, _) = env.store(&url);
        let record =
            LeaseRecord::parse(&store.get(&format!("{prefix}/LEASE"), None).unwrap().body).unwrap();
        assert!(record.is_released(), "{context}: {record:?}");
        assert_eq!(
            record.epoch, 1,
            "{context}: taking back our own is no takeover"
        );
    }
}

/// `r2://bucket/prefix` with both `AWS_ENDPOINT_URL` (the proxy) and
/// `R2_ACCOUNT_ID`: the endpoint wins, with a warning naming both; the
/// lease is taken through the proxy, path-style.
#[cfg(feature = "r2")]
#[test]
fn r2_with_an_endpoint_and_an_account_id_uses_the_endpoint_and_warns() {
    for server in servers("r2") {
        let (proxy, mut env, prefix) = behind_a_proxy(&server, "r2");
        env.set("R2_ACCOUNT_ID", "0123456789abcdef");
        let url = format!("r2://{}/{prefix}", bucket());
        let done = env.run(&["run", &url, "--", "true"]);
        assert_eq!(done.code, Some(0), "{}: {done:?}", server.name);
        assert!(
            done.stderr
                .contains("and R2_ACCOUNT_ID are set: the endpoint wins"),
            "{}: {done:?}",
            server.name
        );
        let key_path = format!("/{}/{prefix}/LEASE", bucket());
        assert!(proxy.count("PUT", &key_path) >= 1, "{}", server.name);
    }
}

/// A service that refuses every quoted `If-Match`, a right ETag too (Ceph
/// RGW 16.2), behind the proxy. With no setting, the store learns the bare
/// spelling from the first refusal of a right ETag, and `run` works twice
/// in a row (the second takes over the first's released record), as do
/// `inspect` and `break`, with one warning saying what was learned. With
/// the quoted spelling fixed (`BUCKET_LEASE_UNQUOTED_ETAGS=off`) the probe
/// finds the right ETag refused and `run` fails before the command starts
/// (before the probe checked it, the command started and its first renewal
/// was taken for a lost lease, exit 76).
#[test]
fn a_service_that_refuses_quoted_etags_is_learned_or_caught_by_the_probe() {
    for server in servers("quoted-etags")
        .into_iter()
        .filter(|s| s.conditional)
    {
        let (proxy, mut env, prefix) = behind_a_proxy(&server, "quoted-etags");
        proxy.refuse_quoted_if_match();
        let url = format!("s3://{}/{prefix}", bucket());
        for round in 1..=2 {
            let done = env.run(&["run", "--ttl", "3", &url, "--", "sleep", "2"]);
            let context = format!("{}: quoted ETags refused, run {round}", server.name);
            eprintln!("{context}: exit {:?}, said: {}", done.code, done.stderr);
            assert_eq!(done.code, Some(0), "{context}: {done:?}");
            assert!(
                done.stderr.contains("sent that way from now on"),
                "{context}: the warning says what was learned: {done:?}"
            );
        }
        let done = env.run(&["inspect", &url]);
        assert_eq!(done.code, Some(0), "{}: inspect: {done:?}", server.name);
        // A live holder (the library, through the same proxy), broken by
        // the command.
        let (store, lease_prefix) = env.store(&url);
        let lease = bucket_lease::Lease::acquire(store, &lease_prefix, LeaseOptions::new(30))
            .expect("the library learns the spelling too");
        let done = env.run(&["break", "--holder", lease.instance_id(), &url]);
        assert_eq!(done.code, Some(0), "{}: break: {done:?}", server.name);
        assert!(lease.renew().is_err(), "{}: broken", server.name);

        env.set("BUCKET_LEASE_UNQUOTED_ETAGS", "off");
        let fixed = format!("s3://{}/{prefix}-quoted", bucket());
        let done = env.run(&["run", "--ttl", "3", &fixed, "--", "sleep", "2"]);
        assert_fails(
            &done,
            STORE,
            &["own ETag", "BUCKET_LEASE_UNQUOTED_ETAGS"],
            &format!("{}: quoted spelling fixed", server.name),
        );
    }
}
