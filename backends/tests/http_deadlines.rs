//! The deadline rule on the HTTP store, against loopback servers that make
//! it slow: a credentials source that hangs, a connection that is never
//! accepted, a TLS handshake that never ends, a retried read with no
//! deadline of its own. Each server notes when requests reach it, so the tests prove when bytes
//! arrived relative to the deadline, not only when the call returned.
#![cfg(feature = "minio")]

mod common;

use bucket_lease_backends::credentials::chain_with_env;
use bucket_lease_backends::{minio, Credentials, HttpStore};
use bucket_lease_core::conformance::{self, Arrivals};
use bucket_lease_core::store::{Delivery, Store, StoreErrorKind, DEADLINE_SLACK};
use common::canned::{Canned, Reply};
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A directory of the test's own, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let random = u64::from(std::process::id()) << 32 ^ u64::from(rand_u32());
        let dir = std::env::temp_dir().join(format!("bucket-lease-{name}-{random:x}"));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rand_u32() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    nanos ^ std::process::id().rotate_left(16)
}

/// What a [`Canned`] server saw: the instants its requests arrived.
struct SeenBy<'a>(&'a Canned, Mutex<usize>);

impl Arrivals for SeenBy<'_> {
    fn take(&self) -> Vec<Instant> {
        let seen = self.0.seen();
        let mut taken = self.1.lock().unwrap();
        let new = seen[*taken..].iter().map(|s| s.at).collect();
        *taken = seen.len();
        new
    }
}

/// A server that answers every request at once: an object for a read, a
/// new version for a write.
fn answering_at_once() -> Canned {
    Canned::answering(|seen| match seen.method.as_str() {
        "GET" => Reply::status(200)
            .header("etag", "\"e1\"")
            .body(b"object".to_vec()),
        // An answer to HEAD has no body.
        "HEAD" => Reply::status(200).header("etag", "\"e1\""),
        "DELETE" => Reply::status(204),
        _ => Reply::status(200).header("etag", "\"e2\""),
    })
}

/// A `credential_process` script whose first run prints credentials that
/// expire `lifetime_s` from then and whose later runs hang for 30 s; a
/// store on `endpoint` using it, through the chain as a user configures it.
fn store_with_hanging_source(dir: &Path, endpoint: &str, lifetime_s: u32) -> HttpStore {
    let script = dir.join("credentials.sh");
    let ran = dir.join("ran");
    std::fs::write(
        &script,
        format!(
            "if [ -e {ran} ]; then sleep 30 </dev/null >/dev/null 2>&1; exit 1; fi\n\
             touch {ran}\n\
             printf '{{\"Version\":1,\"AccessKeyId\":\"AKIDPROC\",\"SecretAccessKey\":\"s\",\
             \"SessionToken\":\"t\",\"Expiration\":\"%s\"}}' \
             \"$(date -u -d '+{lifetime_s} seconds' +%Y-%m-%dT%H:%M:%SZ)\"\n",
            ran = ran.display()
        ),
    )
    .unwrap();
    let config = dir.join("config");
    std::fs::write(
        &config,
        format!("[default]\ncredential_process = sh {}\n", script.display()),
    )
    .unwrap();
    let vars = [
        ("HOME", dir.display().to_string()),
        ("AWS_CONFIG_FILE", config.display().to_string()),
        (
            "AWS_SHARED_CREDENTIALS_FILE",
            dir.join("none").display().to_string(),
        ),
        ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
    ];
    let env = move |name: &str| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    };
    let provider = chain_with_env(&env).expect("the first run of the script gives credentials");
    minio::builder()
        .endpoint(endpoint)
        .bucket("bucket")
        .credentials_provider(provider)
        .build()
        .unwrap()
}

/// The issue's first schedule, at the store: credentials inside their
/// refresh window (they expire in 60 s, the window is 5 min) and a source
/// that hangs. Each request must go out with the valid credentials at once,
/// never wait on the source, and never leave after its deadline.
#[test]
fn valid_credentials_sign_at_once_while_the_source_hangs() {
    let dir = TempDir::new("hanging-source");
    let server = answering_at_once();
    let store = store_with_hanging_source(&dir.0, &server.url(), 60);
    let outcomes = conformance::deadline_kept(
        &store,
        "p",
        Duration::from_millis(500),
        &SeenBy(&server, Mutex::new(0)),
    );
    for (what, outcome) in outcomes {
        if let Err(e) = outcome {
            panic!("{what} waited on the credentials source instead of signing: {e}");
        }
    }
}

/// Credentials that have expired, and a source that hangs: nothing valid
/// to sign with, so each request waits for the source until its own
/// deadline and no later, and nothing is sent.
#[test]
fn expired_credentials_and_a_hanging_source_wait_only_until_the_deadline() {
    let dir = TempDir::new("expired-source");
    let server = answering_at_once();
    let store = store_with_hanging_source(&dir.0, &server.url(), 2);
    while store
        .credentials_expire()
        .is_some_and(|at| std::time::SystemTime::now() <= at)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let outcomes = conformance::deadline_kept(
        &store,
        "p",
        Duration::from_millis(300),
        &SeenBy(&server, Mutex::new(0)),
    );
    for (what, outcome) in outcomes {
        let e = outcome.expect_err("nothing valid to sign with");
        assert_eq!(e.delivery(), Delivery::NotSent, "{what}: {e}");
        assert_eq!(e.code(), Some("CredentialsUnavailable"), "{what}: {e}");
    }
    assert!(server.seen().is_empty(), "nothing may be sent");
}

/// A listener that never accepts and whose queue is full: a connection to
/// it is black-holed (its SYN dropped), as behind a firewall that drops.
fn black_hole() -> (SocketAddr, Vec<TcpStream>) {
    use rustix::net::{bind, listen, socket, AddressFamily, SocketType};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    bind(&fd, &any).unwrap();
    listen(&fd, 0).unwrap();
    let listener = TcpListener::from(fd);
    let addr = listener.local_addr().unwrap();
    // Fill the accept queue; later connections wait for a SYN-ACK that
    // never comes. Kept open (and the listener leaked) for the test.
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            fillers.push(s);
        }
    }
    std::mem::forget(listener);
    (addr, fillers)
}

#[test]
fn a_black_holed_connection_gives_up_by_the_deadline() {
    let (addr, _fillers) = black_hole();
    // The hole is real: a plain connection attempt hangs.
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_err(),
        "the listener's queue is not full"
    );
    let store = minio::builder()
        .endpoint(format!("http://{addr}"))
        .bucket("bucket")
        .credentials(Credentials::new("k", "s"))
        .build()
        .unwrap();
    let outcomes = conformance::deadline_kept(
        &store,
        "p",
        Duration::from_millis(400),
        &conformance::NoWire,
    );
    for (what, outcome) in outcomes {
        let e = outcome.expect_err("nothing answers");
        assert_eq!(e.delivery(), Delivery::NotSent, "{what}: {e}");
        assert!(e.is_timeout(), "{what}: {e}");
    }
}

/// A server that accepts, reads whatever comes and never answers: an
/// HTTPS client's handshake stalls at its ClientHello.
struct Silent {
    addr: SocketAddr,
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl Silent {
    fn start() -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&arrivals);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let seen = Arc::clone(&seen);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = stream.read(&mut buf) {
                        if n == 0 {
                            return;
                        }
                        seen.lock().unwrap().push(Instant::now());
                    }
                });
            }
        });
        Silent { addr, arrivals }
    }
}

impl Arrivals for Silent {
    fn take(&self) -> Vec<Instant> {
        std::mem::take(&mut *self.arrivals.lock().unwrap())
    }
}

#[test]
fn a_stalled_tls_handshake_gives_up_by_the_deadline() {
    let server = Silent::start();
    let store = minio::builder()
        .endpoint(format!("https://{}", server.addr))
        .bucket("bucket")
        .credentials(Credentials::new("k", "s"))
        .build()
        .unwrap();
    let outcomes = conformance::deadline_kept(&store, "p", Duration::from_millis(400), &server);
    for (what, outcome) in outcomes {
        let e = outcome.expect_err("the handshake never ends");
        assert_eq!(e.delivery(), Delivery::NotSent, "{what}: {e}");
        assert!(e.is_timeout(), "{what}: {e}");
    }
}

/// A call with no deadline is bounded once, by the store's timeout, not
/// once per attempt: a read answered 503 after 600 ms is retried only
/// within the one second the whole call has.
#[test]
fn a_call_without_a_deadline_is_bounded_as_a_whole() {
    let server = Canned::answering(|_| {
        let mut reply = Reply::error(503, "SlowDown", "Please reduce your request rate.", "r");
        reply.delay = Duration::from_millis(600);
        reply
    });
    let timeout = Duration::from_secs(1);
    let store = minio::builder()
        .endpoint(server.url())
        .bucket("bucket")
        .credentials(Credentials::new("k", "s"))
        .timeout(timeout)
        .build()
        .unwrap();
    let started = Instant::now();
    let e = store.get("p/LEASE", None).unwrap_err();
    let took = started.elapsed();
    assert_eq!(e.kind(), StoreErrorKind::Transport, "{e}");
    assert!(
        took <= timeout + DEADLINE_SLACK,
        "a call without a deadline took {took:?}, over its {timeout:?} bound: {e}"
    );
    // The retry that fits went out, and none after the bound.
    let seen = server.seen();
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|s| s.at <= started + timeout), "{seen:?}");
}
