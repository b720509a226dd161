//! Cloudflare R2: the account endpoint
//! `https://<ACCOUNT_ID>.r2.cloudflarestorage.com` (or a jurisdiction's,
//! `https://<ACCOUNT_ID>.<JURISDICTION>.r2.cloudflarestorage.com`), signing
//! region `auto`, path-style addressing.
//!
//! R2 does not document `If-Match` on DELETE, so conditional deletes are off
//! by default: a [`DeleteMode::IfVersion`](bucket_lease_core::store::DeleteMode)
//! answers `NotImplemented` and the lease falls back to read-then-delete.
//! Turn them on with [`HttpStoreBuilder::conditional_delete`] once probed.

use crate::http::{Addressing, HttpStoreBuilder, Profile};
use std::time::Duration;

/// The defaults for Cloudflare R2.
pub const PROFILE: Profile = Profile {
    name: "r2",
    addressing: Addressing::Path,
    region: Some("auto"),
    endpoint_for_region: None,
    conditional_delete: false,
    unquoted_etags: false,
    // "Maximum concurrent writes to the same object name (key): 1 per
    // second" (R2's Limits page); beyond it, 429.
    write_interval: Some(Duration::from_secs(1)),
};

/// The endpoint of `account_id`, in `jurisdiction` (such as `eu` or
/// `fedramp`) when one is given.
pub fn endpoint(account_id: &str, jurisdiction: Option<&str>) -> String {
    match jurisdiction {
        Some(j) => format!("https://{account_id}.{j}.r2.cloudflarestorage.com"),
        None => format!("https://{account_id}.r2.cloudflarestorage.com"),
    }
}

/// A builder with the R2 defaults; set the endpoint (see [`endpoint`]), the
/// bucket and the credentials.
pub fn builder() -> HttpStoreBuilder {
    HttpStoreBuilder::new(PROFILE)
}
