//! Leases come and go while a `KeeperPool` runs: `add` keeps a lease at
//! once on its own schedule, `remove` stops keeping one and releases it,
//! and stopping the pool releases every lease it keeps, fifty at a time
//! as well as one. (How a lease ends, and what a stop answers, is in
//! the table of `losses.rs`.)

use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::pool::{KeeperPool, PoolOptions};
use bucket_lease_core::KeptLease;
use bucket_lease_core::{record::LeaseRecord, Contender, Event, LeaseOptions, Released, Store};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const TTL_S: u64 = 3;

fn take(store: &Arc<dyn Store>, prefix: &str) -> bucket_lease_core::Lease {
    Contender::new(Arc::clone(store), prefix, LeaseOptions::new(TTL_S))
        .try_acquire()
        .expect("a free prefix is taken")
}

#[test]
fn fifty_leases_are_each_renewed_and_released() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let pool = KeeperPool::spawn(PoolOptions::new().renewal_threads(1)).expect("threads start");
    let held: Vec<_> = (0..50)
        .map(|i| pool.add(take(&store, &format!("shard-{i}"))))
        .collect();
    assert_eq!(pool.len(), 50);
    // Three TTLs: without renewals every lease would be fenced twice over.
    std::thread::sleep(Duration::from_secs(3 * TTL_S));
    for lease in &held {
        assert!(lease.may_write(), "{} was not kept", lease.lease().key());
    }
    let mut renewed: HashMap<String, usize> = HashMap::new();
    for e in pool.events().try_iter() {
        assert!(
            matches!(e.event, Event::Renewed { .. }),
            "{}: {:?}",
            e.key,
            e.event
        );
        *renewed.entry(e.key).or_default() += 1;
    }
    assert_eq!(renewed.len(), 50, "every lease reports its own renewals");
    assert!(renewed.values().all(|&n| n >= 5), "{renewed:?}");
    let stopped = pool.stop();
    assert_eq!(stopped.len(), 50);
    for (id, released) in stopped {
        assert_eq!(released, Ok(Released::Freed), "{id:?}");
    }
    for i in 0..50 {
        let body = store
            .get(&format!("shard-{i}/LEASE"), None)
            .expect("record")
            .body;
        assert!(LeaseRecord::parse(&body).expect("a record").is_released());
    }
}

#[test]
fn leases_come_and_go_while_the_pool_runs() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let pool = KeeperPool::spawn(PoolOptions::new()).expect("threads start");
    let a = pool.add(take(&store, "a"));
    let b = pool.add(take(&store, "b"));
    assert_eq!(pool.remove(a.id()), Some(Ok(Released::Freed)));
    assert_eq!(pool.remove(a.id()), None, "a is no longer in the pool");
    assert!(!a.may_write());
    let record = LeaseRecord::parse(&store.get("a/LEASE", None).unwrap().body).unwrap();
    assert!(record.is_released());
    let c = pool.add(take(&store, "a"));
    assert_eq!(c.lease().epoch(), 2);
    std::thread::sleep(Duration::from_secs(TTL_S));
    assert!(b.may_write() && c.may_write());
    let released: Vec<_> = pool
        .events()
        .try_iter()
        .filter(|e| matches!(e.event, Event::Released(_)))
        .map(|e| e.key)
        .collect();
    assert_eq!(released, vec!["a/LEASE".to_string()]);
    drop(pool);
    for key in ["a/LEASE", "b/LEASE"] {
        let record = LeaseRecord::parse(&store.get(key, None).unwrap().body).unwrap();
        assert!(record.is_released(), "dropping the pool releases {key}");
    }
}
