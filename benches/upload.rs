//! What a fenced upload of a large object costs beside a plain multipart
//! upload of the same bytes: throughput and peak resident memory, measured
//! in one run, each upload in a process of its own (so each peak is its
//! own), the two kinds alternated so a noisy neighbour hits both alike.
//!
//! ```text
//! cargo bench --bench upload                               # a directory
//! bash scripts/test-servers.sh start; set -a; . .ci/tmp/servers.env; set +a
//! cargo bench --bench upload --features minio              # + moto over HTTP
//! ```
//!
//! Both kinds stream `BUCKET_LEASE_BENCH_UPLOAD_SIZE` bytes (default
//! `1GiB`) made on the fly, in 8 MiB parts, through the same store calls
//! (`examples/common/stream.rs`): `fenced` under a held lease
//! (`FencedWriter::create`: the lease taken and kept by its renewal thread,
//! each request's deadline, the create-only completion and the check of it
//! once per store), `plain` with none of that. Each runs
//! `BUCKET_LEASE_BENCH_REPS` times (default 3). The table gives the median
//! throughput (and range), the highest peak resident memory (`VmHWM`), and
//! the fenced median over the plain one. The promise checked: a fenced
//! upload stays under 64 MiB resident whatever its size.

#[path = "../examples/common/stream.rs"]
#[allow(dead_code)] // the example uses what the bench does not
mod stream;

use bucket_lease::backends::config;
use bucket_lease::store::DeleteMode;
use bucket_lease::KeptLease;
use bucket_lease::{Contender, FencedWriter, Keeper, KeeperOptions, LeaseOptions};
use std::process::{Command, ExitCode};
use std::time::Instant;

/// The variable that makes a process of this bench one upload's child.
const CHILD: &str = "BUCKET_LEASE_BENCH_UPLOAD_CHILD";

/// The resident memory a fenced upload must stay under.
const BOUND: u64 = 64 << 20;

fn main() -> ExitCode {
    if let Ok(job) = std::env::var(CHILD) {
        return child(&job);
    }
    let size = std::env::var("BUCKET_LEASE_BENCH_UPLOAD_SIZE")
        .map(|s| stream::parse_size(&s).expect("BUCKET_LEASE_BENCH_UPLOAD_SIZE"))
        .unwrap_or(1 << 30);
    let reps: usize = std::env::var("BUCKET_LEASE_BENCH_REPS")
        .map(|s| s.parse().expect("BUCKET_LEASE_BENCH_REPS: a number"))
        .unwrap_or(3);
    let dir =
        std::env::temp_dir().join(format!("bucket-lease-bench-upload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let mut targets = vec![(
        "fs".to_string(),
        format!("file://{}//bench", dir.display()),
        Vec::new(),
    )];
    match std::env::var("BUCKET_LEASE_TEST_MOTO_URL") {
        Ok(endpoint) if cfg!(feature = "minio") => {
            let bucket = std::env::var("BUCKET_LEASE_TEST_BUCKET")
                .unwrap_or_else(|_| "bucket-lease-test".into());
            let env = vec![
                ("AWS_ENDPOINT_URL", endpoint),
                ("AWS_ACCESS_KEY_ID", "test-key".to_string()),
                ("AWS_SECRET_ACCESS_KEY", "test-secret".to_string()),
                ("AWS_REGION", "us-east-1".to_string()),
                ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
            ];
            targets.push(("moto".into(), format!("minio://{bucket}/bench-upload"), env));
        }
        Ok(_) => eprintln!("note: moto is running but its rows need --features minio"),
        Err(_) => eprintln!("note: BUCKET_LEASE_TEST_MOTO_URL is not set; no moto rows"),
    }
    println!(
        "{} MiB a stream, 8 MiB parts, {reps} runs of each kind, alternated",
        size >> 20
    );
    println!("| store | kind | MiB/s median (range) | peak resident MiB | fenced / plain |");
    println!("|---|---|---|---|---|");
    let mut within = true;
    for (name, url, env) in &targets {
        let mut runs: [Vec<(f64, u64)>; 2] = [Vec::new(), Vec::new()];
        for rep in 0..reps {
            for turn in 0..2 {
                let kind = (rep + turn) % 2;
                let job = format!("{} {url} {size}", ["fenced", "plain"][kind]);
                runs[kind].push(run_child(&job, env));
            }
        }
        let median = |runs: &mut Vec<(f64, u64)>| {
            runs.sort_by(|a, b| a.0.total_cmp(&b.0));
            runs[runs.len() / 2].0
        };
        let fenced = median(&mut runs[0]);
        let plain = median(&mut runs[1]);
        for (kind, runs) in ["fenced", "plain"].iter().zip(&runs) {
            let mib_s: Vec<f64> = runs.iter().map(|r| r.0).collect();
            let peak = runs.iter().map(|r| r.1).max().unwrap_or(0);
            if *kind == "fenced" && peak >= BOUND {
                within = false;
            }
            let ratio = if *kind == "fenced" {
                format!("{:.2}", fenced / plain)
            } else {
                String::new()
            };
            println!(
                "| {name} | {kind} | {:.0} ({:.0}–{:.0}) | {:.1} | {ratio} |",
                mib_s[mib_s.len() / 2],
                mib_s[0],
                mib_s[mib_s.len() - 1],
                peak as f64 / f64::from(1 << 20),
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if within {
        println!("every fenced upload stayed under 64 MiB resident");
        ExitCode::SUCCESS
    } else {
        println!("a fenced upload went over 64 MiB resident");
        ExitCode::FAILURE
    }
}

/// Run one upload in a child process: its throughput in MiB/s and its
/// peak resident bytes.
fn run_child(job: &str, env: &[(&str, String)]) -> (f64, u64) {
    let exe = std::env::current_exe().expect("the bench's own path");
    let output = Command::new(exe)
        .env(CHILD, job)
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .output()
        .expect("the child starts");
    let text = String::from_utf8_lossy(&output.stdout);
    let fields: Vec<&str> = text.split_whitespace().collect();
    match fields.as_slice() {
        [mib_s, peak] if output.status.success() => (
            mib_s.parse().expect("throughput"),
            peak.parse().expect("peak"),
        ),
        _ => panic!(
            "{job}: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

/// One upload, as the child: prints its MiB/s and its peak resident bytes.
fn child(job: &str) -> ExitCode {
    let [kind, url, size] = job.split(' ').collect::<Vec<_>>()[..] else {
        panic!("{CHILD}: KIND URL SIZE");
    };
    let size: u64 = size.parse().expect("a size");
    let (store, prefix) = config::open(url).expect("the store opens");
    let started = Instant::now();
    let key = match kind {
        "fenced" => {
            let mut contender = Contender::new(store.clone(), &prefix, LeaseOptions::new(30));
            let keeper = Keeper::spawn(
                contender.try_acquire().expect("the lease"),
                KeeperOptions::new(),
            )
            .expect("a keeper");
            let key = format!("{prefix}/fenced/{}", keeper.lease().epoch());
            let writer = FencedWriter::new(keeper.lease().clone());
            stream::fenced(&writer, &key, size).expect("the fenced upload");
            keeper.stop().expect("the release");
            key
        }
        _ => {
            let key = format!("{prefix}/plain/{}", std::process::id());
            stream::unfenced(&*store, &key, size).expect("the plain upload");
            key
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    let peak = stream::peak_resident_bytes().unwrap_or(0);
    // Not timed: the objects would fill the server.
    let _ = store.delete(&key, &DeleteMode::Unconditional, None);
    println!("{} {peak}", size as f64 / f64::from(1 << 20) / seconds);
    ExitCode::SUCCESS
}
