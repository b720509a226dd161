//! Stores for bucket-lease: a local directory used as a bucket, and (under
//! the `s3`, `r2` and `minio` features) one signed-HTTP client for
//! S3-compatible services.
//!
//! Most programs depend on the crate `bucket-lease`, which re-exports this
//! one as `bucket_lease::backends` and shows these same pages as its own,
//! so the examples name it `bucket_lease::backends`. A program that
//! depends on this crate alone writes `bucket_lease_backends` there.
//!
//! Every store implements [`Store`](bucket_lease_core::store::Store). The
//! HTTP stores share one client, [`HttpStore`]: SigV4-signed requests over
//! one keep-alive `ureq` agent, no async runtime. The profiles differ only
//! in their defaults ([`Profile`]): addressing, region, endpoint, whether
//! DELETE honours `If-Match`.
//!
//! # Features
//!
//! None is on by default; turn on the stores you use:
//!
//! | feature | store | modules |
//! |---|---|---|
//! | `fs` | a directory on the local disk used as a bucket | `fs` |
//! | `s3` | AWS S3 | `s3`, with the HTTP client |
//! | `r2` | Cloudflare R2 | `r2`, with the HTTP client |
//! | `minio` | MinIO | `minio`, with the HTTP client |
//!
//! Any of `s3`, `r2` and `minio` builds the one HTTP client ([`HttpStore`],
//! [`Profile`], `credentials`, `Credentials`); [`config`] opens whichever
//! stores were built and names the feature of one that was not.
//!
//! Name a store with a URL and let the environment fill in the rest:
//!
//! ```no_run
//! # mod bucket_lease { pub mod backends { pub use bucket_lease_backends::*; } }
//! use bucket_lease::backends::config;
//!
//! # fn main() -> Result<(), config::ConfigError> {
//! // Credentials from the chain: the environment, a profile of ~/.aws,
//! // web identity, container credentials or EC2 instance metadata.
//! let (store, prefix) = config::open("s3://my-bucket/jobs/nightly")?;
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
//! # mod bucket_lease { pub mod backends { pub use bucket_lease_backends::*; } }
//! # #[cfg(feature = "r2")] {
//! use bucket_lease::backends::{r2, Credentials};
//! let store = r2::builder()
//!     .endpoint(r2::endpoint("0123abcd", Some("eu")))
//!     .bucket("leases")
//!     .credentials(Credentials::new("key-id", "secret"))
//!     .build()
//!     .unwrap();
//! assert_eq!(store.base_url(), "https://0123abcd.eu.r2.cloudflarestorage.com/leases");
//! # }
//! ```
#![cfg_attr(
    not(http),
    doc = "\n[`HttpStore`]: self#features\n[`Profile`]: self#features"
)]
#![forbid(unsafe_code)]
// Where other crates' pages link to this one's items when its docs are not
// built beside theirs (`cargo doc --no-deps -p` of a crate that depends on
// this one): without it rustdoc leaves those links as raw text, with no
// warning. `0.1` is the latest 0.1.x on docs.rs; scripts/check-doc-links.sh
// checks it against the version in Cargo.toml.
#![doc(html_root_url = "https://docs.rs/bucket-lease-backends/0.1")]
// docs.rs (nightly, `--cfg docsrs`) marks each item with the features it
// needs; `http` is build.rs's name for "any of s3, r2, minio".
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(docsrs, doc(auto_cfg(hide(http))))]

pub mod config;
#[cfg(http)]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "s3", feature = "r2", feature = "minio")))
)]
pub mod credentials;
#[cfg(http)]
mod delete_check;
#[cfg(feature = "fs")]
pub mod fs;
#[cfg(http)]
mod http;
#[cfg(feature = "minio")]
pub mod minio;
#[cfg(http)]
mod net;
#[cfg(feature = "r2")]
pub mod r2;
#[cfg(feature = "s3")]
pub mod s3;
mod settings;
#[cfg(http)]
mod sign;
#[cfg(http)]
mod spelling;
pub mod trace;
#[cfg(http)]
mod xml;

#[cfg(http)]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "s3", feature = "r2", feature = "minio")))
)]
pub use http::{
    Addressing, EndpointVariant, HttpStore, HttpStoreBuilder, Profile, DEFAULT_MAX_BODY,
    DEFAULT_TIMEOUT,
};
#[cfg(http)]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "s3", feature = "r2", feature = "minio")))
)]
pub use settings::Proxies;
#[cfg(http)]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "s3", feature = "r2", feature = "minio")))
)]
pub use sign::Credentials;
