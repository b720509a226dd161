//! MinIO: an endpoint that must be given (often `http://` on a LAN),
//! path-style addressing, region `us-east-1` unless told otherwise. MinIO
//! honours `If-Match` on DELETE.
//!
//! Older MinIO releases answer conditions wrongly (304 on a refused create,
//! ignored `If-None-Match`, `If-Match` creating an absent key): the lease's
//! probe catches them; this profile does not paper over them.

use crate::http::{HttpStoreBuilder, Profile};

/// The defaults for MinIO.
pub const PROFILE: Profile = Profile::path_style("minio");

/// A builder with the MinIO defaults; set the endpoint, the bucket and the
/// credentials.
pub fn builder() -> HttpStoreBuilder {
    HttpStoreBuilder::new(PROFILE)
}
