#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub use bucket_lease_backends as backends;
pub use bucket_lease_core::*;
