//! Two instances contend for one prefix of a bucket: the first holds the
//! lease and renews it, the second is kept out and told who holds it; then
//! the first stops without releasing (as a crashed process would), and the
//! second takes the lease over once the first one's TTL has run out.
//!
//! ```text
//! cargo run --example contenders                  # a fresh local directory
//! cargo run --example contenders -- /some/dir     # a directory of yours
//! cargo run --example contenders --features s3 -- s3://bucket/prefix
//! ```
//!
//! A directory argument is used as the bucket (`file://`); a URL is opened
//! as `bucket-lease` opens it (see `bucket_lease::backends::config`).

mod common;

use bucket_lease::KeptLease;
use bucket_lease::{Contender, Event, Keeper, KeeperOptions, LeaseError, LeaseOptions, Wait};
use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TTL_S: u64 = 2;

fn main() -> Result<(), Box<dyn Error>> {
    let (store, prefix, scratch) = common::open_store("demo", "demo")?;
    let options = LeaseOptions::new(TTL_S).best_effort_from_env();

    // Instance A takes the lease and renews it once by hand.
    let mut a = Contender::new(Arc::clone(&store), &prefix, options.clone());
    let a_lease = a.try_acquire()?;
    println!(
        "A ({}) holds {} with a {TTL_S} s TTL: epoch {}, {:?} exclusion",
        short(a.instance_id()),
        a_lease.key(),
        a_lease.epoch(),
        a_lease.exclusion()
    );

    // Instance B is kept out and told who holds the lease.
    let mut b = Contender::new(Arc::clone(&store), &prefix, options);
    match b.try_acquire() {
        Err(LeaseError::Held { holder, .. }) => {
            println!(
                "B ({}) is kept out: held by {}",
                short(b.instance_id()),
                short(&holder)
            )
        }
        other => return Err(format!("B should have been kept out, got {other:?}").into()),
    }

    let sent = Instant::now();
    a_lease.renew()?;
    println!(
        "A renewed in {:?}; it may write for {:?} more",
        sent.elapsed(),
        until(&a_lease)
    );

    // A stops renewing without releasing, as a crashed process would.
    let crashed_at = Instant::now();
    println!("A stops renewing without releasing (a crash)");
    // B waits: it sleeps until A's record can expire by its own clock,
    // re-reading it at least every second.
    let b_lease = b.acquire_with(&Wait::until(
        Instant::now() + Duration::from_secs(4 * TTL_S),
    ))?;
    println!(
        "B took the lease over {:.1} s later: epoch {}; A stopped writing {:.1} s after its \
         last renewal",
        crashed_at.elapsed().as_secs_f64(),
        b_lease.epoch(),
        a_lease.fence_after().as_secs_f64()
    );
    assert!(
        !a_lease.may_write(),
        "A is fenced before anyone may take over"
    );

    // Had A survived, its next renewal would tell it who took over.
    match a_lease.renew() {
        Err(e @ LeaseError::Lost { .. }) => println!("A's next renewal: {e}"),
        other => return Err(format!("A should have lost the lease, got {other:?}").into()),
    }

    // B hands its lease to a renewal thread, which renews every TTL/3.
    let keeper = Keeper::spawn(b_lease, KeeperOptions::new())?;
    match keeper
        .events()
        .recv_timeout(Duration::from_secs(TTL_S * 2))?
    {
        Event::Renewed { latency } => println!("B's keeper renewed in {latency:?}"),
        other => return Err(format!("expected a renewal, got {other:?}").into()),
    }
    println!("B stops: {:?}", keeper.stop()?);
    if let Some(dir) = scratch {
        std::fs::remove_dir_all(dir)?;
    }
    Ok(())
}

/// How long the holder may still write.
fn until(lease: &bucket_lease::Lease) -> Duration {
    lease.write_deadline().map_or(Duration::ZERO, |d| {
        d.saturating_duration_since(Instant::now())
    })
}

fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}
