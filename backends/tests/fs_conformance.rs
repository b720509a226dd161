//! The store conformance suite on a directory bucket.
#![cfg(feature = "fs")]

use bucket_lease_backends::fs::DirStore;
use bucket_lease_core::conformance;
use std::path::PathBuf;

/// A directory under the system's temporary directory with a random name,
/// removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let name = format!(
            "bucket-lease-conformance-{:016x}",
            getrandom::u64().unwrap()
        );
        let dir = std::env::temp_dir().join(name);
        // The bucket's directory must exist, as an S3 bucket must.
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_directory_store_passes_every_check() {
    let dir = TempDir::new();
    let store = DirStore::open(&dir.0).unwrap();
    let capabilities = conformance::run_all(&store, "conformance/run");
    assert!(capabilities.conditional_delete);
    assert!(!capabilities.ignores_delete_conditions);
}

/// The deadline rule with the bucket's lock held by another process (a
/// real one, `flock(1)`, as a stopped writer would hold it): every write
/// and delete gives up by its deadline, nothing is written, and the reads,
/// which take no lock, answer.
#[test]
fn the_directory_store_keeps_its_deadlines_while_another_process_holds_the_lock() {
    use bucket_lease_core::store::{Delivery, StoreErrorKind};
    use std::time::{Duration, Instant};
    let dir = TempDir::new();
    let store = DirStore::open(&dir.0).unwrap();
    let lock = dir.0.join(".bucket-lease/lock");
    // --no-fork: the lock's holder is the process killed at the end.
    let mut holder = std::process::Command::new("flock")
        .args(["--exclusive", "--no-fork"])
        .arg(&lock)
        .args(["sleep", "30"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("flock(1) runs");
    // Wait until the other process holds the lock.
    let probe = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock)
        .unwrap();
    let started = Instant::now();
    while probe.try_lock().is_ok() {
        probe.unlock().unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "flock never took the lock"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let outcomes = conformance::deadline_kept(
        &store,
        "conformance/deadline",
        Duration::from_millis(300),
        &conformance::NoWire,
    );
    let _ = holder.kill();
    let _ = holder.wait();
    for (what, outcome) in outcomes {
        if what == "GET" || what == "HEAD" {
            let e = outcome.expect_err("the key was never written");
            assert_eq!(e.kind(), StoreErrorKind::NotFound, "{what}: {e}");
        } else {
            let e = outcome.expect_err("the lock is held");
            assert!(
                e.is_timeout() && e.delivery() == Delivery::NotSent,
                "{what}: {e}"
            );
        }
    }
    assert!(!dir.0.join("conformance/deadline").exists());
}
