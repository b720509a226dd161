//! 10,000 leases in one pool: lateness, memory and CPU per renewal.
//!
//! ```text
//! cargo bench --bench pool                                   # fs store
//! set -a; . .ci/tmp/servers.env; set +a                      # servers started
//! cargo bench --bench pool --features minio                  # + moto over HTTP
//! BUCKET_LEASE_BENCH_POOL_LEASES=2000 cargo bench --bench pool   # fewer on fs
//! BUCKET_LEASE_BENCH_POOL_MOTO=100,300 cargo bench --bench pool --features minio
//! ```
//!
//! One `KeeperPool` on 4 threads (its scheduler and 3 renewal threads)
//! keeps `n` leases with a TTL of 30 s, so each is renewed every 10 s: on
//! fs, 10,000 leases, taken from 4 threads at once. Once every lease is
//! in the pool, a window of 12 s (a renewal interval and 2 s: every lease
//! renews in it) is measured:
//!
//! - **Lateness**: a wrapper around the store notes when each renewal (an
//!   If-Match write of a LEASE key that landed) is sent; lateness is how
//!   long after it was due (the lease's previous confirmed write plus
//!   10 s: for its first renewal, the lease's own `confirmed_at()` after
//!   the acquire) it was sent.
//! - **Memory per lease**: the process's resident set (`/proc/self/statm`,
//!   resident pages × 4 KiB) just before the first acquire and once every
//!   lease is in the pool, the difference divided by `n`. The bench's own
//!   books (the wrapper's table of keys, the list of handles, the lateness
//!   list) are allocated before the first reading. It counts what the
//!   acquires left behind as well as the leases (the allocator keeps freed
//!   memory), so it is an upper bound. The column "after" is the same
//!   difference at the end of the window, after every lease renewed.
//! - **Renewal p50, p99**: each renewal's own latency (its request, from
//!   the pool's `Renewed` events), in the window.
//! - **CPU per renewal**: the whole process's CPU time
//!   (`CLOCK_PROCESS_CPUTIME_ID`: every thread, user and kernel, the fs
//!   store's own work included) over the window, divided by the renewals
//!   in it. Beside it, in the same run and on the same store, one lease
//!   alone in a pool of the same shape, with a TTL of 1 s (a renewal every
//!   333 ms) for 10 s: the CPU a renewal costs when the pool keeps one.
//!
//! On moto (one request at a time) the same runs take 100, 300 and 1,000
//! leases (TTL 30 s: 10, 30 and 100 renewals a second), then 200 and 300
//! with a TTL of 3 s (200 and 300 renewals a second, a window of 5 s), to
//! find where it stops keeping up (p99 lateness over 10 ms, or a lease
//! fenced). `BUCKET_LEASE_BENCH_POOL_MOTO` lists the runs as `N` or
//! `N@TTL`. Memory is reported for the first run only (fs): later runs
//! reuse what the allocator kept from the runs before them.

mod common;

use bucket_lease::{
    store::DeleteMode, store::Object, store::PutMode, store::PutOptions, store::Version, Contender,
    Event, KeeperPool, LeaseError, LeaseOptions, PoolOptions, PooledLease, Store, StoreError,
};
use common::{fs_store, moto, percentiles, resident_bytes, scratch};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The goals of issue 23, item 3.
const GOAL_P99: Duration = Duration::from_millis(10);
const GOAL_BYTES_PER_LEASE: f64 = 1024.0;
/// How many threads take the leases.
const ACQUIRERS: usize = 4;

fn main() {
    let fs_leases: usize = env_or("BUCKET_LEASE_BENCH_POOL_LEASES", "10000")
        .parse()
        .expect("BUCKET_LEASE_BENCH_POOL_LEASES: a number");
    let moto_runs: Vec<(usize, u64)> =
        env_or("BUCKET_LEASE_BENCH_POOL_MOTO", "100,300,1000,200@3,300@3")
            .split(',')
            .map(|run| {
                let (n, ttl) = run.trim().split_once('@').unwrap_or((run.trim(), "30"));
                let number = |s: &str| s.parse().expect("BUCKET_LEASE_BENCH_POOL_MOTO: N or N@TTL");
                (number(n) as usize, number(ttl))
            })
            .collect();
    println!("load average before: {}", load_average());
    let mut rows = Vec::new();

    let single = single(fs_store("pool"));
    println!(
        "fs, one lease alone (TTL 1 s, 10 s): {} renewals, {:.0} µs CPU per renewal",
        single.renewals,
        micros(single.cpu_per_renewal())
    );
    let mut runs = vec![("fs", fs_leases, 30)];
    let moto = moto();
    if moto.is_some() {
        runs.extend(moto_runs.iter().map(|&(n, ttl)| ("moto", n, ttl)));
    }
    for (store, n, ttl) in runs {
        let open = if store == "fs" {
            fs_store("pool")
        } else {
            moto.as_ref().expect("moto is configured")()
        };
        match many(open, n, ttl) {
            Ok(run) => rows.push((store, run)),
            Err(e) => eprintln!("{store}, {n} leases, TTL {ttl} s: no row: an acquire failed: {e}"),
        }
    }
    let _ = std::fs::remove_dir_all(scratch("pool"));
    println!("load average after: {}", load_average());
    println!();
    println!(
        "| store | leases | TTL | acquire | renewals/s | renewals | lateness p50 | p99 | max | failed | fenced or lost | renewal p50 | p99 | memory per lease | after | CPU per renewal | ÷ one lease's |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (store, run) in &rows {
        let (p50, p99, max) = percentiles(run.lateness.clone());
        let (took50, took99, _) = percentiles(run.latency.clone());
        let cpu = run.cpu_per_renewal();
        // Only the first run's memory means something: later runs reuse
        // what the allocator kept from the runs before them.
        let (ratio, memory, after) = if *store == "fs" {
            (
                format!(
                    "{:.2}",
                    cpu.as_secs_f64() / single.cpu_per_renewal().as_secs_f64()
                ),
                format!("{:.0} B", run.bytes_per_lease),
                format!("{:.0} B", run.bytes_per_lease_after),
            )
        } else {
            ("-".to_string(), "-".to_string(), "-".to_string())
        };
        println!(
            "| {store} | {} | {} s | {:.1} s | {:.0} | {} | {p50:.2} ms | {p99:.2} ms | {max:.2} ms | {} | {} | {took50:.2} ms | {took99:.2} ms | {memory} | {after} | {:.0} µs | {ratio} |",
            run.leases,
            run.ttl_s,
            run.acquire.as_secs_f64(),
            run.renewals as f64 / run.window.as_secs_f64(),
            run.renewals,
            run.failed,
            run.ended,
            micros(cpu),
        );
    }
    println!();
    for (store, run) in &rows {
        let (_, p99, _) = percentiles(run.lateness.clone());
        let p99 = Duration::from_secs_f64(p99 / 1000.0);
        let late = verdict(p99 <= GOAL_P99 && run.ended == 0);
        if *store == "fs" {
            let memory = verdict(run.bytes_per_lease <= GOAL_BYTES_PER_LEASE);
            let cpu = verdict(run.cpu_per_renewal() <= single.cpu_per_renewal());
            println!(
                "fs, {} leases: p99 lateness ≤ 10 ms, none fenced: {late}; ≤ 1 KiB per lease: {memory}; CPU per renewal ≤ one lease's: {cpu}",
                run.leases
            );
        } else {
            println!(
                "{store}, {} leases, TTL {} s ({:.0} renewals/s): keeps up (p99 lateness ≤ 10 ms, none fenced): {late}",
                run.leases,
                run.ttl_s,
                run.renewals as f64 / run.window.as_secs_f64()
            );
        }
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// What one run measured.
struct Run {
    leases: usize,
    ttl_s: u64,
    /// How long taking them all and adding them to the pool took.
    acquire: Duration,
    window: Duration,
    lateness: Vec<Duration>,
    /// The renewals' own latency (request sent to answer).
    latency: Vec<Duration>,
    renewals: usize,
    cpu: Duration,
    failed: usize,
    /// Leases fenced or lost.
    ended: usize,
    bytes_per_lease: f64,
    bytes_per_lease_after: f64,
}

impl Run {
    fn cpu_per_renewal(&self) -> Duration {
        self.cpu / u32::try_from(self.renewals.max(1)).unwrap_or(u32::MAX)
    }
}

/// The pool's events, counted on a thread of their own (so that the
/// unbounded queue does not grow with the renewals).
struct Tally {
    failed: AtomicUsize,
    ended: AtomicUsize,
    /// Each renewal's latency (its request, as the event reports it).
    latency: Mutex<Vec<Duration>>,
}

fn tally(pool: &KeeperPool, leases: usize) -> Arc<Tally> {
    let tally = Arc::new(Tally {
        failed: AtomicUsize::new(0),
        ended: AtomicUsize::new(0),
        latency: Mutex::new(Vec::with_capacity(4 * leases + 100)),
    });
    let events = pool.events().clone();
    let t = Arc::clone(&tally);
    std::thread::spawn(move || {
        for e in events {
            match e.event {
                Event::Renewed { latency } => {
                    t.latency.lock().unwrap().push(latency);
                    0
                }
                Event::RenewalFailed { .. } => t.failed.fetch_add(1, Ordering::Relaxed),
                Event::Fenced | Event::Lost { .. } => t.ended.fetch_add(1, Ordering::Relaxed),
                _ => 0,
            };
        }
    });
    tally
}

/// One lease with a TTL of 1 s alone in a pool for 10 s.
fn single(store: Arc<dyn Store>) -> Run {
    let run = format!("single-{}", std::process::id());
    let timed = Timed::new(store, Duration::from_millis(333), &[format!("{run}/LEASE")]);
    let pool = KeeperPool::spawn(PoolOptions::new()).expect("threads start");
    let tally = tally(&pool, 1);
    let store: Arc<dyn Store> = Arc::clone(&timed) as Arc<dyn Store>;
    let started = Instant::now();
    let lease = Contender::new(store, &run, LeaseOptions::new(1))
        .try_acquire()
        .expect("a free prefix is taken");
    timed.confirmed(lease.key(), lease.confirmed_at());
    let held = pool.add(lease);
    let acquire = started.elapsed();
    let window = Duration::from_secs(10);
    let (lateness, cpu, latency) = window_of(&timed, &tally, window);
    drop(held);
    pool.stop();
    Run {
        leases: 1,
        ttl_s: 1,
        acquire,
        window,
        renewals: lateness.len(),
        lateness,
        latency,
        cpu,
        failed: tally.failed.load(Ordering::Relaxed),
        ended: tally.ended.load(Ordering::Relaxed),
        bytes_per_lease: 0.0,
        bytes_per_lease_after: 0.0,
    }
}

/// Take `n` leases with a TTL of `ttl_s` from [`ACQUIRERS`] threads into
/// one pool, then measure a window of a renewal interval and 2 s (at least
/// 5 s). An acquire that fails (a server gone) ends the run.
fn many(store: Arc<dyn Store>, n: usize, ttl_s: u64) -> Result<Run, LeaseError> {
    let run = format!("pool-{}-{n}-{ttl_s}", std::process::id());
    let interval = Duration::from_millis(ttl_s * 1000 / 3);
    let window = (interval + Duration::from_secs(2)).max(Duration::from_secs(5));
    let prefixes: Vec<String> = (0..n).map(|i| format!("{run}/{i}")).collect();
    let keys: Vec<String> = prefixes.iter().map(|p| format!("{p}/LEASE")).collect();
    let timed = Timed::new(store, interval, &keys);
    drop(keys);
    let store: Arc<dyn Store> = Arc::clone(&timed) as Arc<dyn Store>;
    let pool = KeeperPool::spawn(PoolOptions::new()).expect("threads start");
    let tally = tally(&pool, n);
    let mut held: Vec<Vec<PooledLease>> = (0..ACQUIRERS)
        .map(|_| Vec::with_capacity(n / ACQUIRERS + 1))
        .collect();
    let before = resident_bytes();
    let started = Instant::now();
    let taken: Result<(), LeaseError> = std::thread::scope(|s| {
        let threads: Vec<_> = held
            .iter_mut()
            .enumerate()
            .map(|(t, mine)| {
                let (store, pool, prefixes, timed) = (&store, &pool, &prefixes, &timed);
                s.spawn(move || {
                    for prefix in prefixes.iter().skip(t).step_by(ACQUIRERS) {
                        let options = LeaseOptions::new(ttl_s);
                        let lease =
                            Contender::new(Arc::clone(store), prefix, options).try_acquire()?;
                        timed.confirmed(lease.key(), lease.confirmed_at());
                        mine.push(pool.add(lease));
                    }
                    Ok(())
                })
            })
            .collect();
        threads
            .into_iter()
            .try_for_each(|t| t.join().expect("an acquiring thread panicked"))
    });
    taken?;
    let acquire = started.elapsed();
    let bytes_per_lease = resident_bytes().saturating_sub(before) as f64 / n as f64;
    let (lateness, cpu, latency) = window_of(&timed, &tally, window);
    let bytes_per_lease_after = resident_bytes().saturating_sub(before) as f64 / n as f64;
    let (failed, ended) = (
        tally.failed.load(Ordering::Relaxed),
        tally.ended.load(Ordering::Relaxed),
    );
    drop(held);
    pool.stop();
    Ok(Run {
        leases: n,
        ttl_s,
        acquire,
        window,
        renewals: lateness.len(),
        lateness,
        latency,
        cpu,
        failed,
        ended,
        bytes_per_lease,
        bytes_per_lease_after,
    })
}

/// The renewals' lateness over `window` from now, and the process's CPU
/// time in it.
fn window_of(
    timed: &Timed,
    tally: &Tally,
    window: Duration,
) -> (Vec<Duration>, Duration, Vec<Duration>) {
    timed.lateness.lock().unwrap().clear();
    tally.latency.lock().unwrap().clear();
    let cpu = process_cpu();
    std::thread::sleep(window);
    let cpu = process_cpu() - cpu;
    let latency = std::mem::take(&mut *tally.latency.lock().unwrap());
    let mut lateness = timed.lateness.lock().unwrap();
    (std::mem::take(&mut *lateness), cpu, latency)
}

/// A store that notes how late each renewal of a LEASE key is sent. Its
/// table holds every key it will see from the start, so that it allocates
/// nothing while the leases are taken and renewed.
#[derive(Debug)]
struct Timed {
    inner: Arc<dyn Store>,
    interval: Duration,
    /// Each LEASE key's last confirmed send.
    last: Mutex<HashMap<String, Option<Instant>>>,
    lateness: Mutex<Vec<Duration>>,
}

impl Timed {
    fn new(inner: Arc<dyn Store>, interval: Duration, keys: &[String]) -> Arc<Timed> {
        Arc::new(Timed {
            inner,
            interval,
            last: Mutex::new(keys.iter().map(|k| (k.clone(), None)).collect()),
            lateness: Mutex::new(Vec::with_capacity(2 * keys.len() + 100)),
        })
    }
}

impl Timed {
    /// The lease on `key` was taken with its last confirmed write at `at`
    /// (its acquire's create: the probe's later write on the record's own
    /// ETag does not move its schedule), so its first renewal is due an
    /// interval after `at`.
    fn confirmed(&self, key: &str, at: Instant) {
        if let Some(last) = self.last.lock().unwrap().get_mut(key) {
            *last = Some(at);
        }
    }
}

impl Store for Timed {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        let sent = Instant::now();
        let written = self.inner.put(key, body, options);
        if written.is_ok() {
            if let Some(last) = self.last.lock().unwrap().get_mut(key) {
                // A renewal: an If-Match write that landed (the probe's
                // writes on a made-up ETag never do; its write on the
                // record's own ETag lands before the lease is kept, and
                // `confirmed` then sets the time its schedule counts from).
                if let (Some(previous), PutMode::Update(_)) = (*last, &options.mode) {
                    let due = previous + self.interval;
                    self.lateness
                        .lock()
                        .unwrap()
                        .push(sent.saturating_duration_since(due));
                }
                *last = Some(sent);
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

/// CPU time used so far by every thread of this process, living or ended.
fn process_cpu() -> Duration {
    use rustix::time::{clock_gettime, ClockId};
    let t = clock_gettime(ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The machine's load averages, from `/proc/loadavg`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string())
}
