//! Two sharded workers on one `file://` bucket, each a process keeping the
//! same set of prefixes held with a `HeldSet` and writing under every
//! prefix it holds; one is paused (SIGSTOP) past its fence and continued.
//! No prefix is ever written by both at once: every write is published
//! between its start and its lease's write deadline (the fence's promise),
//! and those spans of two workers never overlap on one prefix.
//!
//! The workers are this test binary run again (`worker_process`, ignored
//! unless `BUCKET_LEASE_WORKER_DIR` is set).

use bucket_lease::backends::fs::DirStore;
use bucket_lease::held_set::{HeldSet, HeldSetOptions};
use bucket_lease::KeptLease;
use bucket_lease::LeaseOptions;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const SHARDS: usize = 8;
const TTL_S: u64 = 3;

fn nanos(at: SystemTime) -> u128 {
    at.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos()
}

/// One worker: keep every shard held, write under each held shard every
/// 50 ms, and log each write that succeeded as `prefix epoch start
/// deadline` (wall-clock nanoseconds), until the file `stop` appears.
#[test]
#[ignore = "a worker process of a_paused_worker_never_writes_a_shard_the_other_holds"]
fn worker_process() {
    let Ok(dir) = std::env::var("BUCKET_LEASE_WORKER_DIR") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let name = std::env::var("BUCKET_LEASE_WORKER_NAME").unwrap();
    let store = Arc::new(DirStore::open(&dir.join("bucket")).unwrap());
    let shards = (0..SHARDS).map(|i| format!("shards/{i}"));
    let set = HeldSet::spawn(store, shards, HeldSetOptions::new(LeaseOptions::new(TTL_S))).unwrap();
    let mut log = String::new();
    let mut seq = 0u64;
    while !dir.join("stop").exists() {
        for shard in set.held() {
            let Some(deadline) = shard.lease().write_deadline() else {
                continue;
            };
            // The span this write may be published in: from now to the
            // lease's write deadline, on the wall clock.
            let start = SystemTime::now();
            let left = deadline.saturating_duration_since(Instant::now());
            let epoch = shard.epoch();
            seq += 1;
            let key = format!("{}/out/{epoch}-{name}-{seq}", shard.prefix());
            if shard.writer().put_new(&key, name.as_bytes()).is_ok() {
                log.push_str(&format!(
                    "{} {epoch} {} {}\n",
                    shard.prefix(),
                    nanos(start),
                    nanos(start + left)
                ));
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    set.stop();
    std::fs::write(dir.join(format!("{name}.log")), log).unwrap();
}

fn spawn_worker(dir: &Path, name: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["worker_process", "--exact", "--ignored", "--nocapture"])
        .env("BUCKET_LEASE_WORKER_DIR", dir)
        .env("BUCKET_LEASE_WORKER_NAME", name)
        .spawn()
        .unwrap()
}

/// A write of one worker: its epoch and the span it was published in.
#[derive(Debug, Clone, Copy)]
struct Write {
    epoch: u64,
    start: u128,
    deadline: u128,
}

fn read_log(dir: &Path, name: &str) -> BTreeMap<String, Vec<Write>> {
    let text = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap();
    let mut writes: BTreeMap<String, Vec<Write>> = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        writes
            .entry(fields[0].to_string())
            .or_default()
            .push(Write {
                epoch: fields[1].parse().unwrap(),
                start: fields[2].parse().unwrap(),
                deadline: fields[3].parse().unwrap(),
            });
    }
    writes
}

fn signal(child: &Child, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_child(child);
    rustix::process::kill_process(pid, signal).unwrap();
}

#[test]
fn a_paused_worker_never_writes_a_shard_the_other_holds() {
    let dir = std::env::temp_dir().join(format!(
        "bucket-lease-workers-{}-{}",
        std::process::id(),
        nanos(SystemTime::now())
    ));
    std::fs::create_dir_all(dir.join("bucket")).unwrap();
    // A starts alone and takes every shard; B finds them held.
    let mut a = spawn_worker(&dir, "a");
    std::thread::sleep(Duration::from_secs(2));
    let mut b = spawn_worker(&dir, "b");
    std::thread::sleep(Duration::from_secs(2));
    // A is paused past its fence and its records' expiry: B takes over.
    signal(&a, rustix::process::Signal::STOP);
    std::thread::sleep(Duration::from_secs(3 * TTL_S));
    // A goes on, fenced: it must not write; it tries its shards again.
    signal(&a, rustix::process::Signal::CONT);
    std::thread::sleep(Duration::from_secs(3));
    std::fs::write(dir.join("stop"), b"").unwrap();
    for (name, child) in [("a", &mut a), ("b", &mut b)] {
        let status = child.wait().unwrap();
        assert!(status.success(), "worker {name}: {status}");
    }
    let (a_writes, b_writes) = (read_log(&dir, "a"), read_log(&dir, "b"));
    let mut taken_over = 0;
    for shard in (0..SHARDS).map(|i| format!("shards/{i}")) {
        let (of_a, of_b) = (
            a_writes.get(&shard).cloned().unwrap_or_default(),
            b_writes.get(&shard).cloned().unwrap_or_default(),
        );
        if !of_a.is_empty() && !of_b.is_empty() {
            taken_over += 1;
        }
        for wa in &of_a {
            for wb in &of_b {
                assert_ne!(wa.epoch, wb.epoch, "{shard}: one epoch, two writers");
                let apart = wa.deadline <= wb.start || wb.deadline <= wa.start;
                assert!(
                    apart,
                    "{shard}: A's write {wa:?} and B's {wb:?} may overlap"
                );
            }
        }
    }
    assert!(
        taken_over > 0,
        "no shard was written by both workers in turn (A: {} shards, B: {})",
        a_writes.len(),
        b_writes.len()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
