//! AWS S3: virtual-hosted addressing, the regional endpoint
//! `https://s3.{region}.amazonaws.com`, and a region that must be given
//! (`AWS_REGION` or `AWS_DEFAULT_REGION` through [`crate::config`]).
//! S3 honours `If-Match` on DELETE (since 2024).

use crate::http::{Addressing, HttpStoreBuilder, Profile};

/// The defaults for AWS S3.
pub const PROFILE: Profile = Profile {
    name: "s3",
    addressing: Addressing::VirtualHosted,
    region: None,
    endpoint_for_region: Some(endpoint_for_region),
    conditional_delete: true,
    unquoted_etags: false,
};

/// The regional endpoint of S3 in `region`.
pub fn endpoint_for_region(region: &str) -> String {
    format!("https://s3.{region}.amazonaws.com")
}

/// A builder with the S3 defaults; set the bucket, the region and the
/// credentials.
pub fn builder() -> HttpStoreBuilder {
    HttpStoreBuilder::new(PROFILE)
}
