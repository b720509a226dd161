//! What the failover and pool benches share: the stores they open (moto,
//! the local S3 server `scripts/test-servers.sh` starts, and a scratch
//! directory) and how they read memory and percentiles.

use bucket_lease::Store;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Opens a store: the same one, or a new client on the same bucket, each
/// call.
pub type Opener = Box<dyn Fn() -> Arc<dyn Store>>;

/// moto over HTTP (a `minio://` store under the prefix `bench`), when
/// `scripts/test-servers.sh` started it and put its address in
/// `BUCKET_LEASE_TEST_MOTO_URL`; `None`, with a note, otherwise.
#[cfg(feature = "minio")]
pub fn moto() -> Option<Opener> {
    use bucket_lease::backends::config;
    let Ok(endpoint) = std::env::var("BUCKET_LEASE_TEST_MOTO_URL") else {
        eprintln!("note: BUCKET_LEASE_TEST_MOTO_URL is not set; skipping moto");
        return None;
    };
    let bucket =
        std::env::var("BUCKET_LEASE_TEST_BUCKET").unwrap_or_else(|_| "bucket-lease-test".into());
    let env = move |name: &str| match name {
        "AWS_ENDPOINT_URL" => Some(endpoint.clone()),
        "AWS_ACCESS_KEY_ID" => Some("test-key".to_string()),
        "AWS_SECRET_ACCESS_KEY" => Some("test-secret".to_string()),
        "AWS_REGION" => Some("us-east-1".to_string()),
        "AWS_EC2_METADATA_DISABLED" => Some("true".to_string()),
        _ => None,
    };
    let url = format!("minio://{bucket}/bench");
    Some(Box::new(move || {
        config::open_with_env(&url, &env).expect("moto opens").0
    }))
}

/// Without the `minio` feature there is no HTTP store to open.
#[cfg(not(feature = "minio"))]
pub fn moto() -> Option<Opener> {
    eprintln!("note: built without the minio feature; skipping moto");
    None
}

/// The scratch directory of a bench's fs runs, named after the bench and
/// this process; the bench removes it at the end.
pub fn scratch(bench: &str) -> PathBuf {
    std::env::temp_dir().join(format!("bucket-lease-{bench}-{}", std::process::id()))
}

/// A store on [`scratch`]`(bench)`, made if need be.
pub fn fs_store(bench: &str) -> Arc<dyn Store> {
    let dir = scratch(bench);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    Arc::new(bucket_lease::backends::fs::DirStore::open(&dir).expect("a scratch directory"))
}

/// The process's resident memory, from `/proc/self/statm` (0 elsewhere).
pub fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// p50, p99 and the maximum, in milliseconds (nearest rank).
pub fn percentiles(mut values: Vec<Duration>) -> (f64, f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    values.sort();
    let at = |q: f64| {
        let i = ((values.len() - 1) as f64 * q).round() as usize;
        values[i].as_secs_f64() * 1000.0
    };
    (at(0.5), at(0.99), at(1.0))
}
