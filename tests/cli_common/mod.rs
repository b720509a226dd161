//! End-to-end scenarios for the `bucket-lease` command, run by `cli_fs.rs`
//! (on `file://` temporary directories) and `cli_moto.rs` (on moto, started
//! by `scripts/test-servers.sh`). Each scenario drives the built binary as a
//! user would, on a prefix of its own, with TTLs of one to three seconds.
#![allow(dead_code)]

use bucket_lease::store::{PutMode, PutOptions};
use bucket_lease::Store;
use rustix::process::{kill_process, test_kill_process, Pid, Signal};
use serde_json::Value;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The exit codes the command documents.
pub const HELD: i32 = 75;
/// The lease was lost while the command ran.
pub const LOST: i32 = 76;
/// `break` refused.
pub const REFUSED: i32 = 1;
/// A bad or missing argument.
pub const USAGE: i32 = 64;
/// A store request failed.
pub const STORE: i32 = 69;
/// The store refused the credentials or the permissions.
pub const NO_PERMISSION: i32 = 77;
/// The configuration (here: the bucket) cannot be used.
pub const CONFIG: i32 = 78;

/// Where the scenarios run: a store URL base and the environment it needs.
pub struct Target {
    base: String,
    env: Vec<(&'static str, String)>,
    /// Scratch directory for marker files (and, for `file://`, the bucket).
    scratch: PathBuf,
}

fn unique() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{}-{:x}", std::process::id(), nanos)
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bucket-lease-cli-{name}-{}", unique()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// The URL in `variable`, or `None` with a note when the servers script
/// has not been run; under `BUCKET_LEASE_REQUIRE_SERVERS=1` a missing one
/// fails the test.
fn server_url(test: &str, variable: &str) -> Option<String> {
    match std::env::var(variable) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let note = format!(
                "{variable} is not set: run scripts/test-servers.sh start and source \
                 .ci/tmp/servers.env"
            );
            assert!(
                std::env::var("BUCKET_LEASE_REQUIRE_SERVERS").as_deref() != Ok("1"),
                "{note}"
            );
            eprintln!("note: skipping {test}: {note}");
            None
        }
    }
}

fn test_bucket() -> String {
    std::env::var("BUCKET_LEASE_TEST_BUCKET").unwrap_or_else(|_| "bucket-lease-test".to_string())
}

impl Target {
    /// A `file://` bucket in a fresh temporary directory: each lease's
    /// URL is `file://DIR//NAME`, the directory, the `//` that ends it,
    /// and the prefix.
    pub fn fs(test: &str) -> Target {
        let scratch = scratch_dir(test);
        let bucket = scratch.join("bucket");
        std::fs::create_dir_all(&bucket).unwrap();
        Target {
            base: format!("file://{}/", bucket.display()),
            env: Vec::new(),
            scratch,
        }
    }

    /// moto, through an `s3://` URL and `AWS_ENDPOINT_URL`; `None` (with a
    /// note) when the servers script has not been run, unless
    /// `BUCKET_LEASE_REQUIRE_SERVERS=1`.
    pub fn moto(test: &str) -> Option<Target> {
        let url = server_url(test, "BUCKET_LEASE_TEST_MOTO_URL")?;
        Some(Target {
            base: format!("s3://{}/cli-{test}-{}", test_bucket(), unique()),
            env: vec![
                ("AWS_ENDPOINT_URL", url),
                ("AWS_ACCESS_KEY_ID", "test-key".into()),
                ("AWS_SECRET_ACCESS_KEY", "test-secret".into()),
                ("AWS_REGION", "us-east-1".into()),
            ],
            scratch: scratch_dir(test),
        })
    }

    /// moto's bucket with versioning on (`BUCKET_LEASE_TEST_VERSIONED_BUCKET`,
    /// made by `scripts/test-servers.sh`), as [`Target::moto`] otherwise.
    pub fn moto_versioned(test: &str) -> Option<Target> {
        let mut target = Target::moto(test)?;
        let bucket = server_url(test, "BUCKET_LEASE_TEST_VERSIONED_BUCKET")?;
        target.base = format!("s3://{bucket}/cli-{test}-{}", unique());
        Some(target)
    }

    /// Ceph RGW 16.2, through a `minio://` URL and `AWS_ENDPOINT_URL`, with
    /// the command's default settings (no `BUCKET_LEASE_UNQUOTED_ETAGS`:
    /// the spelling is learned); `None` as for [`Target::moto`].
    pub fn rgw(test: &str) -> Option<Target> {
        let url = server_url(test, "BUCKET_LEASE_TEST_RGW_URL")?;
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set (see servers.env)"))
        };
        Some(Target {
            base: format!("minio://{}/cli-{test}-{}", test_bucket(), unique()),
            env: vec![
                ("AWS_ENDPOINT_URL", url),
                ("AWS_ACCESS_KEY_ID", var("BUCKET_LEASE_TEST_RGW_ACCESS_KEY")),
                (
                    "AWS_SECRET_ACCESS_KEY",
                    var("BUCKET_LEASE_TEST_RGW_SECRET_KEY"),
                ),
                ("AWS_REGION", "us-east-1".into()),
            ],
            scratch: scratch_dir(test),
        })
    }

    /// Both gateways of the Ceph cluster (`BUCKET_LEASE_TEST_RGW_URL` and
    /// `BUCKET_LEASE_TEST_RGW2_URL`, two radosgw processes on it) as two
    /// targets naming the same leases: the same URLs and credentials, each
    /// through its own gateway, each with its own scratch directory;
    /// `None` as for [`Target::moto`].
    pub fn rgw_gateways(test: &str) -> Option<[Target; 2]> {
        let first = Target::rgw(test)?;
        let url = server_url(test, "BUCKET_LEASE_TEST_RGW2_URL")?;
        let second = Target {
            base: first.base.clone(),
            env: first.env.clone(),
            scratch: scratch_dir(test),
        }
        .through(&url);
        Some([first, second])
    }

    /// A target on the HTTP endpoint `endpoint` (a test server on
    /// 127.0.0.1), through an `s3://` URL on bucket `bucket`.
    pub fn http(test: &str, endpoint: &str, bucket: &str) -> Target {
        Target {
            base: format!("s3://{bucket}/cli-{test}-{}", unique()),
            env: vec![
                ("AWS_ENDPOINT_URL", endpoint.to_string()),
                ("AWS_ACCESS_KEY_ID", "test-key".into()),
                ("AWS_SECRET_ACCESS_KEY", "test-secret".into()),
                ("AWS_REGION", "us-east-1".into()),
            ],
            scratch: scratch_dir(test),
        }
    }

    /// This target with its HTTP endpoint replaced by `endpoint` (a proxy).
    pub fn through(mut self, endpoint: &str) -> Target {
        self.env.retain(|(name, _)| *name != "AWS_ENDPOINT_URL");
        self.env.push(("AWS_ENDPOINT_URL", endpoint.to_string()));
        self
    }

    /// This target's `s3://` URLs as `r2://` ones (same bucket and
    /// prefixes): the command uses R2's profile (path-style, region `auto`,
    /// no conditional deletes) on this target's endpoint, which
    /// `AWS_ENDPOINT_URL` names (R2 ignores `AWS_REGION`).
    pub fn on_r2(mut self) -> Target {
        if let Some(rest) = self.base.strip_prefix("s3://") {
            self.base = format!("r2://{rest}");
        }
        self
    }

    /// This target with the variable `name` set to `value`, or removed.
    pub fn with_env(mut self, name: &'static str, value: Option<&str>) -> Target {
        self.env.retain(|(n, _)| *n != name);
        if let Some(value) = value {
            self.env.push((name, value.to_string()));
        }
        self
    }

    /// The HTTP endpoint the command is pointed at, if any.
    pub fn endpoint(&self) -> Option<&str> {
        self.env
            .iter()
            .find(|(name, _)| *name == "AWS_ENDPOINT_URL")
            .map(|(_, value)| value.as_str())
    }

    /// For a `file://` target: the directory used as the bucket.
    pub fn bucket_dir(&self) -> Option<PathBuf> {
        self.base
            .strip_prefix("file://")
            .map(|dir| PathBuf::from(dir.trim_end_matches('/')))
    }

    /// The store and prefix `url` names, opened with this target's
    /// environment, to put records the command never writes.
    pub fn store(&self, url: &str) -> (Arc<dyn Store>, String) {
        let env = |name: &str| {
            self.env
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        };
        bucket_lease::backends::config::open_with_env(url, env).expect("the test store opens")
    }

    /// Write `body` as the `LEASE` object of `url`, over whatever is there.
    pub fn put_lease(&self, url: &str, body: &[u8]) {
        let (store, prefix) = self.store(url);
        store
            .put(
                &bucket_lease::record::lease_key(&prefix),
                body,
                &PutOptions::new(PutMode::Overwrite),
            )
            .expect("the record is written");
    }

    /// The URL of the lease `name` of this target.
    pub fn url(&self, name: &str) -> String {
        format!("{}/{name}", self.base)
    }

    /// A path in the scratch directory, for marker files.
    pub fn path(&self, name: &str) -> PathBuf {
        self.scratch.join(name)
    }

    /// `bucket-lease ARGS` with this target's environment, and none of the
    /// caller's settings that would change its behaviour.
    pub fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command_of(env!("CARGO_BIN_EXE_bucket-lease"), args)
    }

    /// `bucket-lease-bench ARGS` (what `bucket-lease bench ARGS` runs), as
    /// [`command`](Self::command) sets it up.
    pub fn bench_command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command_of(env!("CARGO_BIN_EXE_bucket-lease-bench"), args)
    }

    /// Run `bucket-lease-bench ARGS` to the end.
    pub fn bench<I, S>(&self, args: I) -> Done
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Done::from(output_within(&mut self.bench_command(args), COMMAND_LIMIT))
    }

    /// The program at `program` given ARGS, as [`command`](Self::command)
    /// sets it up.
    pub fn command_of<I, S>(&self, program: &str, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new(program);
        for var in [
            "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT_URL_S3",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_PROFILE",
            "AWS_CONFIG_FILE",
            "AWS_SHARED_CREDENTIALS_FILE",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_ROLE_ARN",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "AWS_CONTAINER_AUTHORIZATION_TOKEN",
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            "AWS_EC2_METADATA_SERVICE_ENDPOINT",
            "BUCKET_LEASE_CONDITIONAL",
            "BUCKET_LEASE_LOG",
            "BUCKET_LEASE_WRITE_INTERVAL",
            "R2_ACCOUNT_ID",
            "R2_JURISDICTION",
        ] {
            cmd.env_remove(var);
        }
        // Credentials come only from what a test sets: no profile of the
        // machine's, and never a request to the instance metadata address
        // (tests send traffic only to loopback).
        cmd.env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_CONFIG_FILE", "/nonexistent/bucket-lease-tests/config")
            .env(
                "AWS_SHARED_CREDENTIALS_FILE",
                "/nonexistent/bucket-lease-tests/credentials",
            );
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)))
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// Run `bucket-lease ARGS` to the end.
    pub fn run<I, S>(&self, args: I) -> Done
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Done::from(output_within(&mut self.command(args), COMMAND_LIMIT))
    }

    /// Start `bucket-lease ARGS` in the background, output captured.
    pub fn spawn<I, S>(&self, args: I) -> Child
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary starts")
    }

    /// Start `bucket-lease run --ttl TTL URL -- sh -c SCRIPT`; the script
    /// sees `$DIR`, the scratch directory.
    pub fn spawn_holder(&self, url: &str, ttl_s: u64, script: &str) -> Child {
        let ttl = ttl_s.to_string();
        let mut cmd = self.command([
            "run", "--ttl", &ttl, "--grace", "2", url, "--", "sh", "-c", script,
        ]);
        cmd.env("DIR", &self.scratch)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().expect("the binary starts")
    }

    /// `inspect --json URL`, parsed.
    pub fn inspect(&self, url: &str) -> Value {
        let done = self.run(["inspect", "--json", url]);
        assert_eq!(done.code, Some(0), "inspect failed: {done:?}");
        serde_json::from_str(&done.stdout).expect("inspect --json prints JSON")
    }

    /// The holder `inspect` names, if any.
    pub fn holder(&self, url: &str) -> Option<String> {
        self.inspect(url)["holder"].as_str().map(str::to_string)
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// A finished run of the binary.
#[derive(Debug)]
pub struct Done {
    /// Its exit code (`None` when a signal killed it).
    pub code: Option<i32>,
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
}

impl From<Output> for Done {
    fn from(o: Output) -> Self {
        Done {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// How long one `bucket-lease` run in a test may take before it counts as
/// hung: far over the longest any test waits for (its `--wait`, a TTL, a
/// grace period), so only a defect reaches it.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(120);

/// `cmd`'s output, as `Command::output` gives it, but bounded: a process
/// still running after `limit`, or whose pipes some process it left
/// behind still holds open 10 s after it exited, fails the test with what
/// it printed so far (and is killed), rather than hanging the suite.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    use std::sync::mpsc;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let (sent, got) = mpsc::channel();
    for (which, mut pipe) in [
        (
            0,
            Box::new(child.stdout.take().expect("piped")) as Box<dyn Read + Send>,
        ),
        (1, Box::new(child.stderr.take().expect("piped"))),
    ] {
        let sent = sent.clone();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            let _ = sent.send((which, bytes));
        });
    }
    drop(sent);
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let printed: Vec<String> = got
                .try_iter()
                .map(|(_, b)| String::from_utf8_lossy(&b).into_owned())
                .collect();
            panic!("{cmd:?} did not exit within {limit:?}; it printed {printed:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut streams = [Vec::new(), Vec::new()];
    let pipes_deadline = Instant::now() + Duration::from_secs(10);
    for _ in 0..2 {
        let left = pipes_deadline.saturating_duration_since(Instant::now());
        match got.recv_timeout(left) {
            Ok((which, bytes)) => streams[which] = bytes,
            Err(_) => panic!(
                "{cmd:?} exited ({status}) but its output stayed open 10 s after: a process it \
                 started still holds it"
            ),
        }
    }
    let [stdout, stderr] = streams;
    Output {
        status,
        stdout,
        stderr,
    }
}

/// Wait for `child` to exit within `limit`; kill it and fail otherwise.
pub fn finish(child: Child, limit: Duration) -> Done {
    let mut child = child;
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return Done::from(child.wait_with_output().expect("its output"));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let done = Done::from(child.wait_with_output().expect("its output"));
            panic!("the process did not exit within {limit:?}: {done:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until `path` exists and holds a line; its contents.
pub fn wait_for_file(path: &Path, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if text.ends_with('\n') {
                return text.trim().to_string();
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} did not appear within {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Send `signal` to `child`.
pub fn signal(child: &Child, signal: Signal) {
    kill_process(Pid::from_child(child), signal).expect("the signal is sent");
}

/// Whether the process `pid` still exists and has not died (a zombie
/// waiting for its new parent to reap it counts as dead).
pub fn alive(pid: &str) -> bool {
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        let state = stat
            .rsplit(") ")
            .next()
            .and_then(|rest| rest.chars().next());
        return !matches!(state, Some('Z' | 'X'));
    }
    let pid = pid.parse::<i32>().expect("a pid");
    test_kill_process(Pid::from_raw(pid).expect("a positive pid")).is_ok()
}

/// Kill the process `pid` if it still exists (cleanup of orphans).
pub fn kill_pid(pid: &str) {
    if let Some(pid) = pid.parse::<i32>().ok().and_then(Pid::from_raw) {
        let _ = kill_process(pid, Signal::KILL);
    }
}

/// The exit code of `status`, or 128+signal.
pub fn code_of(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// A script that records its pid in `$DIR/NAME` and then becomes `sleep 30`.
pub fn pid_then_sleep(name: &str) -> String {
    format!(
        "echo $$ > \"$DIR/{name}.tmp\" && mv \"$DIR/{name}.tmp\" \"$DIR/{name}\" && exec sleep 30"
    )
}

// ------------------------------------------------------ network and locks

/// A TCP proxy on 127.0.0.1 in front of an HTTP endpoint. It forwards both
/// ways until [`black_hole`](Self::black_hole) is switched on; from then on
/// it keeps every connection (old and new) open and reads what clients
/// send, but passes nothing on and answers nothing: the network of a
/// partition, where requests time out. [`delay`](Self::delay) holds each
/// chunk a client sends before passing it on.
pub struct Proxy {
    endpoint: String,
    black_hole: Arc<AtomicBool>,
    delay_ms: Arc<AtomicU64>,
}

impl Proxy {
    /// A proxy in front of `upstream` (`http://host:port`).
    pub fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a local port");
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let upstream = upstream.trim_start_matches("http://").to_string();
        let black_hole = Arc::new(AtomicBool::new(false));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let (hole, delay) = (Arc::clone(&black_hole), Arc::clone(&delay_ms));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let (upstream, hole, delay) = (upstream.clone(), hole.clone(), delay.clone());
                std::thread::spawn(move || forward(client, &upstream, hole, delay));
            }
        });
        Proxy {
            endpoint,
            black_hole,
            delay_ms,
        }
    }

    /// The proxy's URL, for `AWS_ENDPOINT_URL`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Swallow everything from now on (`true`), or forward again.
    pub fn black_hole(&self, on: bool) {
        self.black_hole.store(on, Ordering::SeqCst);
    }

    /// Hold each chunk a client sends for `delay` first.
    pub fn delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms.store(ms, Ordering::SeqCst);
    }
}

/// One proxied connection: client to server on a thread of its own, server
/// to client here; while `hole` is on, bytes either way are dropped.
fn forward(client: TcpStream, upstream: &str, hole: Arc<AtomicBool>, delay: Arc<AtomicU64>) {
    let Ok(server) = TcpStream::connect(upstream) else {
        swallow(client);
        return;
    };
    let (Ok(mut from_client), Ok(mut to_server)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let up_hole = Arc::clone(&hole);
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n @ 1..) = from_client.read(&mut buf) {
            std::thread::sleep(Duration::from_millis(delay.load(Ordering::SeqCst)));
            if up_hole.load(Ordering::SeqCst) {
                continue;
            }
            if to_server.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let (mut from_server, mut to_client) = (server, client);
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n @ 1..) = from_server.read(&mut buf) {
        if hole.load(Ordering::SeqCst) {
            continue;
        }
        if to_client.write_all(&buf[..n]).is_err() {
            break;
        }
    }
}

/// Read and drop everything `client` sends, never answering, until it
/// closes the connection.
fn swallow(mut client: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    while let Ok(1..) = client.read(&mut buf) {}
}

/// An endpoint on 127.0.0.1 that accepts connections, reads the requests
/// and never answers: every request to it runs into its timeout.
pub fn black_hole() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a local port");
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            std::thread::spawn(move || swallow(client));
        }
    });
    endpoint
}

/// An endpoint on 127.0.0.1 that answers every request with `status` (such
/// as `403 Forbidden`) and an S3 error body carrying `code`.
pub fn answering(status: &'static str, code: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a local port");
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            std::thread::spawn(move || answer_each(client, status, code));
        }
    });
    endpoint
}

/// Read one request after another from `client` (head, then as many body
/// bytes as `Content-Length` says) and answer each with the canned error.
fn answer_each(mut client: TcpStream, status: &str, code: &str) {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
         <Message>canned {code}</Message><RequestId>test</RequestId></Error>"
    );
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") else {
            match client.read(&mut buf) {
                Ok(n @ 1..) => pending.extend_from_slice(&buf[..n]),
                _ => return,
            }
            continue;
        };
        let head = String::from_utf8_lossy(&pending[..end]).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        while pending.len() < end + 4 + length {
            match client.read(&mut buf) {
                Ok(n @ 1..) => pending.extend_from_slice(&buf[..n]),
                _ => return,
            }
        }
        pending.drain(..end + 4 + length);
        let is_head = head.starts_with("head ");
        let answer = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\
             x-amz-request-id: test\r\n\r\n{}",
            body.len(),
            if is_head { "" } else { body.as_str() }
        );
        if client.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// The exclusive lock a `file://` bucket's writes take (see
/// `backends/src/fs.rs`), held by the test until dropped: every write to
/// the bucket, renewals included, waits for it.
pub struct BucketLock {
    _file: std::fs::File,
}

impl BucketLock {
    /// Take the lock of the `file://` bucket in `dir`.
    pub fn take(dir: &Path) -> BucketLock {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(".bucket-lease/lock"))
            .expect("the bucket's lock file opens");
        file.lock().expect("the bucket's lock is taken");
        BucketLock { _file: file }
    }
}

// ---------------------------------------------------------------- scenarios

/// A second `run` without `--wait` is refused as held (75); one with
/// `--wait` gets the lease once the first has finished and released it.
pub fn second_run_is_held_then_waits(t: &Target) {
    let url = t.url("two-runs");
    // A TTL of 6 s, well beyond the command's 1.5 s: with 2 s, a renewal
    // slowed by a loaded machine (moto's one lock behind eight tests) let
    // the record run out while the first still ran, and the waiter took
    // it over rather than after the release.
    let first = t.spawn_holder(
        &url,
        6,
        "echo $$ > \"$DIR/first\"; sleep 1.5; touch \"$DIR/first-done\"",
    );
    wait_for_file(&t.path("first"), Duration::from_secs(10));
    let holder = t.holder(&url).expect("the first run holds the lease");

    let refused = t.run(["run", url.as_str(), "--", "true"]);
    assert_eq!(refused.code, Some(HELD), "{refused:?}");
    assert!(
        refused
            .stderr
            .contains(&format!("held by instance {holder}")),
        "{refused:?}"
    );

    let started = Instant::now();
    let waited = t.run([
        "run",
        "--wait",
        "15",
        url.as_str(),
        "--",
        "sh",
        "-c",
        &format!("test -e '{}'", t.path("first-done").display()),
    ]);
    assert_eq!(
        waited.code,
        Some(0),
        "the waiting run starts only after the first finished: {waited:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let first = finish(first, Duration::from_secs(10));
    assert_eq!(first.code, Some(0), "{first:?}");
    assert_eq!(t.inspect(&url)["state"], "free");
}

/// `run --ttl 3 URL -- sleep 2.5` (renewals every second) succeeds, and a
/// second run right after it does too, one epoch up, each releasing the
/// lease.
pub fn runs_twice_in_a_row_with_renewals(t: &Target) {
    runs_twice(t, "twice", "sleep 2.5; echo $BUCKET_LEASE_EPOCH");
}

/// A command that ends before the first renewal is due (`true`, TTL 3 s:
/// renewals every second) leaves the lease released, and the next run
/// takes it at once, one epoch up.
pub fn a_command_shorter_than_a_renewal_then_another_run(t: &Target) {
    runs_twice(t, "short", "echo $BUCKET_LEASE_EPOCH");
}

/// `run --ttl 3 URL -- sh -c SCRIPT` twice on the lease `name`: each exits
/// 0 with nothing said of an error, prints its epoch (1, then 2), and
/// leaves the lease released.
fn runs_twice(t: &Target, name: &str, script: &str) {
    let url = t.url(name);
    for round in 1..=2 {
        let done = t.run(["run", "--ttl", "3", url.as_str(), "--", "sh", "-c", script]);
        assert_eq!(done.code, Some(0), "run {round}: {done:?}");
        assert_eq!(done.stdout.trim(), round.to_string(), "run {round}");
        assert!(!done.stderr.contains("error"), "run {round}: {done:?}");
        let json = t.inspect(&url);
        assert_eq!(json["state"], "free", "run {round}: {json}");
        assert_eq!(json["epoch"], round, "run {round}: {json}");
        assert_eq!(json["released"], true, "run {round}: {json}");
    }
}

/// `bucket-lease-bench -q --iters 3 --json` succeeds on a conditional
/// service and removes its scratch lease.
pub fn bench_runs_and_leaves_the_lease_free(t: &Target) {
    let url = t.url("bench");
    let done = t.bench(["-q", "--iters", "3", "--json", url.as_str()]);
    assert_eq!(done.code, Some(0), "{done:?}");
    let json: Value = serde_json::from_str(&done.stdout).expect("JSON");
    assert_eq!(json["iterations"], 3, "{json}");
    assert_eq!(json["exclusion"], "conditional", "{json}");
    assert_eq!(t.inspect(&url)["state"], "free");
}

/// A holder killed with SIGKILL (no release) keeps others out until its TTL
/// runs out, and is then taken over.
pub fn killed_holder_is_taken_over_after_the_ttl(t: &Target) {
    let url = t.url("sigkill");
    let mut holder = t.spawn_holder(&url, 2, &pid_then_sleep("pid"));
    let pid = wait_for_file(&t.path("pid"), Duration::from_secs(10));
    let id = t.holder(&url).expect("held");
    holder.kill().expect("SIGKILL");
    let killed_at = Instant::now();
    let _ = holder.wait();
    // The kernel kills the command of a SIGKILLed run with it.
    let gone_by = Instant::now() + Duration::from_secs(5);
    while alive(&pid) {
        assert!(Instant::now() < gone_by, "the command outlived its run");
        std::thread::sleep(Duration::from_millis(20));
    }

    let refused = t.run(["run", url.as_str(), "--", "true"]);
    assert_eq!(refused.code, Some(HELD), "still fresh: {refused:?}");
    assert_eq!(t.holder(&url).as_deref(), Some(id.as_str()));

    let taken = t.run([
        "run",
        "--wait",
        "10",
        url.as_str(),
        "--",
        "sh",
        "-c",
        "echo $BUCKET_LEASE_EPOCH",
    ]);
    assert_eq!(taken.code, Some(0), "{taken:?}");
    assert_eq!(taken.stdout.trim(), "2", "a takeover is the next epoch");
    let after = killed_at.elapsed();
    assert!(
        after < Duration::from_secs(6),
        "taken over {after:?} after the kill, TTL 2 s"
    );
    assert_eq!(t.inspect(&url)["state"], "free");
}

/// `inspect` in human and JSON form, free and held.
pub fn inspect_shows_free_and_held(t: &Target) {
    let url = t.url("inspect");
    let free = t.run(["inspect", url.as_str()]);
    assert_eq!(free.code, Some(0), "{free:?}");
    assert!(free.stdout.contains("is free"), "{free:?}");
    let json = t.inspect(&url);
    assert_eq!(json["state"], "free");
    assert!(json["key"].as_str().unwrap().ends_with("inspect/LEASE"));

    let holder = t.spawn_holder(&url, 3, &pid_then_sleep("pid"));
    let pid = wait_for_file(&t.path("pid"), Duration::from_secs(10));
    let json = t.inspect(&url);
    let id = json["holder"].as_str().expect("a holder").to_string();
    assert_eq!(id.len(), 32, "{json}");
    let nonce = json["instance_nonce"]
        .as_str()
        .expect("a nonce")
        .to_string();
    assert!(
        nonce.len() == 32 && nonce.bytes().all(|b| b.is_ascii_hexdigit()),
        "{json}"
    );
    assert_eq!(json["state"], "held");
    assert_eq!(json["fresh"], true);
    assert_eq!(json["suspect"], false);
    assert_eq!(json["broken"], false);
    assert_eq!(json["ttl_s"], 3);
    assert_eq!(json["epoch"], 1);
    assert!(
        json["etag"].as_str().is_some_and(|e| !e.is_empty()),
        "{json}"
    );
    assert_eq!(json["versioned"], false, "{json}");
    let age = json["age_s"].as_f64().expect("age_s");
    assert!((-1.0..3.0).contains(&age), "{json}");
    let left = json["expires_in_s"].as_f64().expect("expires_in_s");
    assert!((0.0..=4.0).contains(&left), "{json}");
    for field in ["acquired_at", "renewed_at", "read_at"] {
        assert!(
            json[field].as_str().is_some_and(|s| s.ends_with('Z')),
            "{json}"
        );
    }

    let human = t.run(["inspect", url.as_str()]);
    assert_eq!(human.code, Some(0));
    for needle in [
        "is held",
        &format!("holder       {id}"),
        &format!("nonce        {nonce}"),
        "fresh: expires in",
        "suspect      no",
        "epoch        1",
        "etag",
        "by this machine's clock",
    ] {
        assert!(
            human.stdout.contains(needle),
            "{needle:?} in {}",
            human.stdout
        );
    }
    assert!(!human.stdout.contains("versioned"), "{}", human.stdout);
    signal(&holder, Signal::TERM);
    let done = finish(holder, Duration::from_secs(10));
    assert_eq!(done.code, Some(143), "{done:?}");
    assert!(!alive(&pid));
    assert_eq!(t.inspect(&url)["state"], "free");
}

/// `break` refuses a wrong id and a free lease, breaks the named holder; the
/// running holder loses the lease, stops its command and exits 76; the next
/// contender takes it at once.
pub fn break_stops_the_running_holder(t: &Target) {
    break_stops_the_running_holder_at(t, 3);
}

/// [`break_stops_the_running_holder`], the holder on a TTL of `ttl_s`.
pub fn break_stops_the_running_holder_at(t: &Target, ttl_s: u64) {
    let url = t.url("break-running");
    let free = t.run(["break", "--holder", "nobody", url.as_str()]);
    assert_eq!(free.code, Some(REFUSED), "{free:?}");
    assert!(free.stderr.contains("free"), "{free:?}");

    let holder = t.spawn_holder(&url, ttl_s, &pid_then_sleep("pid"));
    let pid = wait_for_file(&t.path("pid"), Duration::from_secs(10));
    let id = t.holder(&url).expect("held");

    let wrong = t.run(["break", "--holder", "nobody", url.as_str()]);
    assert_eq!(wrong.code, Some(REFUSED), "{wrong:?}");
    assert!(
        wrong.stderr.contains(&format!("held by instance {id}")),
        "{wrong:?}"
    );
    assert_eq!(t.holder(&url).as_deref(), Some(id.as_str()), "untouched");

    let broke = t.run(["break", "--holder", id.as_str(), url.as_str()]);
    assert_eq!(broke.code, Some(0), "{broke:?}");
    assert!(broke.stdout.contains(&id), "{broke:?}");
    assert!(broke.stdout.contains("broken-by-"), "{broke:?}");
    assert!(broke.stdout.contains("still fresh"), "{broke:?}");

    let done = finish(holder, Duration::from_secs(10));
    assert_eq!(done.code, Some(LOST), "{done:?}");
    // It learns of the break from a renewal refused ("lost"), or, when the
    // renewal after the break was throttled (a store with a write
    // interval), stops at its fence and finds the breaker's record at the
    // release.
    assert!(
        done.stderr.contains("lost") || done.stderr.contains("held by instance broken-by-"),
        "{done:?}"
    );
    assert!(!alive(&pid), "the command was stopped");

    let next = t.run([
        "run",
        url.as_str(),
        "--",
        "sh",
        "-c",
        "echo $BUCKET_LEASE_EPOCH",
    ]);
    assert_eq!(next.code, Some(0), "taken at once: {next:?}");
    assert_eq!(next.stdout.trim(), "3", "1 for the holder, 2 for the break");
}

/// A stale holder (SIGKILLed, TTL run out) is broken; breaking it again is
/// refused, naming the breaker's record.
pub fn break_a_stale_holder(t: &Target) {
    let url = t.url("break-stale");
    // A TTL of 3 s: with 1 s, an acquire slowed by a loaded machine (its
    // probe syncs the disk) outlasted its 667 ms fence and the command
    // never started.
    let mut holder = t.spawn_holder(&url, 3, &pid_then_sleep("pid"));
    let pid = wait_for_file(&t.path("pid"), Duration::from_secs(10));
    let id = t.holder(&url).expect("held");
    holder.kill().expect("SIGKILL");
    let _ = holder.wait();
    kill_pid(&pid);
    std::thread::sleep(Duration::from_millis(3200));
    assert_eq!(t.inspect(&url)["state"], "expired");

    let broke = t.run(["break", "--json", "--holder", id.as_str(), url.as_str()]);
    assert_eq!(broke.code, Some(0), "{broke:?}");
    let json: Value = serde_json::from_str(&broke.stdout).expect("JSON");
    assert_eq!(json["broken"], true);
    assert_eq!(json["replaced"]["holder"], id.as_str());
    assert_eq!(json["replaced"]["fresh"], false);
    assert_eq!(json["record"]["ttl_s"], 1);
    assert_eq!(json["record"]["epoch"], 2);
    let breaker = json["record"]["holder"].as_str().unwrap().to_string();
    assert!(breaker.starts_with("broken-by-"));
    assert_eq!(t.inspect(&url)["broken"], true);

    let again = t.run(["break", "--holder", id.as_str(), url.as_str()]);
    assert_eq!(again.code, Some(REFUSED), "{again:?}");
    assert!(again.stderr.contains(&breaker), "{again:?}");
}

/// SIGINT to `run` stops the command, releases the lease and exits 130.
pub fn sigint_releases_and_stops_the_command(t: &Target) {
    let url = t.url("sigint");
    let holder = t.spawn_holder(&url, 3, &pid_then_sleep("pid"));
    let pid = wait_for_file(&t.path("pid"), Duration::from_secs(10));
    assert_eq!(t.inspect(&url)["state"], "held");
    signal(&holder, Signal::INT);
    let done = finish(holder, Duration::from_secs(10));
    assert_eq!(done.code, Some(130), "{done:?}");
    assert!(!alive(&pid), "the command was stopped");
    assert_eq!(t.inspect(&url)["state"], "free", "released: {done:?}");
}

/// The command's exit status is `run`'s; 128+N for a signal; 127 for a
/// command that does not exist. The lease is released every time.
pub fn the_command_status_is_propagated(t: &Target) {
    let url = t.url("status");
    let seven = t.run(["run", url.as_str(), "--", "sh", "-c", "exit 7"]);
    assert_eq!(seven.code, Some(7), "{seven:?}");
    let term = t.run(["run", url.as_str(), "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(term.code, Some(143), "{term:?}");
    let missing = t.run(["run", url.as_str(), "--", "/nonexistent/command"]);
    assert_eq!(missing.code, Some(127), "{missing:?}");
    assert!(
        missing.stderr.contains("/nonexistent/command"),
        "{missing:?}"
    );
    let env = t.run([
        "run",
        "--ttl",
        "2",
        url.as_str(),
        "sh",
        "-c",
        "echo $BUCKET_LEASE_TTL_S $BUCKET_LEASE_EXCLUSION $BUCKET_LEASE_KEY",
    ]);
    assert_eq!(env.code, Some(0), "{env:?}");
    assert!(
        env.stdout.trim().starts_with("2 conditional ")
            && env.stdout.trim().ends_with("status/LEASE"),
        "{env:?}"
    );
    assert_eq!(t.inspect(&url)["state"], "free");
}

/// A script that ignores SIGTERM (as a command busy in cleanup does),
/// records its pid in `$DIR/NAME` and then becomes `sleep SECONDS`.
pub fn pid_then_sleep_ignoring_sigterm(name: &str, seconds: u32) -> String {
    format!(
        "trap '' TERM; echo $$ > \"$DIR/{name}.tmp\" && mv \"$DIR/{name}.tmp\" \"$DIR/{name}\" \
         && exec sleep {seconds}"
    )
}

/// When renewals stop landing (`cut(true)` black-holes them), the command
/// is dead by the write deadline, two thirds of the TTL after the last
/// renewal that could have landed, even though it ignores SIGTERM; `run`
/// exits 76 soon after, not when the command would have ended by itself.
/// `cut(false)` puts things back.
pub fn renewals_that_hang_stop_the_command_by_the_write_deadline(
    t: &Target,
    cut: &mut dyn FnMut(bool),
) {
    let url = t.url("hang");
    let mut cmd = t.command([
        "run",
        "--ttl",
        "3",
        url.as_str(),
        "--",
        "sh",
        "-c",
        &pid_then_sleep_ignoring_sigterm("pid", 8),
    ]);
    cmd.env("DIR", &t.scratch)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let holder = cmd.spawn().expect("the binary starts");
    let pid = wait_for_file(&t.path("pid"), Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    let cut_at = Instant::now();
    cut(true);
    // Every renewal that can land was sent before the cut, and its write
    // deadline is 2/3 of the 3 s TTL after it was sent.
    let deadline = cut_at + Duration::from_secs(2);
    // What the test can see: the kernel's bookkeeping and our polling.
    let observation = Duration::from_millis(600);
    while alive(&pid) && Instant::now() < deadline + observation {
        std::thread::sleep(Duration::from_millis(10));
    }
    let still_alive = alive(&pid);
    if still_alive {
        kill_pid(&pid);
    }
    let done = finish(holder, Duration::from_secs(20));
    let ended = cut_at.elapsed();
    cut(false);
    assert!(
        !still_alive,
        "the command was alive {observation:?} after the write deadline: {done:?}"
    );
    assert_eq!(done.code, Some(LOST), "{done:?}");
    assert!(
        ended < Duration::from_secs(7),
        "run ended {ended:?} after the cut, TTL 3 s, the command 8 s: {done:?}"
    );
}

/// An `instance_id` holding terminal escape sequences and other control
/// characters reaches the terminal escaped: in `inspect`, in `run`'s
/// "held by" message and its log, and in `break`.
pub fn store_text_is_shown_escaped(t: &Target) {
    let url = t.url("evil");
    let evil = "evil\u{1b}[2J\u{1b}]0;pwned\u{7}\r\u{9b}31m\u{202e}";
    let now = bucket_lease::record::format_stamp(SystemTime::now());
    let record = serde_json::json!({
        "instance_id": evil,
        "acquired_at": now,
        "renewed_at": now,
        "ttl_s": 30,
        "epoch": 1,
    });
    t.put_lease(&url, record.to_string().as_bytes());
    let raw = |text: &str| {
        text.chars()
            .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}')
    };

    let inspected = t.run(["inspect", url.as_str()]);
    assert_eq!(inspected.code, Some(0), "{inspected:?}");
    assert!(inspected.stdout.contains("evil"), "{inspected:?}");
    assert!(!raw(&inspected.stdout), "inspect: {inspected:?}");
    assert!(!raw(&inspected.stderr), "inspect: {inspected:?}");
    let json = t.inspect(&url);
    assert_eq!(
        json["holder"], evil,
        "--json keeps the exact id, escaped as JSON"
    );

    let held = t.run(["run", url.as_str(), "--", "true"]);
    assert_eq!(held.code, Some(HELD), "{held:?}");
    assert!(held.stderr.contains("held by instance evil"), "{held:?}");
    assert!(!raw(&held.stderr), "run: {held:?}");

    let waited = t.run(["run", "-vv", "--wait", "0.5", url.as_str(), "--", "true"]);
    assert_eq!(waited.code, Some(HELD), "{waited:?}");
    assert!(!raw(&waited.stderr), "run -vv: {waited:?}");

    let broke = t.run(["break", "--holder", evil, url.as_str()]);
    assert_eq!(broke.code, Some(0), "{broke:?}");
    assert!(
        !raw(&broke.stdout) && !raw(&broke.stderr),
        "break: {broke:?}"
    );
    let again = t.run(["break", "--holder", evil, url.as_str()]);
    assert_eq!(again.code, Some(REFUSED), "{again:?}");
    assert!(!raw(&again.stderr), "break refused: {again:?}");
}

/// On a bucket that keeps versions, `run` warns once (over its acquire,
/// renewals and release) with the versions a day and the lifecycle rule;
/// `inspect` shows the version id and the same, at the holder's TTL while
/// it holds the lease.
pub fn a_versioned_bucket_is_named_once_and_by_inspect(t: &Target) {
    let url = t.url("versioned");
    let (_, prefix) = t.store(&url);
    let key = bucket_lease::record::lease_key(&prefix);
    let rule = format!(
        r#"{{"Filter":{{"Prefix":"{key}"}},"NoncurrentVersionExpiration":{{"NoncurrentDays":1}},"Status":"Enabled"}}"#
    );
    let lifecycle = format!("lifecycle    expire noncurrent versions of {key} after 1 day");
    // A renewal a second for 3 s: an acquire, two or three renewals, a
    // release.
    let holder = t.spawn_holder(&url, 3, &pid_then_sleep_for("pid", 3));
    wait_for_file(&t.path("pid"), Duration::from_secs(10));
    let version_id = |json: &Value| {
        assert_eq!(json["versioned"], true, "{json}");
        let id = json["version_id"]
            .as_str()
            .expect("a version id")
            .to_string();
        assert!(!id.is_empty() && id != "null", "{json}");
        id
    };
    let held = t.inspect(&url);
    assert_eq!(held["state"], "held", "{held}");
    let id = version_id(&held);
    let human = t.run(["inspect", url.as_str()]);
    assert_eq!(human.code, Some(0), "{human:?}");
    // The human form names a version id too; not always the JSON's: the
    // holder renews every second, and each renewal is a new version.
    let shown = human
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("  version_id   "))
        .unwrap_or_default();
    assert!(
        !shown.is_empty() && shown != "null",
        "a version id in {}",
        human.stdout
    );
    for needle in [
        "versioned    yes: the bucket keeps every version of the record, about 86400 versions \
         a day at ttl_s 3"
            .to_string(),
        lifecycle.clone(),
        rule.clone(),
    ] {
        assert!(
            human.stdout.contains(&needle),
            "{needle:?} in {}",
            human.stdout
        );
    }

    let done = finish(holder, Duration::from_secs(20));
    assert_eq!(done.code, Some(0), "{done:?}");
    let said: Vec<&str> = done
        .stderr
        .lines()
        .filter(|l| l.contains("keeps every version"))
        .collect();
    assert_eq!(said.len(), 1, "{}", done.stderr);
    for needle in [
        "bucket-lease: warning: ",
        &format!("/{key}:"),
        "about 86400 versions a day at ttl_s 3",
        &rule,
    ] {
        assert!(said[0].contains(needle), "{needle:?} in {}", said[0]);
    }

    // Released: no TTL to count by, the rule for any.
    let released = t.inspect(&url);
    assert_eq!(released["state"], "free", "{released}");
    assert_ne!(version_id(&released), id, "the release is a version more");
    let human = t.run(["inspect", url.as_str()]);
    for needle in [
        "versioned    yes: the bucket keeps every version of the record, 86400 / (TTL / 3) \
         versions a day",
        &lifecycle,
    ] {
        assert!(
            human.stdout.contains(needle),
            "{needle:?} in {}",
            human.stdout
        );
    }
}

/// `echo $$ > $DIR/NAME` (atomically), then sleep `seconds` and exit 0.
fn pid_then_sleep_for(name: &str, seconds: u32) -> String {
    format!(
        "echo $$ > \"$DIR/{name}.tmp\" && mv \"$DIR/{name}.tmp\" \"$DIR/{name}\" && exec sleep {seconds}"
    )
}

/// Records no holder of ours would write (a TTL of 2^64-1 s stamped far in
/// the future, epoch 2^64-1) are shown, not panicked on.
pub fn inspect_survives_absurd_records(t: &Target) {
    let url = t.url("absurd");
    for (renewed_at, ttl_s, epoch) in [
        ("9999-12-31T23:59:59Z", u64::MAX, u64::MAX),
        ("0001-01-01T00:00:00Z", u64::MAX, 0),
        ("9999-12-31T23:59:59Z", 0, u64::MAX),
        ("not a stamp", u64::MAX, u64::MAX),
    ] {
        let record = serde_json::json!({
            "instance_id": "absurd",
            "acquired_at": renewed_at,
            "renewed_at": renewed_at,
            "ttl_s": ttl_s,
            "epoch": epoch,
        });
        t.put_lease(&url, record.to_string().as_bytes());
        for args in [
            vec!["inspect", url.as_str()],
            vec!["inspect", "--json", url.as_str()],
        ] {
            let done = t.run(&args);
            assert_eq!(done.code, Some(0), "{record} {args:?}: {done:?}");
            assert!(!done.stderr.contains("panicked"), "{done:?}");
            assert!(done.stdout.contains("absurd"), "{record}: {done:?}");
        }
    }
}

/// After a release the lease is free, and `inspect` says who released it,
/// when, and the last epoch; the next holder takes the next epoch.
pub fn inspect_shows_who_released_the_lease(t: &Target) {
    let url = t.url("released");
    let first = t.run([
        "run",
        url.as_str(),
        "--",
        "sh",
        "-c",
        "echo $BUCKET_LEASE_INSTANCE_ID",
    ]);
    assert_eq!(first.code, Some(0), "{first:?}");
    let id = first.stdout.trim();
    let human = t.run(["inspect", url.as_str()]);
    assert_eq!(human.code, Some(0), "{human:?}");
    assert!(
        human
            .stdout
            .contains(&format!("is free (released by {id} at ")),
        "{human:?}"
    );
    assert!(human.stdout.contains("), last epoch 1"), "{human:?}");
    assert!(
        human.stdout.contains("  holder_name  "),
        "the last holder's name: {human:?}"
    );
    let json = t.inspect(&url);
    assert_eq!(json["state"], "free", "{json}");
    assert_eq!(json["released"], true, "{json}");
    assert_eq!(json["holder"], id, "{json}");
    assert_eq!(json["epoch"], 1, "{json}");
    assert!(
        json["released_at"]
            .as_str()
            .is_some_and(|s| s.ends_with('Z')),
        "{json}"
    );
    let second = t.run([
        "run",
        url.as_str(),
        "--",
        "sh",
        "-c",
        "echo $BUCKET_LEASE_EPOCH",
    ]);
    assert_eq!(second.stdout.trim(), "2", "epochs only grow: {second:?}");
    let fresh = t.url("never-taken");
    assert_eq!(t.inspect(&fresh)["released"], false);
}

/// `run --holder-name NAME` writes NAME in the record for people: `inspect`
/// shows it (text and JSON) and a second `run` told the lease is held
/// names it; without the option it is `host:pid` of `run`; a name with an
/// escape is a usage error. The name never decides who holds the lease.
pub fn the_holder_name_is_shown_where_the_holder_is_named(t: &Target) {
    let url = t.url("named");
    let child = t.spawn(["run", url.as_str(), "--", "true"]);
    let pid = child.id();
    let done = child.wait_with_output().expect("run ends");
    assert_eq!(done.status.code(), Some(0), "{done:?}");
    let json = t.inspect(&url);
    let name = json["holder_name"].as_str().expect("a default holder name");
    assert!(
        name.ends_with(&format!(":{pid}")),
        "host:pid of run: {json}"
    );

    let mut cmd = t.command([
        "run",
        "--ttl",
        "5",
        "--holder-name",
        "nightly@db1",
        url.as_str(),
        "--",
        "sh",
        "-c",
        &pid_then_sleep("pid"),
    ]);
    cmd.env("DIR", t.path(""))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut holder = cmd.spawn().expect("the binary starts");
    wait_for_file(&t.path("pid"), Duration::from_secs(10));
    let json = t.inspect(&url);
    assert_eq!(json["holder_name"], "nightly@db1", "{json}");
    let id = json["holder"].as_str().expect("a holder").to_string();
    let human = t.run(["inspect", url.as_str()]);
    assert!(
        human.stdout.contains("holder_name  nightly@db1"),
        "{human:?}"
    );
    let second = t.run([
        "run",
        "--holder-name",
        "nightly@db1",
        url.as_str(),
        "--",
        "true",
    ]);
    assert_eq!(
        second.code,
        Some(75),
        "same name, another holder: {second:?}"
    );
    assert!(
        second
            .stderr
            .contains(&format!("held by instance {id} (nightly@db1)")),
        "{second:?}"
    );
    let _ = holder.kill();
    let _ = holder.wait();

    let bad = t.run([
        "run",
        "--holder-name",
        "a\u{1b}[2Jb",
        url.as_str(),
        "--",
        "true",
    ]);
    assert_eq!(bad.code, Some(64), "{bad:?}");
    assert!(
        bad.stderr.contains("--holder-name") && !bad.stderr.contains('\u{1b}'),
        "{bad:?}"
    );
}

// ------------------------------------------- every process of the command

/// `$DIR/rec.sh NAME SECONDS`: record this process's pid in `$DIR/NAME`,
/// then become `sleep SECONDS`.
const REC_SH: &str =
    "echo $$ > \"$DIR/$1.tmp\" && mv \"$DIR/$1.tmp\" \"$DIR/$1\"\nexec sleep \"$2\"\n";

/// `$DIR/stubborn.sh NAME`: record this process's pid in `$DIR/NAME`, and
/// survive SIGTERM, noting each one in `$DIR/NAME.term`; only SIGKILL ends
/// it. It forks a `sleep` every 0.1 s meanwhile.
const STUBBORN_SH: &str = "trap 'echo TERM >> \"$DIR/$1.term\"' TERM\n\
     echo $$ > \"$DIR/$1.tmp\" && mv \"$DIR/$1.tmp\" \"$DIR/$1\"\n\
     while :; do sleep 0.1; done\n";

/// The start time of process `pid` (clock ticks since boot, field 22 of
/// `/proc/PID/stat`): with the pid, it names one process, never a later
/// one that reuses the pid.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The processes a command started, each recording its pid in a file of
/// the scratch directory, checked by pid. Dropping it SIGKILLs `run` and
/// every recorded process still alive (the same process: its start time
/// is checked), so a failing test leaves nothing behind.
pub struct Family {
    dir: PathBuf,
    names: Vec<&'static str>,
    seen: std::cell::RefCell<Vec<(String, i32, u64)>>,
}

impl Family {
    /// A family whose members will record their pids under `names`; writes
    /// `rec.sh` and `stubborn.sh` into the target's scratch directory.
    pub fn new(t: &Target, names: &[&'static str]) -> Family {
        std::fs::write(t.path("rec.sh"), REC_SH).unwrap();
        std::fs::write(t.path("stubborn.sh"), STUBBORN_SH).unwrap();
        Family {
            dir: t.scratch.clone(),
            names: names.to_vec(),
            seen: std::cell::RefCell::new(Vec::new()),
        }
    }

    /// Watch process `pid` too (killed on drop if still the same process).
    pub fn watch(&self, name: &str, pid: u32) {
        let pid = i32::try_from(pid).expect("a pid");
        if let Some(start) = start_time(pid) {
            self.seen.borrow_mut().push((name.to_string(), pid, start));
        }
    }

    /// Wait until every member has recorded its pid; the pids.
    pub fn wait(&self, limit: Duration) -> Vec<(String, i32)> {
        let deadline = Instant::now() + limit;
        let mut out = Vec::new();
        for name in &self.names {
            let left = deadline.saturating_duration_since(Instant::now());
            let text = wait_for_file(&self.dir.join(name), left.max(Duration::from_millis(1)));
            let pid: i32 = text.parse().expect("a pid in the file");
            if let Some(start) = start_time(pid) {
                self.seen.borrow_mut().push((name.to_string(), pid, start));
            }
            out.push((name.to_string(), pid));
        }
        out
    }

    /// The members (by name and pid) still alive now.
    pub fn alive(&self) -> Vec<String> {
        self.members()
            .into_iter()
            .filter(|(_, pid)| alive(&pid.to_string()))
            .map(|(name, pid)| format!("{name} (pid {pid})"))
            .collect()
    }

    /// Whether member `name` is alive.
    pub fn is_alive(&self, name: &str) -> bool {
        self.members()
            .iter()
            .any(|(n, pid)| n == name && alive(&pid.to_string()))
    }

    fn members(&self) -> Vec<(String, i32)> {
        self.seen
            .borrow()
            .iter()
            .filter(|(name, _, _)| self.names.contains(&name.as_str()))
            .map(|(name, pid, _)| (name.clone(), *pid))
            .collect()
    }

    /// Poll until no member is alive or `by` has passed; the ones alive.
    pub fn dead_by(&self, by: Instant) -> Vec<String> {
        loop {
            let left = self.alive();
            if left.is_empty() || Instant::now() >= by {
                return left;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Family {
    fn drop(&mut self) {
        // `run` first (the watched ones come first), then the others.
        for (_, pid, start) in self.seen.borrow().iter() {
            if start_time(*pid) == Some(*start) {
                if let Some(pid) = Pid::from_raw(*pid) {
                    let _ = kill_process(pid, Signal::KILL);
                }
            }
        }
    }
}

/// The members of [`FAMILY_SCRIPT`].
pub const FAMILY: &[&str] = &[
    "sh",
    "child",
    "pipe1",
    "pipe2",
    "daemon",
    "session",
    "session-daemon",
    "foreground",
];

/// A shell script that starts what real jobs start: a background child, a
/// pipeline, a double-forked daemon (orphaned at once), a child in a new
/// session (`setsid`), a double-forked daemon in a new session, and a
/// foreground program the shell waits for. Each records its pid.
pub const FAMILY_SCRIPT: &str = "\
echo $$ > \"$DIR/sh.tmp\" && mv \"$DIR/sh.tmp\" \"$DIR/sh\"
sh \"$DIR/rec.sh\" child 300 &
sh \"$DIR/rec.sh\" pipe1 300 | sh \"$DIR/rec.sh\" pipe2 300 &
sh -c '(sh \"$DIR/rec.sh\" daemon 300 &) &'
setsid sh \"$DIR/rec.sh\" session 300 &
setsid sh -c 'sh \"$DIR/rec.sh\" session-daemon 300 &' &
sh \"$DIR/rec.sh\" foreground 300
echo done
";

/// `run --ttl TTL --grace 2 URL -- sh -c SCRIPT` with `$DIR` set, and a
/// family watching `names` and `run` itself. Its output goes to files
/// (see [`finish_run`]).
pub fn spawn_family(
    t: &Target,
    url: &str,
    ttl_s: u64,
    script: &str,
    names: &[&'static str],
) -> (Child, Family) {
    let family = Family::new(t, names);
    let ttl = ttl_s.to_string();
    let mut cmd = t.command([
        "run", "--ttl", &ttl, "--grace", "2", url, "--", "sh", "-c", script,
    ]);
    let out = std::fs::File::create(t.path("run.out")).unwrap();
    let err = std::fs::File::create(t.path("run.err")).unwrap();
    cmd.env("DIR", &t.scratch).stdout(out).stderr(err);
    let holder = cmd.spawn().expect("the binary starts");
    family.watch("run", holder.id());
    (holder, family)
}

/// Wait for a `run` started by [`spawn_family`] to exit within `limit`
/// (kill it and fail otherwise); its output is read from files, so
/// processes it leaves behind, which would hold a pipe open, cannot hold
/// up the test.
pub fn finish_run(t: &Target, mut child: Child, limit: Duration) -> Done {
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let done = Done {
        code: status.and_then(|s| s.code()),
        stdout: std::fs::read_to_string(t.path("run.out")).unwrap_or_default(),
        stderr: std::fs::read_to_string(t.path("run.err")).unwrap_or_default(),
    };
    assert!(
        status.is_some(),
        "run did not exit within {limit:?}: {done:?}"
    );
    done
}

/// The issue's example, with every kind of descendant: after a `break`,
/// `run` exits 76 and every process the command started is dead, by pid,
/// before the write deadline the lost lease had.
pub fn every_process_of_the_command_is_stopped_when_the_lease_is_lost(t: &Target) {
    let url = t.url("lost-family");
    let (holder, family) = spawn_family(t, &url, 3, FAMILY_SCRIPT, FAMILY);
    family.wait(Duration::from_secs(10));
    let id = t.holder(&url).expect("held");
    let broke = t.run(["break", "--holder", id.as_str(), url.as_str()]);
    let broken_at = Instant::now();
    assert_eq!(broke.code, Some(0), "{broke:?}");
    // Every renewal that landed was sent before the break: the deadline is
    // at most 2/3 of the 3 s TTL after it. Plus what polling can see.
    let left = family.dead_by(broken_at + Duration::from_millis(2600));
    let done = finish_run(t, holder, Duration::from_secs(20));
    assert!(
        left.is_empty(),
        "alive after the write deadline: {left:?}; {done:?}"
    );
    assert_eq!(done.code, Some(LOST), "{done:?}");
    assert!(family.alive().is_empty(), "alive after run exited");
}

/// Renewals that stop landing (`cut(true)`): every process of the command
/// is dead by the write deadline, and `run` exits 76.
pub fn every_process_of_the_command_is_dead_by_the_deadline_when_renewals_hang(
    t: &Target,
    cut: &mut dyn FnMut(bool),
) {
    let url = t.url("fenced-family");
    let (holder, family) = spawn_family(t, &url, 3, FAMILY_SCRIPT, FAMILY);
    family.wait(Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    let cut_at = Instant::now();
    cut(true);
    let left = family.dead_by(cut_at + Duration::from_millis(2600));
    let done = finish_run(t, holder, Duration::from_secs(20));
    cut(false);
    assert!(
        left.is_empty(),
        "alive after the write deadline: {left:?}; {done:?}"
    );
    assert_eq!(done.code, Some(LOST), "{done:?}");
}

/// One child survives SIGTERM (it notes it and goes on), another exits on
/// it: when renewals hang, the first is seen alive after the second died
/// (so it got SIGTERM and survived it), and is dead by the write deadline
/// all the same: it was sent SIGKILL. It runs in a new session, orphaned,
/// outside the command's process group. TTL 6 s: SIGTERM 1 s before the
/// deadline.
pub fn a_child_that_ignores_sigterm_is_killed_at_the_deadline(
    t: &Target,
    cut: &mut dyn FnMut(bool),
) {
    let url = t.url("stubborn");
    let script = "setsid sh -c 'sh \"$DIR/stubborn.sh\" stubborn &' &\n\
                  sh \"$DIR/rec.sh\" meek 300\n";
    let (holder, family) = spawn_family(t, &url, 6, script, &["stubborn", "meek"]);
    family.wait(Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    let cut_at = Instant::now();
    cut(true);
    let deadline = cut_at + Duration::from_secs(4);
    let observation = Duration::from_millis(600);
    while family.is_alive("meek") && Instant::now() < deadline + observation {
        std::thread::sleep(Duration::from_millis(5));
    }
    let meek_dead_at = Instant::now();
    let stubborn_then = family.is_alive("stubborn");
    let left = family.dead_by(deadline + observation);
    let done = finish_run(t, holder, Duration::from_secs(20));
    cut(false);
    assert!(
        meek_dead_at < deadline,
        "the child that exits on SIGTERM was alive at the deadline: {done:?}"
    );
    assert!(
        stubborn_then,
        "the stubborn child died with the other: it never survived a SIGTERM: {done:?}"
    );
    assert!(
        t.path("stubborn.term").exists(),
        "the stubborn child never got SIGTERM: {done:?}"
    );
    assert!(
        left.is_empty(),
        "alive after the write deadline: {left:?}; {done:?}"
    );
    assert_eq!(done.code, Some(LOST), "{done:?}");
    assert!(done.stderr.contains("SIGKILL"), "{done:?}");
}

/// SIGINT and SIGTERM to `run`: every process of the command is gone when
/// `run` exits (130, 143), and the lease is released. SIGTSTP before them
/// is ignored (said on stderr).
pub fn a_signal_to_run_stops_every_process_of_the_command(t: &Target) {
    for (sig, code, name) in [(Signal::INT, 130, "int"), (Signal::TERM, 143, "term")] {
        let url = t.url(&format!("signal-family-{name}"));
        for member in FAMILY {
            let _ = std::fs::remove_file(t.path(member));
        }
        let (holder, family) = spawn_family(t, &url, 3, FAMILY_SCRIPT, FAMILY);
        family.wait(Duration::from_secs(10));
        // Not suspended: a stopped run could neither renew nor stop them.
        signal(&holder, Signal::TSTP);
        std::thread::sleep(Duration::from_millis(300));
        let state = std::fs::read_to_string(format!("/proc/{}/stat", holder.id()))
            .ok()
            .and_then(|stat| stat.rsplit(") ").next().map(|r| r.chars().next()));
        assert_ne!(state, Some(Some('T')), "SIGTSTP stopped run");
        signal(&holder, sig);
        let done = finish_run(t, holder, Duration::from_secs(20));
        assert!(done.stderr.contains("SIGTSTP ignored"), "{done:?}");
        let left = family.alive();
        assert!(left.is_empty(), "{sig:?}: alive after run exited: {left:?}");
        assert_eq!(done.code, Some(code), "{sig:?}: {done:?}");
        assert_eq!(t.inspect(&url)["state"], "free", "{sig:?}: {done:?}");
    }
}

/// `run` killed with SIGKILL (it can neither signal nor release): every
/// process of the command dies with it, within moments.
pub fn every_process_of_the_command_dies_with_a_killed_run(t: &Target) {
    let url = t.url("killed-family");
    let (mut holder, family) = spawn_family(t, &url, 3, FAMILY_SCRIPT, FAMILY);
    family.wait(Duration::from_secs(10));
    holder.kill().expect("SIGKILL");
    let killed_at = Instant::now();
    let _ = holder.wait();
    let left = family.dead_by(killed_at + Duration::from_secs(2));
    assert!(left.is_empty(), "alive 2 s after run was killed: {left:?}");
}

/// The pids of the children of process `parent`.
pub fn children_of(parent: u32) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        if rest.split_whitespace().nth(1) == Some(parent.to_string().as_str()) {
            out.push(pid);
        }
    }
    out
}

/// `run`'s child (the supervisor of the command) killed with SIGKILL, as
/// the OOM killer might: `run` kills every process it left, releases the
/// lease and exits.
pub fn every_process_dies_when_the_supervisor_is_killed(t: &Target) {
    let url = t.url("supervisor-killed");
    let (holder, family) = spawn_family(t, &url, 3, FAMILY_SCRIPT, FAMILY);
    family.wait(Duration::from_secs(10));
    let children = children_of(holder.id());
    assert_eq!(children.len(), 1, "run has one child: {children:?}");
    let supervisor = children[0];
    family.watch("supervisor", u32::try_from(supervisor).unwrap());
    kill_pid(&supervisor.to_string());
    let done = finish_run(t, holder, Duration::from_secs(20));
    let left = family.alive();
    assert!(
        left.is_empty(),
        "alive after run exited: {left:?}; {done:?}"
    );
    assert_eq!(done.code, Some(128 + 9), "{done:?}");
    assert_eq!(t.inspect(&url)["state"], "free", "{done:?}");
}

/// A command that exits by itself leaving processes behind (one that exits
/// on SIGTERM, one in a new session that survives it): they are stopped
/// (SIGTERM, then SIGKILL after the grace period) before `run` exits, and
/// `run` exits with the command's status.
pub fn what_the_command_leaves_behind_is_stopped(t: &Target) {
    for code in [0, 3] {
        let url = t.url(&format!("leftovers-{code}"));
        for member in ["left", "left-stubborn", "left-stubborn.term"] {
            let _ = std::fs::remove_file(t.path(member));
        }
        let script = format!(
            "sh \"$DIR/rec.sh\" left 300 &\n\
             setsid sh -c 'sh \"$DIR/stubborn.sh\" left-stubborn &' &\n\
             while ! test -e \"$DIR/left\" || ! test -e \"$DIR/left-stubborn\"; do sleep 0.05; done\n\
             exit {code}\n"
        );
        let (holder, family) = spawn_family(t, &url, 3, &script, &["left", "left-stubborn"]);
        family.wait(Duration::from_secs(10));
        let done = finish_run(t, holder, Duration::from_secs(20));
        let left = family.alive();
        assert!(
            left.is_empty(),
            "alive after run exited: {left:?}; {done:?}"
        );
        assert_eq!(done.code, Some(code), "{done:?}");
        assert!(
            t.path("left-stubborn.term").exists(),
            "SIGTERM came first: {done:?}"
        );
        assert_eq!(t.inspect(&url)["state"], "free", "{done:?}");
    }
}
