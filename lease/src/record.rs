//! The `LEASE` object: its JSON, its key, and how a reader judges it.
//!
//! The record is JSON with four fields every implementation of this lease
//! reads and writes, plus an `epoch` that older implementations ignore:
//!
//! ```json
//! {"instance_id":"4f…","acquired_at":"2026-11-29T19:00:00.123Z",
//!  "renewed_at":"2026-11-29T19:00:20.456Z","ttl_s":30,"epoch":3}
//! ```
//!
//! - Stamps are RFC 3339 on the writer's wall clock.
//! - `ttl_s` is the writer's TTL, and it governs: a reader with a different
//!   TTL of its own still judges the record by `ttl_s`.
//! - `epoch` counts takeovers; a record without it counts as epoch 0. A
//!   lease taken on an absent key (after a release deleted the record)
//!   starts again at 1, so epochs order the holders of one unbroken chain
//!   of takeovers, not holders on either side of a release.
//! - Unknown fields are ignored, so a newer writer's record stays readable.
//!
//! A record is **fresh** while the reader's wall clock is strictly less than
//! `ttl_s` past `renewed_at`. A stamp in the future is fresh (the writer's
//! clock runs ahead); a stamp that does not parse is stale. A record is
//! **suspect** when it was renewed more than its own TTL in the future or
//! carries a TTL over [`MAX_SANE_TTL_S`]: it might otherwise block the
//! prefix for as long as a clock stays wrong.

use serde::{Deserialize, Serialize};
use std::time::SystemTime;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// The longest TTL, in seconds, a record is trusted with: one hour.
pub const MAX_SANE_TTL_S: u64 = 3600;

/// The lease object's key for `prefix`: `{prefix}/LEASE`, or `LEASE` for the
/// empty prefix. Trailing slashes on the prefix are ignored.
pub fn lease_key(prefix: &str) -> String {
    match prefix.trim_end_matches('/') {
        "" => "LEASE".to_string(),
        p => format!("{p}/LEASE"),
    }
}

/// A fresh random instance id: 128 bits from the operating system, as 32
/// lower-case hex digits.
///
/// # Panics
///
/// When the operating system has no random source to offer, which leaves no
/// way to tell two holders apart.
pub fn new_instance_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A wall-clock instant as the record writes it: RFC 3339 in UTC.
pub fn format_stamp(at: SystemTime) -> String {
    OffsetDateTime::from(at)
        .format(&Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_string())
}

/// The contents of `{prefix}/LEASE`. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The holder's instance id.
    pub instance_id: String,
    /// When the holder took the lease, RFC 3339 on its wall clock.
    pub acquired_at: String,
    /// When the holder last renewed, RFC 3339 on its wall clock.
    pub renewed_at: String,
    /// How long after `renewed_at` the lease stays the holder's, in seconds.
    pub ttl_s: u64,
    /// How many takeovers led to this holder; absent in older records (0).
    #[serde(default)]
    pub epoch: u64,
}

impl LeaseRecord {
    /// Parse a record; `None` when the bytes are not a lease record.
    pub fn parse(bytes: &[u8]) -> Option<LeaseRecord> {
        serde_json::from_slice(bytes).ok()
    }

    /// The record as JSON bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Four strings and two integers: serialising cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// `renewed_at` as an instant, when it parses.
    pub fn renewed(&self) -> Option<OffsetDateTime> {
        OffsetDateTime::parse(&self.renewed_at, &Rfc3339).ok()
    }

    /// How long ago, by `now`, the record was renewed (negative when it is
    /// stamped in the future); `None` when the stamp does not parse.
    pub fn age(&self, now: SystemTime) -> Option<time::Duration> {
        self.renewed()
            .map(|renewed| OffsetDateTime::from(now) - renewed)
    }

    /// Whether the lease is still its holder's at the reader's `now`.
    pub fn is_fresh(&self, now: SystemTime) -> bool {
        match self.age(now) {
            Some(age) => age < ttl(self.ttl_s),
            None => false,
        }
    }

    /// Whether the record cannot be trusted to expire on time at the
    /// reader's `now`.
    pub fn is_suspect(&self, now: SystemTime) -> bool {
        if self.ttl_s > MAX_SANE_TTL_S {
            return true;
        }
        match self.age(now) {
            Some(age) => -age > ttl(self.ttl_s),
            None => false,
        }
    }
}

fn ttl(ttl_s: u64) -> time::Duration {
    time::Duration::seconds(i64::try_from(ttl_s).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn record(renewed: SystemTime, ttl_s: u64) -> LeaseRecord {
        LeaseRecord {
            instance_id: "holder".into(),
            acquired_at: format_stamp(renewed),
            renewed_at: format_stamp(renewed),
            ttl_s,
            epoch: 0,
        }
    }

    #[test]
    fn fresh_means_strictly_younger_than_the_holders_ttl() {
        let now = SystemTime::now();
        let s = Duration::from_secs;
        assert!(record(now - s(29), 30).is_fresh(now));
        assert!(
            !record(now - s(30), 30).is_fresh(now),
            "exactly one TTL old is stale"
        );
        assert!(
            record(now - s(50), 60).is_fresh(now),
            "the record's TTL, not ours"
        );
        assert!(
            record(now + s(3), 30).is_fresh(now),
            "a stamp in the future is fresh"
        );
        assert!(
            record(now, u64::MAX).is_fresh(now),
            "a huge TTL does not overflow"
        );
        let mut garbled = record(now, 30);
        garbled.renewed_at = "last tuesday".into();
        assert!(
            !garbled.is_fresh(now),
            "a stamp that does not parse is stale"
        );
    }

    #[test]
    fn suspect_means_far_future_or_absurd_ttl() {
        let now = SystemTime::now();
        let s = Duration::from_secs;
        assert!(!record(now, 30).is_suspect(now));
        assert!(
            !record(now + s(30), 30).is_suspect(now),
            "exactly one TTL ahead is not"
        );
        assert!(record(now + s(31), 30).is_suspect(now));
        assert!(record(now, MAX_SANE_TTL_S + 1).is_suspect(now));
        assert!(!record(now, MAX_SANE_TTL_S).is_suspect(now));
    }

    #[test]
    fn the_reference_format_reads_both_ways() {
        // A record as the async predecessor writes it: no epoch.
        let old = br#"{"instance_id":"abc","acquired_at":"2026-01-02T03:04:05.123456789Z","renewed_at":"2026-01-02T03:04:15Z","ttl_s":30}"#;
        let parsed = LeaseRecord::parse(old).expect("a reference record parses");
        assert_eq!((parsed.epoch, parsed.ttl_s), (0, 30));
        // Ours, with an unknown field a newer writer might add.
        let newer = br#"{"instance_id":"abc","acquired_at":"x","renewed_at":"y","ttl_s":5,"epoch":7,"host":"h"}"#;
        assert_eq!(LeaseRecord::parse(newer).unwrap().epoch, 7);
        // What we write has every field the reference requires, in its types.
        let ours: serde_json::Value =
            serde_json::from_slice(&record(SystemTime::now(), 30).to_bytes()).unwrap();
        for field in ["instance_id", "acquired_at", "renewed_at"] {
            assert!(ours[field].is_string(), "{field}");
        }
        assert!(ours["ttl_s"].is_u64());
        let stamp = ours["renewed_at"].as_str().unwrap();
        assert!(OffsetDateTime::parse(stamp, &Rfc3339).is_ok() && stamp.ends_with('Z'));
        assert!(LeaseRecord::parse(b"not json").is_none());
    }

    #[test]
    fn the_key_sits_under_the_prefix() {
        assert_eq!(lease_key("a/b"), "a/b/LEASE");
        assert_eq!(lease_key("a/b/"), "a/b/LEASE");
        assert_eq!(lease_key(""), "LEASE");
    }

    #[test]
    fn instance_ids_are_32_hex_digits_and_differ() {
        let (a, b) = (new_instance_id(), new_instance_id());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
