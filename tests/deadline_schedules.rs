//! The three schedules of issue 19, against moto, with credentials from a
//! real `credential_process` script as users configure them (an `aws sso`
//! helper, a vault agent), and a loopback proxy that delays what it
//! forwards and notes when each request arrived from the client:
//!
//! 1. credentials inside their refresh window and a source that hangs,
//!    with a slow network path: no request of the holder's may leave after
//!    its deadline (it once did: a fenced write reached the bucket after
//!    the successor had taken over);
//! 2. a `credential_process` that leaves a child holding its standard
//!    output: `bucket-lease run` keeps renewing (a renewal once hung 20 s
//!    and the command was killed);
//! 3. expired credentials while another thread's refresh is slow: a call
//!    with a short deadline ends by it (it once waited 7.8 s).
//!
//! Each test prints its timeline (offsets from its start) for the record.
//! Without moto each test prints a note and passes, unless
//! `BUCKET_LEASE_REQUIRE_SERVERS=1`.
#![cfg(feature = "minio")]

#[path = "../backends/tests/common/mod.rs"]
mod common;
mod s3_proxy;

use bucket_lease::backends::credentials::chain_with_env;
use bucket_lease::store::{Delivery, DEADLINE_SLACK};
use bucket_lease::KeptLease;
use bucket_lease::{
    Contender, Event, FencedWriter, Keeper, KeeperOptions, LeaseOptions, Store, Wait,
};
use common::Server;
use s3_proxy::FaultProxy;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A directory of the test's own, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(common::unique_prefix(name).replace('/', "-"));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The shell code that prints credentials moto accepts, expiring
/// `lifetime_s` seconds from now.
fn print_credentials(lifetime_s: u32) -> String {
    let (key, secret) = ("test-key", "test-secret");
    format!(
        "printf '{{\"Version\":1,\"AccessKeyId\":\"{key}\",\"SecretAccessKey\":\"{secret}\",\
         \"SessionToken\":\"token\",\"Expiration\":\"%s\"}}' \
         \"$(date -u -d '+{lifetime_s} seconds' +%Y-%m-%dT%H:%M:%SZ)\"\n"
    )
}

/// Write `body` as the credential_process script of the default profile in
/// `dir`, and give the variables that select it (and nothing else of the
/// machine's: a fresh HOME, no instance metadata).
fn process_profile(dir: &TempDir, body: &str) -> Vec<(&'static str, String)> {
    let script = dir.path("credentials.sh");
    std::fs::write(&script, body).unwrap();
    let config = dir.path("config");
    std::fs::write(
        &config,
        format!("[default]\ncredential_process = sh {}\n", script.display()),
    )
    .unwrap();
    vec![
        ("HOME", dir.0.display().to_string()),
        ("AWS_CONFIG_FILE", config.display().to_string()),
        (
            "AWS_SHARED_CREDENTIALS_FILE",
            dir.path("none").display().to_string(),
        ),
        ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
    ]
}

/// A moto store at `endpoint` signing with the credentials `vars` select.
fn store_with(endpoint: &str, vars: &[(&'static str, String)]) -> Arc<dyn Store> {
    let env = |name: &str| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    };
    let provider = chain_with_env(&env).expect("the script's first run gives credentials");
    let store = common::builder(Server::Moto)
        .expect("moto is running")
        .endpoint(endpoint)
        .credentials_provider(provider)
        .build()
        .unwrap();
    Arc::new(store)
}

/// Seconds since `t0`, for the timelines.
fn at(t0: Instant, t: Instant) -> String {
    format!("+{:.2} s", t.saturating_duration_since(t0).as_secs_f64())
}

/// Schedule 1. A holds the lease (TTL 6 s); then its credentials are in
/// their refresh window with a source that hangs, and its network path
/// adds 2.5 s to every request. A's fenced write must go out at once with
/// the valid credentials (not after a refresh that runs to the deadline),
/// and nothing of A's may reach the proxy after A's write deadline, while
/// B waits and takes over.
#[test]
fn no_request_of_a_fenced_holder_leaves_after_its_deadline() {
    let Some(moto) = common::server(Server::Moto) else {
        return;
    };
    let dir = TempDir::new("schedule-1");
    let hang = dir.path("hang");
    let script = format!(
        "if [ -e {hang} ]; then sleep 30 </dev/null >/dev/null 2>&1; exit 1; fi\n{}",
        print_credentials(60),
        hang = hang.display()
    );
    let proxy = FaultProxy::start(&moto);
    let store_a = store_with(&proxy.endpoint(), &process_profile(&dir, &script));
    let store_b: Arc<dyn Store> = Arc::new(common::store(Server::Moto).unwrap());
    let prefix = common::unique_prefix("schedule-1");
    let lease_a = Contender::new(Arc::clone(&store_a), &prefix, LeaseOptions::new(6))
        .try_acquire()
        .expect("A takes the free lease");
    // From now on the source hangs and the path is slow.
    std::fs::write(&hang, "").unwrap();
    proxy.delay(Duration::from_millis(2500));
    let t0 = Instant::now();
    let from = proxy.log().len();
    let keeper = Keeper::spawn(lease_a, KeeperOptions::new()).unwrap();
    // The latest write deadline A had: each request of A's is bounded by it.
    let mut deadline_a = keeper.lease().write_deadline().expect("held");
    let writer = FencedWriter::new(keeper.lease().clone());
    let started = Instant::now();
    let written = writer.put_new(&format!("{prefix}/data/a"), b"from A");
    let returned = Instant::now();
    eprintln!(
        "A's put_new started at {}, returned at {}: {written:?}",
        at(t0, started),
        at(t0, returned)
    );
    // A is fenced when its renewals cannot land in time.
    let fenced = loop {
        match keeper.events().recv_timeout(Duration::from_secs(20)) {
            Ok(Event::Fenced) => break Instant::now(),
            Ok(event) => {
                eprintln!("A's keeper at {}: {event:?}", at(t0, Instant::now()));
                if let Some(deadline) = keeper.lease().write_deadline() {
                    deadline_a = deadline_a.max(deadline);
                }
            }
            Err(e) => panic!("A was never fenced: {e}"),
        }
    };
    eprintln!(
        "A fenced at {} (its write deadline {})",
        at(t0, fenced),
        at(t0, deadline_a)
    );
    let lease_b = Contender::new(Arc::clone(&store_b), &prefix, LeaseOptions::new(6))
        .acquire_with(&Wait::until(Instant::now() + Duration::from_secs(20)))
        .expect("B takes over once A's record is stale");
    let took_over = Instant::now();
    eprintln!(
        "B holds epoch {} from {}",
        lease_b.epoch(),
        at(t0, took_over)
    );
    // Wait until anything A sent has passed the proxy.
    std::thread::sleep(Duration::from_secs(3));
    let sent: Vec<_> = proxy.log()[from..]
        .iter()
        .filter(|s| s.path.contains(&prefix))
        .cloned()
        .collect();
    for s in &sent {
        eprintln!(
            "A's {} {} left A at {}, reached moto at {}",
            s.method,
            s.path,
            at(t0, s.arrived),
            s.forwarded.map_or("-".into(), |f| at(t0, f))
        );
    }
    let late: Vec<_> = sent.iter().filter(|s| s.arrived > deadline_a).collect();
    assert!(
        late.is_empty(),
        "requests of A's left after its write deadline ({}): {late:?}",
        at(t0, deadline_a)
    );
    assert!(
        written.is_ok() && returned < started + Duration::from_secs(3),
        "A's write waited on the hanging credentials source: {written:?}, returned at {}",
        at(t0, returned)
    );
    assert!(took_over > deadline_a);
    drop(keeper);
    lease_b.release().unwrap();
}

/// `bucket-lease BEFORE URL -- COMMAND` with a fresh lease URL on `moto`,
/// signing with what the `credential_process` `script` in `dir` prints,
/// and nothing else of the machine's environment but `PATH`: its exit
/// status and standard error (its output goes nowhere).
#[cfg(feature = "cli")]
fn run_signing_with(
    moto: &str,
    dir: &TempDir,
    script: &str,
    before: &[&str],
    command: &[&str],
) -> std::process::Output {
    let mut vars = process_profile(dir, script);
    vars.push(("AWS_ENDPOINT_URL", moto.to_string()));
    vars.push(("AWS_REGION", "us-east-1".into()));
    vars.push(("PATH", std::env::var("PATH").unwrap_or_default()));
    let url = format!(
        "minio://{}/{}",
        common::bucket(),
        common::unique_prefix("process-credentials")
    );
    std::process::Command::new(env!("CARGO_BIN_EXE_bucket-lease"))
        .env_clear()
        .envs(vars.iter().map(|(n, v)| (*n, v.as_str())))
        .args(before)
        .arg(&url)
        .arg("--")
        .args(command)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap()
}

/// Schedule 2. A `credential_process` whose later runs print credentials
/// and leave a child holding the pipe for 20 s (a cache agent): `run`
/// keeps renewing its 3 s lease while the command sleeps 5 s, and exits 0
/// soon after the command does.
#[cfg(feature = "cli")]
#[test]
fn run_keeps_renewing_when_the_credential_process_leaves_a_child_on_its_output() {
    let Some(moto) = common::server(Server::Moto) else {
        return;
    };
    let dir = TempDir::new("schedule-2");
    let ran = dir.path("ran");
    let pids = dir.path("children");
    let script = format!(
        "if [ -e {ran} ]; then sleep 20 & echo $! >> {pids}; fi\ntouch {ran}\n{}",
        print_credentials(60),
        ran = ran.display(),
        pids = pids.display()
    );
    let t0 = Instant::now();
    let output = run_signing_with(
        &moto,
        &dir,
        &script,
        &["run", "--ttl", "3"],
        &["sleep", "5"],
    );
    let took = t0.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!(
        "run exited {:?} after {took:?}; it said:\n{stderr}",
        output.status.code()
    );
    // The children the script left are the test's to end.
    for pid in std::fs::read_to_string(&pids).unwrap_or_default().lines() {
        let _ = std::process::Command::new("kill").arg(pid).status();
    }
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(took < Duration::from_secs(9), "run took {took:?}: {stderr}");
}

/// A refresh by a `credential_process` still running when the command
/// ends is `run`'s own child, not one the command left: `run`'s sweep of
/// the command's leftovers spares it (neither kills nor reaps it), says
/// nothing about it, and `run` releases and exits 0.
#[cfg(feature = "cli")]
#[test]
fn run_spares_a_credential_refresh_in_flight_when_the_command_ends() {
    let Some(moto) = common::server(Server::Moto) else {
        return;
    };
    let dir = TempDir::new("refresh-at-exit");
    let ran = dir.path("ran");
    let refreshed = dir.path("refreshed");
    // The first run's credentials are inside the refresh window, so a
    // refresh starts at once; each later run takes 4 s.
    let script = format!(
        "if [ -e {ran} ]; then touch {refreshed}; sleep 4; fi\ntouch {ran}\n{}",
        print_credentials(120),
        ran = ran.display(),
        refreshed = refreshed.display()
    );
    let output = run_signing_with(
        &moto,
        &dir,
        &script,
        &["-v", "run", "--ttl", "10"],
        &["sleep", "1"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("run exited {:?}; it said:\n{stderr}", output.status.code());
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("left"), "{stderr}");
    assert!(!stderr.contains("SIGKILL"), "{stderr}");
    assert!(stderr.contains("released the lease"), "{stderr}");
    assert!(refreshed.exists(), "a refresh ran while the command did");
}

/// Schedule 3. The credentials have expired and the refresh in flight (on
/// another thread, with no deadline of its own) takes 8 s: a read with a
/// 300 ms deadline ends by it, with nothing sent, and the slow caller gets
/// its answer once the refresh lands.
#[test]
fn a_short_deadline_does_not_wait_for_another_threads_slow_refresh() {
    let Some(moto) = common::server(Server::Moto) else {
        return;
    };
    let dir = TempDir::new("schedule-3");
    let ran = dir.path("ran");
    let script = format!(
        "if [ -e {ran} ]; then sleep 8; {}; exit 0; fi\ntouch {ran}\n{}",
        print_credentials(3600).trim_end(),
        print_credentials(2),
        ran = ran.display()
    );
    let store = store_with(&moto, &process_profile(&dir, &script));
    let key = format!("{}/LEASE", common::unique_prefix("schedule-3"));
    wait_until_expired(&*store, &key);
    let t0 = Instant::now();
    let slow = {
        let (store, key) = (Arc::clone(&store), key.clone());
        std::thread::spawn(move || {
            let result = store.get(&key, None);
            (
                Instant::now(),
                result.map(|_| ()).map_err(|e| e.to_string()),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let deadline = Instant::now() + Duration::from_millis(300);
    let result = store.get(&key, Some(deadline));
    let returned = Instant::now();
    eprintln!(
        "the 300 ms read returned at {} (deadline {}): {result:?}",
        at(t0, returned),
        at(t0, deadline)
    );
    let e = result.expect_err("no valid credentials by the deadline");
    assert!(
        returned <= deadline + DEADLINE_SLACK,
        "returned {:?} after its deadline: {e}",
        returned - deadline
    );
    assert_eq!(e.delivery(), Delivery::NotSent, "{e}");
    let (slow_returned, slow_result) = slow.join().unwrap();
    eprintln!(
        "the read without a deadline returned at {}: {slow_result:?}",
        at(t0, slow_returned)
    );
    assert!(
        matches!(&slow_result, Err(e) if e.contains("not found")),
        "the slow caller reads (the key is absent) once the refresh lands: {slow_result:?}"
    );
}

/// Sign one read with the script's first credentials, then wait out their
/// two seconds.
fn wait_until_expired(store: &dyn Store, key: &str) {
    let _ = store.get(key, Some(Instant::now() + Duration::from_secs(5)));
    std::thread::sleep(Duration::from_millis(2200));
}
