//! AWS S3: virtual-hosted addressing, the regional endpoint of the
//! region's partition, and a region that must be given (`AWS_REGION` or
//! `AWS_DEFAULT_REGION` through [`crate::config`]). S3 honours `If-Match`
//! on DELETE (since 2024).
//!
//! | partition | regions | endpoint | FIPS | dual-stack |
//! |---|---|---|---|---|
//! | `aws` | all others | `s3.{region}.amazonaws.com` | `s3-fips.{region}.amazonaws.com` | `s3.dualstack.{region}.amazonaws.com` |
//! | `aws-cn` | `cn-*` | `s3.{region}.amazonaws.com.cn` | none | `s3.dualstack.{region}.amazonaws.com.cn` |
//! | `aws-us-gov` | `us-gov-*` | `s3.{region}.amazonaws.com` | `s3-fips.{region}.amazonaws.com` | `s3.dualstack.{region}.amazonaws.com` |
//!
//! FIPS and dual-stack together: `s3-fips.dualstack.{region}.{suffix}`.

use crate::http::{Addressing, EndpointVariant, HttpStoreBuilder, Profile};

/// The defaults for AWS S3.
pub const PROFILE: Profile = Profile {
    name: "s3",
    addressing: Addressing::VirtualHosted,
    region: None,
    endpoint_for_region: Some(endpoint),
    conditional_delete: true,
    unquoted_etags: false,
    write_interval: None,
};

/// The standard AWS partition `region` belongs to: `aws`, `aws-cn`
/// (`cn-*`) or `aws-us-gov` (`us-gov-*`).
pub fn partition(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else {
        "aws"
    }
}

/// The regional endpoint of S3 in `region`, in its partition.
pub fn endpoint_for_region(region: &str) -> String {
    let suffix = match partition(region) {
        "aws-cn" => "amazonaws.com.cn",
        _ => "amazonaws.com",
    };
    format!("https://s3.{region}.{suffix}")
}

/// The endpoint of S3 in `region` in `variant` (FIPS, dual-stack).
///
/// # Errors
///
/// Why the region has no such endpoint (FIPS in `aws-cn`).
pub fn endpoint(region: &str, variant: EndpointVariant) -> Result<String, String> {
    let partition = partition(region);
    if variant.fips && partition == "aws-cn" {
        return Err(format!(
            "has no FIPS endpoint (the {partition} partition has none)"
        ));
    }
    let plain = endpoint_for_region(region);
    let service = match (variant.fips, variant.dualstack) {
        (false, false) => return Ok(plain),
        (true, false) => "s3-fips",
        (false, true) => "s3.dualstack",
        (true, true) => "s3-fips.dualstack",
    };
    Ok(plain.replacen("://s3.", &format!("://{service}."), 1))
}

/// A builder with the S3 defaults; set the bucket, the region and the
/// credentials.
pub fn builder() -> HttpStoreBuilder {
    HttpStoreBuilder::new(PROFILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_partition_has_its_regional_endpoint() {
        for (region, endpoint) in [
            ("eu-west-1", "https://s3.eu-west-1.amazonaws.com"),
            ("ap-southeast-5", "https://s3.ap-southeast-5.amazonaws.com"),
            ("cn-north-1", "https://s3.cn-north-1.amazonaws.com.cn"),
            (
                "cn-northwest-1",
                "https://s3.cn-northwest-1.amazonaws.com.cn",
            ),
            ("us-gov-west-1", "https://s3.us-gov-west-1.amazonaws.com"),
            ("us-gov-east-1", "https://s3.us-gov-east-1.amazonaws.com"),
        ] {
            assert_eq!(endpoint_for_region(region), endpoint, "{region}");
        }
    }

    #[test]
    fn each_partition_has_its_fips_and_dual_stack_endpoints() {
        let (fips, dual, both) = (
            EndpointVariant::new(true, false),
            EndpointVariant::new(false, true),
            EndpointVariant::new(true, true),
        );
        for (region, partition_name, variant, url) in [
            (
                "eu-west-1",
                "aws",
                fips,
                "https://s3-fips.eu-west-1.amazonaws.com",
            ),
            (
                "eu-west-1",
                "aws",
                dual,
                "https://s3.dualstack.eu-west-1.amazonaws.com",
            ),
            (
                "eu-west-1",
                "aws",
                both,
                "https://s3-fips.dualstack.eu-west-1.amazonaws.com",
            ),
            (
                "cn-north-1",
                "aws-cn",
                dual,
                "https://s3.dualstack.cn-north-1.amazonaws.com.cn",
            ),
            (
                "us-gov-west-1",
                "aws-us-gov",
                fips,
                "https://s3-fips.us-gov-west-1.amazonaws.com",
            ),
            (
                "us-gov-west-1",
                "aws-us-gov",
                dual,
                "https://s3.dualstack.us-gov-west-1.amazonaws.com",
            ),
            (
                "us-gov-east-1",
                "aws-us-gov",
                both,
                "https://s3-fips.dualstack.us-gov-east-1.amazonaws.com",
            ),
        ] {
            assert_eq!(partition(region), partition_name, "{region}");
            assert_eq!(endpoint(region, variant).as_deref(), Ok(url), "{region}");
        }
        for variant in [fips, both] {
            assert_eq!(
                endpoint("cn-northwest-1", variant).unwrap_err(),
                "has no FIPS endpoint (the aws-cn partition has none)"
            );
        }
    }
}
