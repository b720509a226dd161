//! A large object streamed into the bucket under a held lease: SIZE bytes
//! made on the fly (nothing like SIZE is ever in memory) are written to
//! `{prefix}/uploads/{epoch}` through `FencedWriter::create` (the writer
//! `keeper.writer()` gives), in parts of 8 MiB, completed create-only
//! within the lease's write deadline.
//!
//! ```text
//! cargo run --release --example fenced_upload -- /some/dir 256MiB        # file:///some/dir//uploads-demo
//! cargo run --release --example fenced_upload --features s3 -- s3://bucket/backups 1GiB
//! ```
//!
//! It reads the object back as a stream (`FencedReader::open`, its epoch
//! checked before the first byte) and compares it with what it wrote,
//! then prints the key, the number of parts, the time (write and read
//! back), the throughput and the process's peak resident memory. Run it twice in a row on one bucket:
//! the second run is a new holder at the next epoch, so a new key. With
//! `--unfenced` it writes the same bytes as a plain multipart upload
//! through the same store calls, without the lease: the baseline of
//! `benches/upload.rs`.

#[path = "common/stream.rs"]
mod stream;

use bucket_lease::backends::config;
use bucket_lease::KeptLease;
use bucket_lease::{Contender, Keeper, KeeperOptions, LeaseOptions, Released};
use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fenced_upload: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let usage = "usage: fenced_upload DIR|URL SIZE [--unfenced] (SIZE: 256MiB, 1GiB, …)";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (target, size) = match args.as_slice() {
        [target, size] | [target, size, _] => (target, stream::parse_size(size)?),
        _ => return Err(usage.into()),
    };
    let unfenced = match args.get(2).map(String::as_str) {
        None => false,
        Some("--unfenced") => true,
        Some(_) => return Err(usage.into()),
    };
    let url = if target.contains("://") {
        target.clone()
    } else {
        let dir = std::path::absolute(target)?;
        std::fs::create_dir_all(&dir)?;
        format!("file://{}//uploads-demo", dir.display())
    };
    let (store, prefix) = config::open(&url)?;

    let started = Instant::now();
    let (key, streamed, seconds) = if unfenced {
        let key = format!("{prefix}/unfenced/{}", std::process::id());
        let streamed = stream::unfenced(&*store, &key, size)?;
        (key, streamed, started.elapsed().as_secs_f64())
    } else {
        let mut contender = Contender::new(
            store.clone(),
            &prefix,
            LeaseOptions::new(30).best_effort_from_env(),
        );
        let keeper = Keeper::spawn(contender.try_acquire()?, KeeperOptions::new())?;
        let epoch = keeper.epoch();
        let key = format!("{prefix}/uploads/{epoch}");
        let writer = keeper.writer();
        let streamed = stream::fenced(&writer, &key, size)?;
        let seconds = started.elapsed().as_secs_f64();
        // Read back through a reader that trusts this epoch: checked
        // before its first byte, compared as it streams.
        let reading = Instant::now();
        stream::read_back(store.clone(), &key, size, epoch)?;
        println!(
            "read back: the same {size} bytes, epoch {epoch} checked first, in {:.2} s",
            reading.elapsed().as_secs_f64()
        );
        let released = keeper.stop()?;
        if released != Released::Freed {
            return Err(format!("the lease was not freed: {released:?}").into());
        }
        (key, streamed, seconds)
    };
    let mib = size as f64 / f64::from(1 << 20);
    println!("key: {key}");
    println!("parts: {}", streamed.parts);
    if let Some(etag) = &streamed.version.etag {
        println!("etag: {etag}");
    }
    println!("bytes: {size}");
    println!("time: {seconds:.2} s ({:.1} MiB/s)", mib / seconds);
    match stream::peak_resident_bytes() {
        Some(peak) => println!(
            "peak resident memory: {:.1} MiB",
            peak as f64 / f64::from(1 << 20)
        ),
        None => println!("peak resident memory: unknown (no /proc/self/status)"),
    }
    Ok(())
}
