//! The README's library example as a program: a job that takes the lease
//! on a prefix, writes three immutable parts named by its epoch, moves the
//! `LATEST` pointer to the last one, reads the pointer back through a
//! reader that rejects older holders, and releases the lease.
//!
//! ```text
//! cargo run --example fenced_job -- /some/dir            # file:///some/dir//nightly
//! cargo run --example fenced_job --features s3 -- s3://bucket/nightly
//! ```
//!
//! Run it twice in a row on one bucket: the second run is a new holder at
//! the next epoch, finds the pointer the first run left, moves it, and
//! releases too. It exits non-zero if any step fails or the release did
//! not free the lease.

use bucket_lease::backends::config;
use bucket_lease::fence::FencedReader;
use bucket_lease::KeptLease;
use bucket_lease::{Contender, Keeper, KeeperOptions, LeaseOptions, Released};
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let target = std::env::args()
        .nth(1)
        .ok_or("usage: fenced_job DIR | URL (a directory is used as a file:// bucket)")?;
    let url = if target.contains("://") {
        target
    } else {
        let dir = std::path::absolute(&target)?;
        std::fs::create_dir_all(&dir)?;
        format!("file://{}//nightly", dir.display())
    };

    // The library use the README shows, line for line.
    let (store, prefix) = config::open(&url)?;
    let mut contender = Contender::new(
        store.clone(),
        &prefix,
        LeaseOptions::new(30).best_effort_from_env(),
    );
    let keeper = Keeper::spawn(contender.try_acquire()?, KeeperOptions::new())?;
    let epoch = keeper.epoch();

    // Immutable parts are named by epoch, so no two holders meet on a key;
    // the pointer moves by compare-and-swap on the version it last saw.
    let writer = keeper.writer();
    for part in 0..3 {
        writer.put_new(&format!("{prefix}/parts/{epoch}-{part}"), b"...")?;
    }
    let latest = format!("{prefix}/LATEST");
    writer.put_pointer(&latest, format!("parts/{epoch}-2").as_bytes())?;

    // A reader trusting this epoch rejects what older holders wrote.
    let reader = FencedReader::new(store).trusting(epoch);
    let pointer = reader.get(&latest)?;
    println!(
        "epoch {epoch}: wrote 3 parts; LATEST -> {} (written at epoch {})",
        String::from_utf8_lossy(&pointer.object.body),
        pointer.epoch
    );
    let released = keeper.stop()?;
    println!("released: {released:?}");
    if released != Released::Freed {
        return Err(format!("the lease was not freed: {released:?}").into());
    }
    Ok(())
}
