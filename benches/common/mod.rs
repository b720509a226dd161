//! What the failover and pool benches share: how they open moto, the
//! local S3 server `scripts/test-servers.sh` starts.

use bucket_lease::Store;
use std::sync::Arc;

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
