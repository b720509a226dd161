//! A pool that renews "inline" (`renewal_threads(0)`) never lets one
//! store call hold another lease's renewals or its fence: a
//! directory store waits for its bucket's lock up to the write deadline,
//! so its renewals never run on the scheduler thread.

use bucket_lease::backends::fs::DirStore;
use bucket_lease::KeptLease;
use bucket_lease::{Contender, Event, KeeperPool, LeaseOptions, PoolOptions, Store};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "bucket-lease-pool-inline-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn lease_on(dir: &Path, prefix: &str, ttl_s: u64) -> bucket_lease::Lease {
    let store: Arc<dyn Store> = Arc::new(DirStore::open(dir).unwrap());
    Contender::new(store, prefix, LeaseOptions::new(ttl_s))
        .try_acquire()
        .unwrap()
}

/// Lease A sits in a directory whose lock another handle holds, so each of
/// its renewals waits until its write deadline; lease B is in a healthy
/// directory with a shorter TTL. B keeps renewing throughout, and A's
/// `Fenced` comes by its own write deadline.
#[test]
fn a_locked_directory_holds_no_other_lease_in_an_inline_pool() {
    let (dir_a, dir_b) = (TempDir::new("a"), TempDir::new("b"));
    let a = lease_on(&dir_a.0, "a", 6);
    let b = lease_on(&dir_b.0, "b", 2);
    let pool = KeeperPool::spawn(PoolOptions::new().renewal_threads(0)).unwrap();
    let (a, b) = (pool.add(a), pool.add(b));
    let a_deadline = a.write_deadline().expect("A was just taken");

    // Another handle takes A's bucket lock (flock locks belong to the open
    // file, so this blocks the store's own open of it in this process).
    let lock = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir_a.0.join(".bucket-lease/lock"))
        .unwrap();
    lock.lock().unwrap();

    let (mut a_fenced_at, mut b_renewals, mut b_fenced) = (None, 0, false);
    let until = a_deadline + Duration::from_secs(2);
    while Instant::now() < until {
        let Ok(e) = pool.events().recv_timeout(Duration::from_millis(50)) else {
            continue;
        };
        match (e.id == a.id(), e.event) {
            (true, Event::Fenced) => a_fenced_at = Some(Instant::now()),
            (false, Event::Renewed { .. }) => b_renewals += 1,
            (false, Event::Fenced | Event::Lost { .. }) => b_fenced = true,
            _ => {}
        }
    }
    lock.unlock().unwrap();

    assert!(
        !b_fenced && b.may_write(),
        "B was fenced while A's store waited on its lock ({b_renewals} renewals)"
    );
    // A TTL of 2 s renews every 667 ms: in 6 s, several times.
    assert!(b_renewals >= 3, "B renewed only {b_renewals} times");
    let a_fenced_at = a_fenced_at.expect("A was fenced: its renewals waited on the lock");
    // By its deadline, give or take the store's slack and this machine's
    // scheduling (a late report is what the issue found: 663 ms).
    assert!(
        a_fenced_at <= a_deadline + Duration::from_millis(400),
        "A's Fenced came {:?} after its write deadline",
        a_fenced_at - a_deadline
    );
    drop(pool.stop());
}
