//! What one renewal costs, on each store, beside a floor, measured in one
//! run so the numbers compare with each other. docs/BENCHMARKS.md explains
//! every column and holds a run's table; `bash scripts/bench.sh` starts the
//! servers, runs this and prints the Markdown table.
//!
//! ```text
//! cargo bench --bench renewal                       # memory, fs
//! bash scripts/test-servers.sh start; set -a; . .ci/tmp/servers.env; set +a
//! cargo bench --bench renewal --features minio      # + moto over HTTP, and the floor
//! cargo bench --bench renewal --features minio -- --markdown
//! ```
//!
//! Rows (each `BUCKET_LEASE_BENCH_OPS` operations a batch, default 200):
//!
//! - `memory renew`, `fs renew`: `Lease::renew` on the in-memory store and
//!   on a directory (their CPU includes the store's own work);
//! - with moto: `http renew` (`Lease::renew` through the HTTP store, one
//!   kept-alive connection), `http new client` (the same conditional PUT
//!   through a store opened afresh, so a new connection, each time), and
//!   `floor`: the same If-Match PUT of a LEASE-sized body, signed with
//!   aws-sigv4, written by hand on one kept-alive `TcpStream`
//!   (`benches/renewal/floor.rs`); and `floor, direct signing`, the same
//!   signed as the stores sign now (the canonical request by hand, a key
//!   derived once a day; its first requests checked against aws-sigv4's).
//!
//! Every row runs one batch per repetition (`BUCKET_LEASE_BENCH_REPS`,
//! default 5), the rows interleaved (their order rotated each repetition),
//! so that a noisy neighbour hits every row alike. The table
//! (`src/bin/bucket-lease-bench/measure.rs`, shared with `bucket-lease bench`)
//! gives latency percentiles, whole-process CPU per operation (median over
//! batches and range), system calls per operation (from `strace -f -c`
//! slopes, when `strace` is installed and `BUCKET_LEASE_BENCH_STRACE` is
//! not `0`), ratios to the floor, and ratios to the previous run's figures
//! (kept in `bench-renewal.json` beside the bench's build directory,
//! `target/release/`).
//!
//! Then punctuality under load: a `Keeper` renewing every second (TTL 3 s:
//! it renews every third of a TTL) while the process runs one busy thread
//! per core, for `BUCKET_LEASE_BENCH_LOAD_SECS` (default 30); lateness is
//! each renewal's start minus (the previous renewal's start + 1 s).

#[allow(dead_code)] // bucket-lease bench uses some functions the bench does not
#[path = "../src/bin/bucket-lease-bench/measure.rs"]
mod measure;

#[cfg(feature = "minio")]
#[path = "renewal/floor.rs"]
mod floor;

use bucket_lease::backends::fs::DirStore;
use bucket_lease::memory::MemoryStore;
use bucket_lease::store::{DeleteMode, Object, PutOptions, StoreError};
use bucket_lease::KeptLease;
use bucket_lease::{store::Version, Keeper, KeeperOptions, Lease, LeaseOptions, Store};
use measure::Row;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Op = Box<dyn FnMut() -> Result<(), String>>;

/// A row and the operation it measures.
struct Subject {
    row: Row,
    op: Op,
}

/// Subjects and what to do once they are measured.
struct Setup {
    subjects: Vec<Subject>,
    cleanups: Vec<Box<dyn FnOnce()>>,
}

impl Setup {
    fn add(&mut self, name: &str, op: impl FnMut() -> Result<(), String> + 'static) {
        self.subjects.push(Subject {
            row: Row::new(name),
            op: Box::new(op),
        });
    }

    fn clean(self) -> Vec<Row> {
        let rows = self.subjects.into_iter().map(|s| s.row).collect();
        for cleanup in self.cleanups {
            cleanup();
        }
        rows
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn lease_on(store: Arc<dyn Store>, prefix: &str, ttl_s: u64) -> Lease {
    Lease::acquire(store, prefix, LeaseOptions::new(ttl_s)).expect("the bench takes its lease")
}

fn renewing(lease: Arc<Lease>) -> impl FnMut() -> Result<(), String> {
    move || lease.renew().map_err(|e| e.to_string())
}

fn setup(prefix: &str) -> Setup {
    let mut setup = Setup {
        subjects: Vec::new(),
        cleanups: Vec::new(),
    };
    let memory = Arc::new(lease_on(Arc::new(MemoryStore::new()), prefix, 30));
    setup.add("memory renew", renewing(memory));

    let dir = std::env::temp_dir().join(format!("bucket-lease-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fs = Arc::new(lease_on(
        Arc::new(DirStore::open(&dir).unwrap()),
        prefix,
        30,
    ));
    setup.add("fs renew", renewing(fs.clone()));
    setup.cleanups.push(Box::new(move || {
        fs.release().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }));

    http(prefix, &mut setup);
    setup
}

/// moto, when `scripts/test-servers.sh` started it and the bench has an
/// HTTP store.
fn moto() -> Option<(String, String)> {
    let Ok(endpoint) = std::env::var("BUCKET_LEASE_TEST_MOTO_URL") else {
        eprintln!("note: BUCKET_LEASE_TEST_MOTO_URL is not set; no HTTP rows and no floor");
        return None;
    };
    if cfg!(not(feature = "minio")) {
        eprintln!("note: moto is running but the HTTP rows need --features minio");
        return None;
    }
    let bucket =
        std::env::var("BUCKET_LEASE_TEST_BUCKET").unwrap_or_else(|_| "bucket-lease-test".into());
    Some((endpoint, bucket))
}

#[cfg(not(feature = "minio"))]
fn open_moto(_: &str) -> Option<Arc<dyn Store>> {
    None
}

#[cfg(feature = "minio")]
fn open_moto(prefix: &str) -> Option<Arc<dyn Store>> {
    use bucket_lease::backends::config;
    let (endpoint, bucket) = moto()?;
    let env = move |name: &str| match name {
        "AWS_ENDPOINT_URL" => Some(endpoint.clone()),
        "AWS_ACCESS_KEY_ID" => Some("test-key".to_string()),
        "AWS_SECRET_ACCESS_KEY" => Some("test-secret".to_string()),
        "AWS_REGION" => Some("us-east-1".to_string()),
        _ => None,
    };
    let url = format!("minio://{bucket}/{prefix}");
    Some(config::open_with_env(&url, &env).expect("moto opens").0)
}

#[cfg(not(feature = "minio"))]
fn http(_: &str, _: &mut Setup) {
    moto();
}

#[cfg(feature = "minio")]
fn http(prefix: &str, setup: &mut Setup) {
    use bucket_lease::{store::PutMode, store::PutOptions};
    let Some(store) = open_moto(prefix) else {
        return;
    };
    let lease = Arc::new(lease_on(store.clone(), prefix, 30));
    setup.add("http renew", renewing(lease.clone()));

    // A LEASE-sized body: the lease's own record.
    let body = store
        .get(lease.key(), None)
        .expect("the lease's record reads back")
        .body;

    // The same conditional write through a store (so a connection) opened
    // afresh each time.
    let key = format!("{prefix}/new-client/LEASE");
    let create = PutOptions::new(PutMode::Overwrite);
    let mut version = store.put(&key, &body, &create).unwrap();
    let cold_body = body.clone();
    let cold_key = key.clone();
    let cold_prefix = prefix.to_string();
    setup.add("http new client", move || {
        let fresh = open_moto(&cold_prefix).expect("moto opens");
        let mode = PutMode::Update(version.clone());
        version = fresh
            .put(&cold_key, &cold_body, &PutOptions::new(mode))
            .map_err(|e| e.to_string())?;
        Ok(())
    });

    let (endpoint, bucket) = moto().expect("moto is running");
    let floor_key = format!("{prefix}/floor/LEASE");
    let direct_key = format!("{prefix}/floor-direct/LEASE");
    for (name, signing, key) in [
        ("floor", floor::Signing::AwsSigv4, &floor_key),
        (DIRECT_FLOOR, floor::Signing::Direct, &direct_key),
    ] {
        let mut floor = floor::floor(
            signing,
            &endpoint,
            &bucket,
            key,
            body.clone(),
            "test-key",
            "test-secret",
            "us-east-1",
        )
        .expect("the floor connects");
        floor().expect("the floor creates its object");
        floor().expect("the floor replaces its object");
        setup.add(name, floor);
    }

    setup.cleanups.push(Box::new(move || {
        lease.release().unwrap();
        for key in [key, floor_key, direct_key] {
            let _ = store.delete(&key, &DeleteMode::Unconditional, None);
        }
    }));
}

/// Each subject's operation `n` times after a warm-up, as `--only NAME --ops
/// N` asks: the process `strace -c` counts, and `valgrind --tool=callgrind`
/// (instructions per operation: the slope between two counts of `--ops`,
/// as for system calls). Nothing else runs, not even the CPU clock (whose
/// vDSO lookup valgrind cannot follow).
fn only(name: &str, ops: u32) {
    let prefix = format!("bench/strace-{}", std::process::id());
    let mut setup = setup(&prefix);
    let subject = setup
        .subjects
        .iter_mut()
        .find(|s| s.row.name == name)
        .unwrap_or_else(|| panic!("no row {name:?}"));
    for _ in 0..20 {
        (subject.op)().unwrap();
    }
    for _ in 0..ops {
        (subject.op)().unwrap();
    }
    setup.clean();
}

/// Calls per operation of row `name` (all calls, and `clone`/`clone3`),
/// from two `strace -f -c` runs of this bench with `--only`.
fn strace_slope(name: &str) -> Option<(f64, f64)> {
    let exe = std::env::current_exe().ok()?;
    let (few, many) = (50u32, 250u32);
    let mut totals = Vec::new();
    for ops in [few, many] {
        let out = std::env::temp_dir().join(format!(
            "bucket-lease-bench-strace-{}-{ops}.txt",
            std::process::id()
        ));
        let status = std::process::Command::new("strace")
            .args(["-f", "-c", "-o"])
            .arg(&out)
            .arg(&exe)
            .args(["--only", name, "--ops", &ops.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        let text = std::fs::read_to_string(&out).ok()?;
        let _ = std::fs::remove_file(&out);
        if !status.success() {
            eprintln!("note: strace of {name:?} failed ({status})");
            return None;
        }
        let calls = |syscall: &str| -> f64 {
            text.lines()
                .filter(|l| l.split_whitespace().last() == Some(syscall))
                .filter_map(|l| l.split_whitespace().nth(3)?.parse::<f64>().ok())
                .sum()
        };
        totals.push((calls("total"), calls("clone") + calls("clone3")));
    }
    let span = f64::from(many - few);
    Some((
        (totals[1].0 - totals[0].0) / span,
        (totals[1].1 - totals[0].1) / span,
    ))
}

/// A store that notes when each write of the `LEASE` starts.
#[derive(Debug)]
struct Stamped {
    inner: Arc<dyn Store>,
    puts: Mutex<Vec<Instant>>,
}

impl Store for Stamped {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }
    fn head(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.head(key, deadline)
    }
    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        if key.ends_with("/LEASE") {
            self.puts.lock().unwrap().push(Instant::now());
        }
        self.inner.put(key, body, options)
    }
    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        self.inner.delete(key, mode, deadline)
    }
}

/// A keeper renewing every second while every core is busy: the lateness
/// of each renewal (p50, p99, max) and how many failed.
fn punctuality(prefix: &str) -> Value {
    let secs = env_number("BUCKET_LEASE_BENCH_LOAD_SECS", 30);
    let (inner, store_name): (Arc<dyn Store>, &str) = match open_moto(prefix) {
        Some(store) => (store, "http (moto)"),
        None => (Arc::new(MemoryStore::new()), "memory"),
    };
    let stamped = Arc::new(Stamped {
        inner,
        puts: Mutex::new(Vec::new()),
    });
    let lease = lease_on(stamped.clone(), &format!("{prefix}/load"), 3);
    let interval = lease.renew_interval();
    let keeper = Keeper::spawn(lease, KeeperOptions::new()).expect("the keeper starts");
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..cores)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();
    eprintln!("punctuality: a keeper renewing every {interval:?} on {store_name}, {cores} busy threads, {secs} s");
    std::thread::sleep(Duration::from_secs(secs));
    let starts = stamped.puts.lock().unwrap().clone();
    stop.store(true, Ordering::Relaxed);
    for t in busy {
        t.join().unwrap();
    }
    let failed = keeper
        .events()
        .try_iter()
        .filter(|e| matches!(e, bucket_lease::Event::RenewalFailed { .. }))
        .count();
    keeper.stop().expect("the keeper releases");
    // starts[0] is the acquire's write; each later one a renewal.
    let lateness: Vec<Duration> = starts
        .windows(2)
        .map(|w| (w[1] - w[0]).saturating_sub(interval))
        .collect();
    let ms = |p: f64| measure::percentile(&lateness, p).map(|d| d.as_secs_f64() * 1000.0);
    json!({
        "store": store_name,
        "busy_threads": cores,
        "seconds": secs,
        "interval_ms": interval.as_millis() as u64,
        "renewals": lateness.len(),
        "failed": failed,
        "lateness_p50_ms": ms(50.0),
        "lateness_p99_ms": ms(99.0),
        "lateness_max_ms": ms(100.0),
        "late_over_10ms": lateness.iter().filter(|l| **l > Duration::from_millis(10)).count(),
    })
}

/// Where this run's figures go, and the previous run's come from: beside
/// the bench's build directory (`target/release/bench-renewal.json`).
fn results_path() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.join("bench-renewal.json"))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    if let Some(name) = arg("--only") {
        let ops = arg("--ops").and_then(|n| n.parse().ok()).unwrap_or(100);
        return only(&name, ops);
    }
    let markdown = args.iter().any(|a| a == "--markdown");
    let ops = env_number("BUCKET_LEASE_BENCH_OPS", 200) as u32;
    let reps = env_number("BUCKET_LEASE_BENCH_REPS", 5).max(1) as usize;

    let prefix = format!("bench/renewal-{}", std::process::id());
    let mut setup = setup(&prefix);
    for subject in &mut setup.subjects {
        for _ in 0..20 {
            (subject.op)().expect("warm-up"); // connections, caches, files
        }
    }
    let n = setup.subjects.len();
    for rep in 0..reps {
        for i in 0..n {
            let subject = &mut setup.subjects[(i + rep) % n];
            if let Err(e) = subject.row.batch(ops, &mut subject.op) {
                panic!("{}: {e}", subject.row.name);
            }
        }
        eprintln!("repetition {}/{reps} done", rep + 1);
    }
    let mut rows = setup.clean();

    let strace = std::env::var("BUCKET_LEASE_BENCH_STRACE").as_deref() != Ok("0")
        && std::process::Command::new("strace")
            .arg("-V")
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if strace {
        for row in &mut rows {
            eprintln!("counting the system calls of {:?} under strace", row.name);
            if let Some((calls, clones)) = strace_slope(&row.name) {
                row.syscalls = Some(calls);
                row.clones = Some(clones);
            }
        }
    } else {
        eprintln!("note: strace is not run; no system-call counts");
    }

    let load = punctuality(&prefix);

    let path = results_path();
    let previous: Option<Value> = path
        .as_ref()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice(&b).ok());
    // The ratio base is the lowest floor there is: signed as the stores
    // sign (the direct signer) when that row ran.
    let floor = [DIRECT_FLOOR, "floor"]
        .into_iter()
        .find(|name| rows.iter().any(|r| r.name == *name));
    let cells = measure::table(&rows, floor, previous.as_ref());
    let unix_time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());

    println!(
        "{} renewals a row ({reps} interleaved batches of {ops}), CPU of the whole process",
        reps * ops as usize
    );
    let lines = if markdown {
        measure::render_markdown(&cells)
    } else {
        measure::render_text(&cells)
    };
    for line in lines {
        println!("{line}");
    }
    let f = |k: &str| {
        load[k]
            .as_f64()
            .map_or("-".into(), |v| format!("{v:.1} ms"))
    };
    println!(
        "\npunctuality under load ({} busy threads, {} s, {} store): {} renewals every {} ms, \
         {} failed; lateness p50 {}, p99 {}, max {} (p99 is the max below 100 renewals); \
         {} renewals more than 10 ms late",
        load["busy_threads"],
        load["seconds"],
        load["store"].as_str().unwrap_or("?"),
        load["renewals"],
        load["interval_ms"],
        load["failed"],
        f("lateness_p50_ms"),
        f("lateness_p99_ms"),
        f("lateness_max_ms"),
        load["late_over_10ms"],
    );
    for row in &rows {
        println!("\n{} latency", row.name);
        if markdown {
            println!("```text");
        }
        for line in measure::histogram(&row.latencies) {
            println!("{line}");
        }
        if markdown {
            println!("```");
        }
    }
    if let Some(line) = cpu_goal(&rows) {
        println!("\n{line}");
    }
    if !strace {
        println!("\n{}", measure::STRACE_RECIPE);
    }
    match &previous {
        Some(p) => println!(
            "\nratios ÷ prev are to the run of unix time {} in {}",
            p["unix_time"],
            path.as_ref()
                .map_or(String::new(), |p| p.display().to_string())
        ),
        None => println!("\nno previous run to compare with"),
    }

    let mut out = measure::to_json(&rows);
    out["unix_time"] = json!(unix_time);
    out["reps"] = json!(reps);
    out["ops"] = json!(ops);
    out["punctuality"] = load;
    if let Some(path) = path {
        if let Err(e) = std::fs::write(&path, out.to_string()) {
            eprintln!("note: cannot write {}: {e}", path.display());
        }
    }
}

/// The name of the floor row signed as the stores sign.
const DIRECT_FLOOR: &str = "floor, direct signing";

/// The goal for a renewal's CPU, met or missed: `http renew` at most 1.3
/// times the direct-signing floor and at most the aws-sigv4 floor (both
/// medians of this run). `None` without those three rows.
fn cpu_goal(rows: &[measure::Row]) -> Option<String> {
    let cpu = |name: &str| {
        rows.iter()
            .find(|r| r.name == name)
            .and_then(|r| r.cpu_per_op())
            .map(|c| c.median.as_secs_f64() * 1e6)
    };
    let (renew, direct, old) = (cpu("http renew")?, cpu(DIRECT_FLOOR)?, cpu("floor")?);
    let verdict = |met: bool| if met { "met" } else { "missed" };
    Some(format!(
        "goal for a renewal's CPU: {renew:.0} µs is {:.2}× the direct-signing floor's \
         {direct:.0} µs (goal ≤ 1.3×: {}) and {:.2}× the aws-sigv4 floor's {old:.0} µs \
         (goal ≤ 1×: {})",
        renew / direct,
        verdict(renew <= 1.3 * direct),
        renew / old,
        verdict(renew <= old),
    ))
}
