//! bucket-lease: one writer at a time on a prefix of an S3-compatible bucket.
#![forbid(unsafe_code)]

pub use bucket_lease_backends as backends;
pub use bucket_lease_core::*;
