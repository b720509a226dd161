//! Stores for bucket-lease: a local directory used as a bucket, and (under
//! the `s3`, `r2` and `minio` features) one signed-HTTP client for
//! S3-compatible services.
#![forbid(unsafe_code)]

#[cfg(feature = "fs")]
pub mod fs;
