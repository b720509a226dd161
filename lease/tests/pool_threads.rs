//! How many threads a `KeeperPool` runs, whatever it keeps: a scheduler and
//! its renewal threads (alone in its test binary, so no other test's
//! threads are counted).

use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::pool::{KeeperPool, PoolOptions};
use bucket_lease_core::{Contender, LeaseOptions, Store};
use std::sync::Arc;
use std::time::Duration;

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

#[test]
fn a_thousand_leases_on_four_threads() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let before = threads();
    let pool = KeeperPool::spawn(PoolOptions::new()).expect("threads start");
    for i in 0..1000 {
        let lease = Contender::new(Arc::clone(&store), &format!("t-{i}"), LeaseOptions::new(3))
            .try_acquire()
            .expect("a free prefix is taken");
        pool.add(lease);
    }
    // Renewals fall due after a second; let a round of them run.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(pool.len(), 1000);
    assert_eq!(
        threads() - before,
        4,
        "a scheduler and three renewal threads"
    );
    let inline = KeeperPool::spawn(PoolOptions::new().renewal_threads(0)).expect("starts");
    assert_eq!(threads() - before, 5, "renewing inline: one thread in all");
    drop(inline);
    let released = pool.stop();
    assert_eq!(released.len(), 1000);
    assert!(released.iter().all(|(_, r)| r.is_ok()));
    assert_eq!(threads(), before, "no thread outlives the pool");
}
