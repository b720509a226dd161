//! Buckets that keep versions: a lease on one says so, once.
//!
//! On a bucket with versioning on, every write of `{prefix}/LEASE` keeps the
//! version it replaces: a renewal every third of the TTL is
//! `86400 / (ttl_s / 3)` versions a day ([`versions_per_day`]: 8,640 at a
//! TTL of 30 s), plus two per acquire (its write and the probe's write on
//! its own record) and one per release, each stored, listed and billed
//! until deleted. A lifecycle rule that expires the record's noncurrent
//! versions after a day keeps them bounded ([`lifecycle_rule`]).
//!
//! What it promises:
//!
//! - The lease hands `note_put` the answer to every write of its record
//!   but the release: the acquire's write, the probe's write on the
//!   record's own ETag, every renewal. The first answer that carries a
//!   version id ([`is_versioned`]: S3's `x-amz-version-id`, other than
//!   `null`, the name S3 gives the one version of a bucket whose versioning
//!   was never on or is suspended) logs one warning (`log::warn!`) naming
//!   the object, the versions a day at the lease's TTL and the rule. It
//!   sends nothing and changes nothing the lease does.
//! - Once per lease object per process: a process-wide set of the objects
//!   already named (the store's URL and the key). A process that takes the
//!   same lease again (`run` after a loss, a pool's lease removed and added,
//!   a new `Contender` after `Fenced`) writes to the same bucket: saying it
//!   again would tell nothing new, and a set per `Contender` would say it
//!   again for each. The set grows by one entry per versioned lease object
//!   the process writes, never more.
//! - Only the lease record: releases (one write, after the warning was due)
//!   and fenced data writes ([`crate::fence`], the application's own
//!   objects) are not looked at.

use crate::store::{Store, Version};
use std::collections::BTreeSet;
use std::sync::Mutex;

/// How many versions of the record a day a lease at `ttl_s` adds by
/// renewing (every third of its TTL) on a bucket that keeps versions:
/// `86400 / (ttl_s / 3)`, in whole versions. Acquires and releases add
/// two and one more.
pub fn versions_per_day(ttl_s: u64) -> u64 {
    3 * 86_400 / ttl_s.max(1)
}

/// Whether `version` is one of a bucket that keeps versions: it carries a
/// version id, and not S3's `null` (the one version of a bucket whose
/// versioning was never on or is suspended).
pub fn is_versioned(version: &Version) -> bool {
    version
        .version_id
        .as_deref()
        .is_some_and(|id| !id.is_empty() && id != "null")
}

/// The S3 lifecycle rule that expires the noncurrent versions of the lease
/// object `key` one day after they are replaced, as one line of JSON (one
/// entry of a lifecycle configuration's `Rules`).
pub fn lifecycle_rule(key: &str) -> String {
    serde_json::json!({
        "Filter": { "Prefix": key },
        "NoncurrentVersionExpiration": { "NoncurrentDays": 1 },
        "Status": "Enabled",
    })
    .to_string()
}

/// What a bucket that keeps versions costs a lease at `ttl_s`, in words:
/// the versions a day, and that each is billed. Without a TTL (a record
/// released, broken or unreadable), the rule for any TTL and its count at
/// 30 s.
pub fn cost(ttl_s: Option<u64>) -> String {
    let count = match ttl_s {
        Some(ttl_s) => format!(
            "about {} versions a day at ttl_s {ttl_s} (a renewal every third of the TTL",
            versions_per_day(ttl_s)
        ),
        None => format!(
            "86400 / (TTL / 3) versions a day while a lease renews ({} at ttl_s 30",
            versions_per_day(30)
        ),
    };
    format!(
        "{count}, plus two for each acquire and one for each release), each kept and billed \
         until deleted"
    )
}

/// What bounds the versions of the lease object `key`, in words: the
/// [`lifecycle_rule`] and where it goes.
pub fn remedy(key: &str) -> String {
    format!(
        "expire noncurrent versions of {key} after 1 day with this rule in the bucket's \
         lifecycle configuration: {} (aws s3api put-bucket-lifecycle-configuration replaces \
         the whole configuration: keep the bucket's other rules in it)",
        lifecycle_rule(key)
    )
}

/// The lease objects this process has named as versioned.
static NAMED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Look at `answer`, the answer to a write of the lease record `key` on
/// `store` by a lease at `ttl_s`: warn once per object and process when it
/// says the bucket keeps versions. See the [module docs](self).
pub(crate) fn note_put(store: &dyn Store, key: &str, ttl_s: u64, answer: &Version) {
    if !is_versioned(answer) {
        return;
    }
    let object = format!("{}{key}", store.store_url().unwrap_or(""));
    let first = NAMED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(object.clone());
    if first {
        log::warn!(
            "{object}: the bucket keeps every version of the lease record: {}. To bound them, {}. \
             This is said once per lease object per process.",
            cost(Some(ttl_s)),
            remedy(key)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_a_day_are_a_renewal_every_third_of_the_ttl() {
        assert_eq!(versions_per_day(30), 8_640);
        assert_eq!(versions_per_day(3), 86_400);
        assert_eq!(versions_per_day(10), 25_920);
        assert_eq!(versions_per_day(0), 259_200, "no division by zero");
    }

    #[test]
    fn only_a_real_version_id_is_a_versioned_bucket() {
        let with = |id: Option<&str>| Version {
            etag: Some("\"e\"".into()),
            version_id: id.map(str::to_string),
        };
        assert!(is_versioned(&with(Some(
            "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY"
        ))));
        assert!(!is_versioned(&with(Some("null"))));
        assert!(!is_versioned(&with(Some(""))));
        assert!(!is_versioned(&with(None)));
    }

    #[test]
    fn the_rule_filters_on_the_key_and_expires_noncurrent_versions_after_a_day() {
        let rule: serde_json::Value =
            serde_json::from_str(&lifecycle_rule("jobs/\"q\"/LEASE")).unwrap();
        assert_eq!(rule["Filter"]["Prefix"], "jobs/\"q\"/LEASE");
        assert_eq!(rule["NoncurrentVersionExpiration"]["NoncurrentDays"], 1);
        assert_eq!(rule["Status"], "Enabled");
    }
}
