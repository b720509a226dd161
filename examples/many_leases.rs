//! A sharded worker: it keeps its fair share of a set of shard prefixes
//! held with a `HeldSet` (a `KeeperPool` underneath: a scheduler and a few
//! renewal threads, whatever the number of shards), writes one fenced
//! object per held shard per second, takes a shard again after losing it,
//! and stops, which releases every lease. Start one, then a second and a
//! third on one bucket: each worker's share falls (100, 50, 34/33/33) and
//! the others give their excess up to it. Kill one (Ctrl-C or `kill -9`):
//! its shards are free when their records expire, within the TTL, and the
//! others' shares grow to take them. Stop one (let its time run out): it
//! releases its shards and its slot at once. A fourth argument caps a
//! worker's share.
//!
//! ```text
//! cargo run --example many_leases                          # a fresh local directory
//! cargo run --example many_leases -- /some/dir             # a directory of yours
//! cargo run --example many_leases -- /some/dir 60          # 60 s; run more beside it
//! cargo run --example many_leases -- /some/dir 60 25       # 60 s, at most 25 shards
//! cargo run --example many_leases --features s3 -- s3://bucket/prefix
//! ```

mod common;

use bucket_lease::held_set::{HeldSet, HeldSetOptions, SetEvent};
use bucket_lease::KeptLease;
use bucket_lease::LeaseOptions;
use std::error::Error;
use std::time::{Duration, Instant};

const SHARDS: usize = 100;
const TTL_S: u64 = 3;

fn main() -> Result<(), Box<dyn Error>> {
    let (store, prefix, scratch) = common::open_store("shards", "shards")?;
    let seconds: u64 = std::env::args().nth(2).map_or(Ok(3), |s| s.parse())?;
    let mut options = HeldSetOptions::new(LeaseOptions::new(TTL_S).best_effort_from_env());
    if let Some(n) = std::env::args().nth(3) {
        options = options.at_most(n.parse()?);
    }
    let shards = (0..SHARDS).map(|i| format!("{prefix}/shard-{i:03}"));
    let set = HeldSet::spawn(store, shards, options)?;

    // Work under whatever is held, once a second: each write asks its
    // lease and carries its epoch, so a shard lost meanwhile is never
    // written under.
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut written = 0;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_secs(1));
        // Shards given up and taken in this second.
        let mut moved = (0, 0);
        for event in set.events().try_iter() {
            match event {
                SetEvent::Lost { prefix, loss } => println!("lost {prefix}: {loss}"),
                SetEvent::Members { live, share } => {
                    println!("{live} live workers: this one's share is {share} shards")
                }
                SetEvent::Released { .. } => moved.0 += 1,
                SetEvent::Taken { .. } => moved.1 += 1,
                SetEvent::Failed { prefix, error } => println!("{prefix}: {error}"),
                _ => {}
            }
        }
        let held = set.held();
        for shard in &held {
            if !shard.may_write() {
                continue;
            }
            let epoch = shard.epoch();
            let part = format!("{}/part-{epoch}-{written}", shard.prefix());
            match shard.writer().put_new(&part, b"work") {
                Ok(_) => written += 1,
                Err(e) => println!("{}: not written: {e}", shard.prefix()),
            }
        }
        println!(
            "holding {} of {SHARDS} shards (gave up {}, took {}); {written} parts written",
            held.len(),
            moved.0,
            moved.1
        );
    }

    // Stopping releases every lease held.
    let released = set.stop();
    let freed = released.iter().filter(|(_, r)| r.is_ok()).count();
    println!("stopped: {freed} of {} released", released.len());
    if let Some(dir) = scratch {
        std::fs::remove_dir_all(dir)?;
    }
    Ok(())
}
