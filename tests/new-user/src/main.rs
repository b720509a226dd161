//! A program written from the README alone, as a new user would: the
//! library example (a fenced job), `run_while_held` with a holder name and
//! a loss callback, a bounded cancellable wait, and release on drop.
//!
//! ```text
//! new-user DIR            # file://DIR//nightly; DIR must exist
//! new-user s3://b/nightly # with AWS_* variables (moto in CI)
//! ```
//!
//! Run twice in a row on one bucket, each run is a new holder and must do
//! everything again. Exits non-zero, saying what went wrong, otherwise.

use bucket_lease::backends::config;
use bucket_lease::fence::FencedReader;
use bucket_lease::hold::HoldOutcome;
use bucket_lease::{
    lease::Cancel, Contender, Keeper, KeeperOptions, KeptLease, LeaseOptions, Wait,
};
use std::error::Error;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn Error>> {
    let target = std::env::args()
        .nth(1)
        .ok_or("usage: new-user DIR | URL (DIR: an existing directory, used as the bucket)")?;
    let url = if target.contains("://") {
        target
    } else {
        format!(
            "file://{}//nightly",
            std::path::absolute(&target)?.display()
        )
    };
    fenced_job(&url)?;
    run_while_held(&url)?;
    wait_then_drop(&url)?;
    println!("new-user: every README step worked on {url}");
    Ok(())
}

/// The README's library example, as it is written there.
fn fenced_job(url: &str) -> Result<(), Box<dyn Error>> {
    let (store, prefix) = config::open(url)?;
    let mut contender = Contender::new(
        store.clone(),
        &prefix,
        LeaseOptions::new(30).best_effort_from_env(),
    );
    let keeper = Keeper::spawn(contender.try_acquire()?, KeeperOptions::new())?;
    let epoch = keeper.epoch();
    let writer = keeper.writer();
    for part in 0..3 {
        writer.put_new(&format!("{prefix}/parts/{epoch}-{part}"), b"...")?;
    }
    let latest = format!("{prefix}/LATEST");
    writer.put_pointer(&latest, format!("parts/{epoch}-2").as_bytes())?;
    let reader = FencedReader::new(store).trusting(epoch);
    let pointer = reader.get(&latest)?;
    if pointer.object.body != format!("parts/{epoch}-2").as_bytes() || pointer.epoch != epoch {
        return Err(format!(
            "LATEST reads back {:?} at epoch {}",
            pointer.object.body, pointer.epoch
        )
        .into());
    }
    println!("fenced job: epoch {epoch}, 3 parts and LATEST written and read back");
    keeper.stop()?;
    Ok(())
}

/// "Run while holding the lease", with a name and a loss callback.
fn run_while_held(url: &str) -> Result<(), Box<dyn Error>> {
    let (store, prefix) = config::open(url)?;
    let mut contender =
        Contender::new(store, &prefix, LeaseOptions::new(30).best_effort_from_env())
            .with_holder_name("new-user-export")?;
    let wait = Wait::until(Instant::now() + Duration::from_secs(60));
    let options = KeeperOptions::new().on_loss(|loss| eprintln!("lease ended: {loss}"));
    let ran = contender.run_while_held(&wait, options, |held| {
        let epoch = held.lease().epoch();
        for part in 0..3 {
            if held.stop_requested() {
                return Err("the lease ended: stopping".to_string());
            }
            let key = format!("{prefix}/held/{epoch}-{part}");
            held.writer()
                .put_new(&key, b"...")
                .map_err(|e| e.to_string())?;
        }
        Ok(epoch)
    })?;
    match ran.outcome {
        HoldOutcome::Released(_) => {
            let epoch = ran.value?;
            println!("run_while_held: epoch {epoch}, 3 parts written, released");
            Ok(())
        }
        other => Err(format!("the work ran, but the lease did not last: {other:?}").into()),
    }
}

/// "Waiting for a lease", then a dropped lease frees the prefix at once:
/// a second contender takes it with one attempt.
fn wait_then_drop(url: &str) -> Result<(), Box<dyn Error>> {
    let (store, prefix) = config::open(url)?;
    let cancel = Cancel::new();
    let wait = Wait::until(Instant::now() + Duration::from_secs(60)).cancel(cancel.clone());
    let lease = Contender::new(
        store.clone(),
        &prefix,
        LeaseOptions::new(30).best_effort_from_env(),
    )
    .acquire_with(&wait)?;
    let first = lease.epoch();
    drop(lease);
    let again = Contender::new(store, &prefix, LeaseOptions::new(30).best_effort_from_env())
        .try_acquire()?;
    println!(
        "wait and drop: epoch {first} dropped, taken again at epoch {}",
        again.epoch()
    );
    again.release()?;
    Ok(())
}
