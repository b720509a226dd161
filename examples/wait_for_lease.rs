//! Waiting for a lease with `Contender::acquire_with`: a waiter takes over
//! the moment a crashed holder's record expires, notices a release at
//! once, and can be cancelled from another thread.
//!
//! ```text
//! cargo run --example wait_for_lease                  # a fresh local directory
//! cargo run --example wait_for_lease -- /some/dir     # a directory of yours
//! cargo run --example wait_for_lease --features s3 -- s3://bucket/prefix
//! ```

mod common;

use bucket_lease::{lease::Cancel, Contender, LeaseError, LeaseOptions, Wait};
use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TTL_S: u64 = 2;

fn main() -> Result<(), Box<dyn Error>> {
    let (store, prefix, scratch) = common::open_store("wait", "wait-demo")?;
    let options = LeaseOptions::new(TTL_S).best_effort_from_env();
    let contender = || Contender::new(Arc::clone(&store), &prefix, options.clone());

    // 1. A holder crashes: it stops renewing and never releases.
    let crashed = contender().try_acquire()?;
    let expires = crashed.confirmed_at() + Duration::from_secs(TTL_S);
    println!("A holds epoch {} and crashes", crashed.epoch());
    let mut b = contender();
    let lease = b.acquire_with(&Wait::until(
        Instant::now() + Duration::from_secs(4 * TTL_S),
    ))?;
    let late = Instant::now().saturating_duration_since(expires);
    println!(
        "B took over at epoch {}, {:.1} ms after A's record expired (B re-read it at least \
         every second and slept until the expiry)",
        lease.epoch(),
        late.as_secs_f64() * 1000.0
    );

    // 2. A release frees the lease at once: a waiter notices at its next
    //    read, long before the TTL.
    let waiter = {
        let mut c = contender();
        std::thread::spawn(move || {
            let wait = Wait::until(Instant::now() + Duration::from_secs(4 * TTL_S))
                .max_reread(Duration::from_millis(200));
            c.acquire_with(&wait).map(|lease| (lease, Instant::now()))
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let released_at = Instant::now();
    println!("B releases: {:?}", lease.release()?);
    let (lease, taken_at) = waiter.join().map_err(|_| "the waiter panicked")??;
    println!(
        "C took it {:.0} ms after the release, at epoch {}",
        taken_at
            .saturating_duration_since(released_at)
            .as_secs_f64()
            * 1000.0,
        lease.epoch()
    );

    // 3. A wait stops when cancelled from another thread.
    let cancel = Cancel::new();
    let waiter = {
        let (mut d, cancel) = (contender(), cancel.clone());
        std::thread::spawn(move || d.acquire_with(&Wait::forever().cancel(cancel)))
    };
    std::thread::sleep(Duration::from_millis(300));
    cancel.cancel();
    match waiter.join().map_err(|_| "the waiter panicked")? {
        Err(e @ LeaseError::Cancelled { .. }) => println!("D: {e}"),
        other => return Err(format!("D should have been cancelled, got {other:?}").into()),
    }
    println!("C releases: {:?}", lease.release()?);
    if let Some(dir) = scratch {
        std::fs::remove_dir_all(dir)?;
    }
    Ok(())
}
