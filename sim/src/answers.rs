//! A store request's answer unpacked for the [`Store`] method that sent
//! it: how both simulated stores (the seeded runs' in `env.rs`, the
//! explorer's in `explore/io.rs`) turn a [`Done`] into the method's result,
//! an answer of another kind than the request's being an error.
//!
//! [`Store`]: bucket_lease_core::store::Store

use crate::world::Done;
use bucket_lease_core::store::{Object, StoreError, StoreErrorKind, Version};

impl Done {
    /// A GET's answer.
    pub(crate) fn into_get(self, key: &str) -> Result<Object, StoreError> {
        match self {
            Done::Get(r) => r,
            _ => Err(mismatched("GET", key)),
        }
    }

    /// A PUT's answer.
    pub(crate) fn into_put(self, key: &str) -> Result<Version, StoreError> {
        match self {
            Done::Put(r) => r,
            _ => Err(mismatched("PUT", key)),
        }
    }

    /// A DELETE's answer.
    pub(crate) fn into_delete(self, key: &str) -> Result<(), StoreError> {
        match self {
            Done::Delete(r) => r,
            _ => Err(mismatched("DELETE", key)),
        }
    }
}

/// The error for an answer of another kind than the `method` request on
/// `key` that it answers.
fn mismatched(method: &'static str, key: &str) -> StoreError {
    StoreError::new(StoreErrorKind::Rejected, method, key)
        .with_message("mismatched simulated answer")
}
