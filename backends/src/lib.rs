//! Stores for bucket-lease: a local directory used as a bucket, and (under
//! the `s3`, `r2` and `minio` features) one signed-HTTP client for
//! S3-compatible services.
//!
//! Every store implements [`bucket_lease_core::store::Store`]. The HTTP
//! stores share one client, [`HttpStore`]: SigV4-signed requests over one
//! keep-alive `ureq` agent, no async runtime. The profiles differ only in
//! their defaults ([`Profile`]): addressing, region, endpoint, whether
//! DELETE honours `If-Match`.
//!
//! Name a store with a URL and let the environment fill in the rest:
//!
//! ```no_run
//! # fn main() -> Result<(), bucket_lease_backends::config::ConfigError> {
//! // Credentials from the chain: the environment, a profile of ~/.aws,
//! // web identity, container credentials or EC2 instance metadata.
//! let (store, prefix) = bucket_lease_backends::config::open("s3://my-bucket/jobs/nightly")?;
//! # Ok(()) }
//! ```
//!
//! Temporary credentials are refreshed before they expire; the
//! `credentials` module (HTTP features) gives the chain's order, what each
//! source reads and what is not supported.
//!
//! or configure in code:
//!
//! ```
//! # #[cfg(feature = "r2")] {
//! use bucket_lease_backends::{r2, Credentials};
//! let store = r2::builder()
//!     .endpoint(r2::endpoint("0123abcd", Some("eu")))
//!     .bucket("leases")
//!     .credentials(Credentials::new("key-id", "secret"))
//!     .build()
//!     .unwrap();
//! assert_eq!(store.base_url(), "https://0123abcd.eu.r2.cloudflarestorage.com/leases");
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod config;
#[cfg(feature = "_http")]
pub mod credentials;
#[cfg(feature = "_http")]
mod delete_check;
#[cfg(feature = "fs")]
pub mod fs;
#[cfg(feature = "_http")]
mod http;
#[cfg(feature = "minio")]
pub mod minio;
#[cfg(feature = "_http")]
mod net;
#[cfg(feature = "r2")]
pub mod r2;
#[cfg(feature = "s3")]
pub mod s3;
mod settings;
#[cfg(feature = "_http")]
mod sign;
#[cfg(feature = "_http")]
mod spelling;
#[cfg(feature = "_http")]
mod xml;

#[cfg(feature = "_http")]
pub use http::{
    Addressing, EndpointVariant, HttpStore, HttpStoreBuilder, Profile, DEFAULT_MAX_BODY,
    DEFAULT_TIMEOUT,
};
#[cfg(feature = "_http")]
pub use settings::Proxies;
#[cfg(feature = "_http")]
pub use sign::Credentials;
