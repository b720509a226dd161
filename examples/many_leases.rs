//! One process keeps many leases from a few threads with a `KeeperPool`:
//! a worker that claims shards takes each free shard's lease, writes under
//! each with a `FencedWriter`, gives one shard back, and stops, which
//! releases every lease.
//!
//! ```text
//! cargo run --example many_leases                  # a fresh local directory
//! cargo run --example many_leases -- /some/dir     # a directory of yours
//! cargo run --example many_leases --features s3 -- s3://bucket/prefix
//! ```

mod common;

use bucket_lease::{
    Contender, Event, FencedWriter, KeeperPool, LeaseError, LeaseOptions, PoolOptions,
};
use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

const SHARDS: usize = 100;
const TTL_S: u64 = 3;

fn main() -> Result<(), Box<dyn Error>> {
    let (store, prefix, scratch) = common::open_store("shards", "shards")?;
    let options = LeaseOptions::from_env(TTL_S);
    // A scheduler and 3 renewal threads, whatever the number of leases.
    let pool = KeeperPool::spawn(PoolOptions::new())?;

    let mut held = Vec::new();
    for shard in 0..SHARDS {
        let shard_prefix = format!("{prefix}/shard-{shard:03}");
        match Contender::new(Arc::clone(&store), &shard_prefix, options.clone()).try_acquire() {
            Ok(lease) => held.push(pool.add(lease)),
            Err(LeaseError::Held { holder, .. }) => println!("shard {shard} is {holder}'s"),
            Err(e) => return Err(e.into()),
        }
    }
    println!(
        "claimed {} shards; the pool keeps {}",
        held.len(),
        pool.len()
    );

    // Work under each lease: every write asks the lease and carries its epoch.
    for lease in &held {
        let writer = FencedWriter::new(Arc::clone(lease.lease()));
        let shard = lease.lease().key().trim_end_matches("/LEASE");
        let part = format!("{shard}/part-{}", lease.lease().epoch());
        writer.put_new(&part, b"work")?;
        writer.put_pointer(&format!("{shard}/LATEST"), part.as_bytes())?;
    }

    // Two TTLs later every lease is still ours: the pool renewed them all.
    std::thread::sleep(Duration::from_secs(2 * TTL_S));
    let writable = held.iter().filter(|l| l.may_write()).count();
    let renewals = pool
        .events()
        .try_iter()
        .filter(|e| matches!(e.event, Event::Renewed { .. }))
        .count();
    println!(
        "after {} s: {writable} of {} writable, {renewals} renewals",
        2 * TTL_S,
        held.len()
    );

    // Give one shard back while the pool runs.
    if let Some(first) = held.first() {
        println!(
            "gave back {}: {:?}",
            first.lease().key(),
            pool.remove(first.id())
        );
    }

    // Stopping releases every lease left.
    let released = pool.stop();
    let freed = released.iter().filter(|(_, r)| r.is_ok()).count();
    println!("stopped: {freed} of {} released", released.len());
    if let Some(dir) = scratch {
        std::fs::remove_dir_all(dir)?;
    }
    Ok(())
}
