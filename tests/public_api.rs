//! What a program depending on `bucket-lease` alone can name: the events'
//! channel (and `select!`) through `bucket_lease::channel`, and spans of
//! time as `std::time::Duration`, with no crossbeam or `time` dependency
//! of its own (this crate has neither as a dev-dependency).

use bucket_lease::channel::{select, Receiver};
use bucket_lease::inspect::{inspect, Expiry};
use bucket_lease::memory::MemoryStore;
use bucket_lease::KeptLease;
use bucket_lease::{clock::SystemClock, Contender, Event, Keeper, KeeperOptions, LeaseOptions};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

#[test]
fn events_are_selected_on_through_the_reexported_channel() {
    let store = Arc::new(MemoryStore::new());
    let lease = Contender::new(store.clone(), "api", LeaseOptions::new(3))
        .try_acquire()
        .unwrap();
    let keeper = Keeper::spawn(lease, KeeperOptions::new()).unwrap();
    let events: &Receiver<Event> = keeper.events();
    let timeout = bucket_lease::channel::after(Duration::from_secs(10));
    select! {
        recv(events) -> event => assert!(
            matches!(event, Ok(Event::Renewed { .. })),
            "{event:?}"
        ),
        recv(timeout) -> _ => panic!("no renewal within 10 s of a 3 s lease"),
    }

    let seen = inspect(&*store, "api", &SystemClock).unwrap().unwrap();
    match seen.expires_in() {
        Some(Expiry::In(left)) => assert!(left <= Duration::from_secs(3), "{left:?}"),
        other => panic!("a fresh record expires in the future, got {other:?}"),
    }
    let renewed: SystemTime = seen.record.as_ref().unwrap().renewed().unwrap();
    assert!(renewed <= SystemTime::now());
    keeper.stop().unwrap();
}

/// Each rung of the ladder a program climbs (the crate docs' "Which way to
/// hold a lease"), written with the crate root's names alone, beside the
/// store it opens: the front door names what it takes to take a lease,
/// keep it, write under it and give it up.
mod front_door {
    use bucket_lease::memory::MemoryStore;
    use bucket_lease::{
        Contender, HeldSet, HeldSetOptions, Keeper, KeeperOptions, KeeperPool, KeptLease, Lease,
        LeaseError, LeaseOptions, PoolOptions, Released, Store,
    };
    use std::sync::Arc;
    use std::time::Duration;

    fn store() -> Arc<dyn Store> {
        Arc::new(MemoryStore::new())
    }

    #[test]
    fn a_keeper_in_a_program() -> Result<(), Box<dyn std::error::Error>> {
        let store = store();
        let keeper = Keeper::spawn(
            Contender::new(store, "jobs/1", LeaseOptions::new(30)).try_acquire()?,
            KeeperOptions::new(),
        )?;
        keeper.writer().put_new("jobs/1/part-0", b"...")?;
        assert_eq!(keeper.stop()?, Released::Freed);
        Ok(())
    }

    #[test]
    fn a_pool_for_many_keys() -> Result<(), Box<dyn std::error::Error>> {
        let store = store();
        let pool = KeeperPool::spawn(PoolOptions::new())?;
        let leases = ["a", "b"]
            .into_iter()
            .map(|key| Contender::new(store.clone(), key, LeaseOptions::new(30)).try_acquire())
            .collect::<Result<Vec<Lease>, LeaseError>>()?;
        let kept: Vec<_> = leases.into_iter().map(|lease| pool.add(lease)).collect();
        for lease in &kept {
            lease
                .writer()
                .put_new(&format!("{}/part-0", lease.prefix()), b"...")?;
        }
        for lease in kept {
            assert_eq!(lease.stop()?, Released::Freed);
        }
        assert!(pool.is_empty());
        Ok(())
    }

    #[test]
    fn a_held_set_for_shards() -> Result<(), Box<dyn std::error::Error>> {
        let shards = (0..3).map(|i| format!("shards/{i}"));
        let set = HeldSet::spawn(store(), shards, HeldSetOptions::new(LeaseOptions::new(30)))?;
        while set.held().len() < 3 {
            set.events().recv_timeout(Duration::from_secs(10))?;
        }
        for shard in set.held() {
            shard
                .writer()
                .put_new(&format!("{}/part-0", shard.prefix()), b"...")?;
        }
        let shard = set.get("shards/1").expect("held");
        assert_eq!(shard.stop()?, Released::Freed);
        assert!(set.get("shards/1").is_none(), "given up");
        assert!(set.stop().iter().all(|(_, released)| released.is_ok()));
        Ok(())
    }

    #[test]
    fn a_lease_by_hand() -> Result<(), Box<dyn std::error::Error>> {
        let lease = Contender::new(store(), "jobs/2", LeaseOptions::new(30)).try_acquire()?;
        lease.renew()?;
        assert_eq!(lease.release()?, Released::Freed);
        Ok(())
    }
}
