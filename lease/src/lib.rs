//! The synchronous core of bucket-lease.
#![forbid(unsafe_code)]

pub mod clock;
pub mod memory;
pub mod store;
