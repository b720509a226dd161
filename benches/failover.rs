//! Failover and many-lease renewal, measured.
//!
//! ```text
//! cargo bench --bench failover                              # memory and fs stores
//! bash scripts/test-servers.sh start && . .ci/tmp/servers.env
//! cargo bench --bench failover --features minio             # + moto over HTTP
//! BUCKET_LEASE_BENCH_LEASES=200 cargo bench --bench failover  # fewer leases
//! ```
//!
//! **Failover.** A holder takes a lease (TTL 1 s) and crashes: it never
//! renews and never releases. A waiter already in
//! `Contender::acquire_with` takes over. The figure is the delay beyond the
//! ideal: from the moment the record expires by the waiter's clock (the
//! holder's last confirmed write plus the TTL) to the moment the waiter
//! holds the lease, so it includes the waiter's arrival jitter and its
//! whole acquire (read, conditional write, four probe writes). 25 trials
//! run at once on 25 prefixes, four rounds.
//!
//! **Many leases.** 1,000 leases (TTL 30 s) kept by one `KeeperPool` (a
//! scheduler and 3 renewal threads). A wrapper around the store notes when
//! each renewal is sent; lateness is how long after it was due (its
//! lease's previous confirmed write plus a third of the TTL) it was sent.
//! A second run black-holes one lease (every request on its key hangs until
//! its deadline) and reports whether any other lease was fenced.

mod common;

use bucket_lease::memory::MemoryStore;
use bucket_lease::{
    store::DeleteMode, store::Object, store::PutMode, store::PutOptions, store::StoreErrorKind,
    store::Version, Contender, Event, KeeperPool, LeaseOptions, PoolOptions, Store, StoreError,
    Wait,
};
use common::{fs_store, moto, percentiles, resident_bytes, scratch, Opener};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn main() {
    let leases: usize = std::env::var("BUCKET_LEASE_BENCH_LEASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let mut stores: Vec<(&str, Opener)> = vec![
        ("memory", Box::new(|| Arc::new(MemoryStore::new()))),
        ("fs", Box::new(|| fs_store("failover"))),
    ];
    if let Some(open) = moto() {
        stores.push(("moto", open));
    }
    println!("failover: takeover delay beyond the record's expiry (TTL 1 s, 100 trials)");
    println!(
        "{:<8} {:>9} {:>9} {:>9} {:>8} {:>8}",
        "store", "p50 ms", "p99 ms", "max ms", "at once", "failed"
    );
    for (name, open) in &stores {
        // moto serves one request at a time: fewer trials at once, so that
        // its queue does not outlast the 0.67 s fence of an acquire.
        let at_once = if *name == "moto" { 5 } else { 25 };
        let (delays, failed) = failover(&**open, 100 / at_once, at_once);
        let (p50, p99, max) = percentiles(delays);
        println!("{name:<8} {p50:>9.1} {p99:>9.1} {max:>9.1} {at_once:>8} {failed:>8}");
    }
    println!();
    println!(
        "many leases: {leases} leases, TTL 30 s, one pool (4 threads); renewal lateness over 35 s"
    );
    println!(
        "{:<8} {:<12} {:>9} {:>9} {:>9} {:>9} {:>14} {:>13}",
        "store", "run", "renewals", "p50 ms", "p99 ms", "max ms", "others fenced", "KiB per lease"
    );
    for (name, open) in stores.iter().filter(|(n, _)| *n != "memory") {
        for hole in [false, true] {
            let run = many(open(), leases, hole);
            let (p50, p99, max) = percentiles(run.lateness.clone());
            println!(
                "{name:<8} {:<12} {:>9} {p50:>9.2} {p99:>9.2} {max:>9.2} {:>14} {:>13.1}",
                if hole { "1 black hole" } else { "all answer" },
                run.lateness.len(),
                run.others_fenced,
                run.bytes_per_lease / 1024.0
            );
        }
    }
    let _ = std::fs::remove_dir_all(scratch("failover"));
}

/// `rounds` rounds of `at_once` failovers, each on its own prefix; the
/// delays beyond the ideal, and how many trials failed.
fn failover(
    open: &dyn Fn() -> Arc<dyn Store>,
    rounds: usize,
    at_once: usize,
) -> (Vec<Duration>, usize) {
    let mut failed = 0;
    let mut delays = Vec::new();
    for round in 0..rounds {
        let store = open();
        let trials: Vec<_> = (0..at_once)
            .map(|i| {
                let store = Arc::clone(&store);
                let prefix = format!("failover-{}-{round}-{i}", std::process::id());
                std::thread::spawn(move || {
                    let options = LeaseOptions::new(1);
                    let crashed = Contender::new(Arc::clone(&store), &prefix, options.clone())
                        .try_acquire()
                        .map_err(|e| eprintln!("{prefix}: the holder's acquire failed: {e}"))
                        .ok()?;
                    let expires = crashed.confirmed_at() + Duration::from_secs(1);
                    let mut waiter = Contender::new(Arc::clone(&store), &prefix, options);
                    let wait = Wait::until(Instant::now() + Duration::from_secs(10));
                    let lease = waiter
                        .acquire_with(&wait)
                        .map_err(|e| eprintln!("{prefix}: the waiter failed: {e}"))
                        .ok()?;
                    let delay = Instant::now().saturating_duration_since(expires);
                    let _ = lease.release();
                    Some(delay)
                })
            })
            .collect();
        for trial in trials {
            match trial.join().ok().flatten() {
                Some(delay) => delays.push(delay),
                None => failed += 1,
            }
        }
    }
    (delays, failed)
}

/// What a many-lease run measured.
struct ManyRun {
    lateness: Vec<Duration>,
    others_fenced: usize,
    /// Resident memory per held lease, in bytes (the process's growth
    /// while taking and adding them, divided by their number).
    bytes_per_lease: f64,
}

/// Keep `n` leases with one pool for 35 s; with `hole`, black-hole one.
fn many(store: Arc<dyn Store>, n: usize, hole: bool) -> ManyRun {
    let timed = Arc::new(Timed {
        inner: store,
        interval: Duration::from_secs(10),
        last: Mutex::new(HashMap::new()),
        lateness: Mutex::new(Vec::new()),
        hole: Mutex::new(None),
    });
    let store: Arc<dyn Store> = Arc::clone(&timed) as Arc<dyn Store>;
    let pool = KeeperPool::spawn(PoolOptions::new()).expect("threads start");
    let run = format!("many-{}-{}", std::process::id(), u8::from(hole));
    let resident_before = resident_bytes();
    let held: Vec<_> = (0..n)
        .map(|i| {
            let lease = Contender::new(
                Arc::clone(&store),
                &format!("{run}/{i}"),
                LeaseOptions::new(30),
            )
            .try_acquire()
            .expect("a free prefix is taken");
            pool.add(lease)
        })
        .collect();
    let bytes_per_lease = resident_bytes().saturating_sub(resident_before) as f64 / n as f64;
    let hole_key = format!("{run}/0/LEASE");
    if hole {
        *timed.hole.lock().unwrap() = Some(hole_key.clone());
    }
    timed.lateness.lock().unwrap().clear();
    std::thread::sleep(Duration::from_secs(35));
    let others_fenced = pool
        .events()
        .try_iter()
        .filter(|e| matches!(e.event, Event::Fenced | Event::Lost { .. }) && e.key != hole_key)
        .count();
    // Taken before the stop, whose releases are If-Match writes too.
    let lateness = std::mem::take(&mut *timed.lateness.lock().unwrap());
    *timed.hole.lock().unwrap() = None;
    drop(held);
    pool.stop();
    ManyRun {
        lateness,
        others_fenced,
        bytes_per_lease,
    }
}

/// A store that notes how late each renewal of a LEASE key is sent, and
/// black-holes one key on request.
#[derive(Debug)]
struct Timed {
    inner: Arc<dyn Store>,
    interval: Duration,
    /// Each LEASE key's last confirmed send.
    last: Mutex<HashMap<String, Instant>>,
    lateness: Mutex<Vec<Duration>>,
    hole: Mutex<Option<String>>,
}

impl Store for Timed {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        if self.hole.lock().unwrap().as_deref() == Some(key) {
            if let Some(d) = options.deadline {
                std::thread::sleep(d.saturating_duration_since(Instant::now()));
            }
            return Err(StoreError::new(StoreErrorKind::Transport, "PUT", key).timed_out());
        }
        let sent = Instant::now();
        let written = self.inner.put(key, body, options);
        if written.is_ok() && key.ends_with("/LEASE") {
            let previous = self.last.lock().unwrap().insert(key.to_string(), sent);
            // A renewal: an If-Match write that landed (the probe's
            // If-Match writes never do).
            if let (Some(last), PutMode::Update(_)) = (previous, &options.mode) {
                let due = last + self.interval;
                self.lateness
                    .lock()
                    .unwrap()
                    .push(sent.saturating_duration_since(due));
            }
        }
        written
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
