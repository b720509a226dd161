//! Stores on the local test servers, for the real-server tests.
//!
//! `scripts/test-servers.sh start` starts the servers and writes
//! `.ci/tmp/servers.env`; source it before `cargo test`. When a server's
//! variable is absent, [`server`] prints a note and answers `None` (the test
//! returns early), unless `BUCKET_LEASE_REQUIRE_SERVERS=1`, when absence
//! fails the test.
//!
//! ```ignore
//! mod common;
//! let Some(store) = common::store(common::Server::Moto) else { return };
//! ```
#![allow(dead_code)]

pub mod canned;

use bucket_lease_backends::{Addressing, Credentials, HttpStore, HttpStoreBuilder, Profile};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A local S3-compatible server started by `scripts/test-servers.sh`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// moto behind one global lock: the conformant reference.
    Moto,
    /// s3rver: ignores `If-None-Match` and `If-Match`.
    S3rver,
    /// localbucket: honours `If-None-Match`, ignores `If-Match`.
    LocalBucket,
    /// nanio: verifies SigV4 signatures.
    Nanio,
    /// Ceph RGW 16.2: a real S3 service; refuses a quoted `If-Match`
    /// (right or wrong) and accepts the bare one, ignores `If-Match` on
    /// DELETE.
    Rgw,
    /// A second radosgw process on the same Ceph cluster as [`Server::Rgw`]
    /// (same zone, pools, user and bucket): the same store through another
    /// gateway.
    Rgw2,
}

impl Server {
    /// The variable holding the server's URL.
    pub fn variable(self) -> &'static str {
        match self {
            Server::Moto => "BUCKET_LEASE_TEST_MOTO_URL",
            Server::S3rver => "BUCKET_LEASE_TEST_S3RVER_URL",
            Server::LocalBucket => "BUCKET_LEASE_TEST_LOCALBUCKET_URL",
            Server::Nanio => "BUCKET_LEASE_TEST_NANIO_URL",
            Server::Rgw => "BUCKET_LEASE_TEST_RGW_URL",
            Server::Rgw2 => "BUCKET_LEASE_TEST_RGW2_URL",
        }
    }

    /// Credentials the server accepts.
    pub fn credentials(self) -> Credentials {
        match self {
            Server::Moto | Server::LocalBucket => Credentials::new("test-key", "test-secret"),
            Server::S3rver => Credentials::new("S3RVER", "S3RVER"),
            Server::Nanio => Credentials::new(
                required_var("BUCKET_LEASE_TEST_NANIO_ACCESS_KEY"),
                required_var("BUCKET_LEASE_TEST_NANIO_SECRET_KEY"),
            ),
            Server::Rgw | Server::Rgw2 => Credentials::new(
                required_var("BUCKET_LEASE_TEST_RGW_ACCESS_KEY"),
                required_var("BUCKET_LEASE_TEST_RGW_SECRET_KEY"),
            ),
        }
    }
}

/// Whether a missing server fails the test rather than skipping it.
pub fn servers_required() -> bool {
    std::env::var("BUCKET_LEASE_REQUIRE_SERVERS").as_deref() == Ok("1")
}

fn required_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set (see servers.env)"))
}

/// The server's URL, or `None` (with a note) when it is not configured.
///
/// # Panics
///
/// When it is not configured and `BUCKET_LEASE_REQUIRE_SERVERS=1`.
pub fn server(server: Server) -> Option<String> {
    match std::env::var(server.variable()) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let note = format!(
                "{} is not set: run scripts/test-servers.sh start and source .ci/tmp/servers.env",
                server.variable()
            );
            assert!(!servers_required(), "{note}");
            eprintln!("note: skipping: {note}");
            None
        }
    }
}

/// The bucket the servers were started with.
pub fn bucket() -> String {
    std::env::var("BUCKET_LEASE_TEST_BUCKET").unwrap_or_else(|_| "bucket-lease-test".into())
}

/// A profile enabled in this build, for tests that only need some client.
pub fn any_profile() -> Profile {
    #[cfg(feature = "minio")]
    return bucket_lease_backends::minio::PROFILE;
    #[cfg(all(not(feature = "minio"), feature = "r2"))]
    return bucket_lease_backends::r2::PROFILE;
    #[cfg(all(not(feature = "minio"), not(feature = "r2")))]
    return bucket_lease_backends::s3::PROFILE;
}

/// A builder for `server`: path-style, region `us-east-1`, conditional
/// deletes on, its bucket and credentials. `None` when it is not running.
pub fn builder(server_kind: Server) -> Option<HttpStoreBuilder> {
    let url = server(server_kind)?;
    Some(
        HttpStore::builder(any_profile())
            .endpoint(url)
            .bucket(bucket())
            .region("us-east-1")
            .addressing(Addressing::Path)
            .conditional_delete(true)
            .credentials(server_kind.credentials()),
    )
}

/// A store on `server` (see [`builder`]).
pub fn store(server_kind: Server) -> Option<HttpStore> {
    Some(builder(server_kind)?.build().expect("a valid test store"))
}

/// Every profile built into this crate, each configured its own way
/// against moto: S3 virtual-hosted (`bucket.s3.localhost`, connected to
/// moto's address), R2 path-style signing for region `auto`, MinIO
/// path-style. `None` when moto is not running.
pub fn profile_stores_on_moto() -> Option<Vec<(&'static str, HttpStore)>> {
    profile_stores_on(Server::Moto)
}

/// Every profile built into this crate against `server_kind`, configured
/// as [`profile_stores_on_moto`] says (but the S3 profile on RGW, whose
/// `rgw dns name` is `localhost`, at `bucket.localhost`), each with the
/// profile's own defaults (conditional deletes, ETag spelling). `None`
/// when it is not running.
// The pushes are each behind a profile's feature.
#[allow(clippy::vec_init_then_push)]
pub fn profile_stores_on(server_kind: Server) -> Option<Vec<(&'static str, HttpStore)>> {
    let url = server(server_kind)?;
    let mut stores = Vec::new();
    #[cfg(feature = "s3")]
    let addr: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .parse()
        .expect("the server's URL is http://127.0.0.1:PORT");
    #[cfg(feature = "s3")]
    let domain = match server_kind {
        Server::Rgw | Server::Rgw2 => "localhost",
        _ => "s3.localhost",
    };
    #[cfg(feature = "s3")]
    stores.push((
        "s3",
        bucket_lease_backends::s3::builder()
            .region("us-east-1")
            .endpoint(format!("http://{domain}:{}", addr.port()))
            // A custom endpoint is path-style unless asked otherwise.
            .addressing(Addressing::VirtualHosted)
            .connect_to(addr)
            .bucket(bucket())
            .credentials(server_kind.credentials())
            .build()
            .unwrap(),
    ));
    #[cfg(feature = "r2")]
    stores.push((
        "r2",
        bucket_lease_backends::r2::builder()
            .endpoint(url.clone())
            .bucket(bucket())
            .credentials(server_kind.credentials())
            .build()
            .unwrap(),
    ));
    #[cfg(feature = "minio")]
    stores.push((
        "minio",
        bucket_lease_backends::minio::builder()
            .endpoint(url.clone())
            .bucket(bucket())
            .credentials(server_kind.credentials())
            .build()
            .unwrap(),
    ));
    Some(stores)
}

/// A prefix no other test (or earlier run on the same server) uses.
pub fn unique_prefix(name: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("test/{name}-{nanos:x}-{}-{n}", std::process::id())
}
