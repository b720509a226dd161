//! What one renewal costs, on each store, measured in one run so the numbers
//! compare with each other: wall-clock latency percentiles and the CPU time
//! the renewing thread spends per renewal (from the kernel's per-thread
//! accounting, so the server's own work is not counted).
//!
//! ```text
//! cargo bench --bench renewal                                 # memory, fs
//! scripts/test-servers.sh start && . .ci/tmp/servers.env
//! cargo bench --bench renewal --features minio                # + moto over HTTP
//! ```
//!
//! With moto it also renews through a client built afresh for every
//! renewal (a new connection each time), to show what the kept-alive
//! connection saves. Results are printed as ratios to the in-memory store
//! and to the warm HTTP renewal; absolute numbers depend on the machine.

use bucket_lease::backends::fs::DirStore;
use bucket_lease::memory::MemoryStore;
use bucket_lease::{Lease, LeaseOptions, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RENEWALS: usize = 400;

struct Measured {
    name: &'static str,
    latencies: Vec<Duration>,
    cpu_per_renewal: Option<Duration>,
}

impl Measured {
    fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
        sorted[rank]
    }
}

/// CPU time this thread has used so far.
fn thread_cpu() -> Option<Duration> {
    use rustix::time::{clock_gettime, ClockId};
    let t = clock_gettime(ClockId::ThreadCPUTime);
    Some(Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
}

/// Run `renew` `RENEWALS` times after a warm-up, timing each.
fn measure(name: &'static str, mut renew: impl FnMut()) -> Measured {
    for _ in 0..20 {
        renew(); // warm up
    }
    let cpu_before = thread_cpu();
    let latencies = (0..RENEWALS)
        .map(|_| {
            let sent = Instant::now();
            renew();
            sent.elapsed()
        })
        .collect();
    let cpu_per_renewal = match (cpu_before, thread_cpu()) {
        (Some(before), Some(after)) => Some((after - before) / RENEWALS as u32),
        _ => None,
    };
    Measured {
        name,
        latencies,
        cpu_per_renewal,
    }
}

fn lease_on(store: Arc<dyn Store>, prefix: &str) -> Lease {
    Lease::acquire(store, prefix, LeaseOptions::new(30)).expect("the bench takes its lease")
}

fn main() {
    let prefix = format!("bench/renewal-{}", std::process::id());
    let mut results = Vec::new();

    let memory = lease_on(Arc::new(MemoryStore::new()), &prefix);
    results.push(measure("memory", || memory.renew().unwrap()));
    memory.release().unwrap();

    let dir = std::env::temp_dir().join(format!("bucket-lease-bench-{}", std::process::id()));
    let fs = lease_on(Arc::new(DirStore::open(&dir).unwrap()), &prefix);
    results.push(measure("fs", || fs.renew().unwrap()));
    fs.release().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    #[cfg(feature = "minio")]
    http(&prefix, &mut results);

    let base = results[0].percentile(0.5).as_secs_f64();
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>10} {:>12} {:>10}",
        "store", "p50", "p90", "p99", "max", "cpu/renewal", "p50/memory"
    );
    for m in &results {
        println!(
            "{:<14} {:>10.1?} {:>10.1?} {:>10.1?} {:>10.1?} {:>12} {:>9.1}x",
            m.name,
            m.percentile(0.5),
            m.percentile(0.9),
            m.percentile(0.99),
            m.percentile(1.0),
            m.cpu_per_renewal
                .map_or("n/a".to_string(), |c| format!("{c:.1?}")),
            m.percentile(0.5).as_secs_f64() / base
        );
    }
    let find = |name: &str| results.iter().find(|m| m.name == name);
    if let (Some(warm), Some(cold)) = (find("http warm"), find("http cold")) {
        println!(
            "a renewal on a new connection takes {:.2}x the time of one on the kept-alive \
             connection (p50), and {:.2}x its CPU",
            cold.percentile(0.5).as_secs_f64() / warm.percentile(0.5).as_secs_f64(),
            match (cold.cpu_per_renewal, warm.cpu_per_renewal) {
                (Some(c), Some(w)) => c.as_secs_f64() / w.as_secs_f64(),
                _ => f64::NAN,
            }
        );
    }
}

/// moto over HTTP, when `scripts/test-servers.sh` started it.
#[cfg(feature = "minio")]
fn http(prefix: &str, results: &mut Vec<Measured>) {
    use bucket_lease::backends::config;
    let Ok(endpoint) = std::env::var("BUCKET_LEASE_TEST_MOTO_URL") else {
        eprintln!("note: BUCKET_LEASE_TEST_MOTO_URL is not set; skipping the HTTP store");
        return;
    };
    let bucket =
        std::env::var("BUCKET_LEASE_TEST_BUCKET").unwrap_or_else(|_| "bucket-lease-test".into());
    let env = move |name: &str| match name {
        "AWS_ENDPOINT_URL" => Some(endpoint.clone()),
        "AWS_ACCESS_KEY_ID" => Some("test-key".to_string()),
        "AWS_SECRET_ACCESS_KEY" => Some("test-secret".to_string()),
        "AWS_REGION" => Some("us-east-1".to_string()),
        _ => None,
    };
    let url = format!("minio://{bucket}/{prefix}");
    let open = || config::open_with_env(&url, &env).expect("moto opens").0;

    let lease = lease_on(open(), prefix);
    results.push(measure("http renew", || lease.renew().unwrap()));
    lease.release().unwrap();

    // The same conditional write through one kept-alive client, then
    // through a client (and so a connection) made afresh for each.
    let key = format!("{prefix}/bench-object");
    let body = vec![b'x'; 160];
    let warm = open();
    let create = bucket_lease::PutOptions::new(bucket_lease::PutMode::Overwrite);
    let mut version = warm.put(&key, &body, &create).unwrap();
    let mut swap = |store: &dyn Store| {
        let mode = bucket_lease::PutMode::Update(version.clone());
        version = store
            .put(&key, &body, &bucket_lease::PutOptions::new(mode))
            .unwrap();
    };
    results.push(measure("http warm", || swap(&*warm)));
    results.push(measure("http cold", || swap(&*open())));
    let _ = warm.delete(&key, &bucket_lease::DeleteMode::Unconditional, None);
}
