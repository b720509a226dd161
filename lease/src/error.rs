//! Why a lease could not be taken, renewed or released.

use crate::store::StoreError;
use std::fmt;

/// The environment variable that, set to `off`, asks for a best-effort lease
/// (read, then unconditional write) on a service without usable conditional
/// writes. Programs read it through
/// [`LeaseOptions::from_env`](crate::LeaseOptions::from_env).
pub const CONDITIONAL_ENV: &str = "BUCKET_LEASE_CONDITIONAL";

/// Which condition a service was caught ignoring by the acquire probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IgnoredCondition {
    /// A create-only write over an existing object was accepted.
    IfNoneMatch,
    /// A write conditional on an ETag the service never issued was accepted.
    IfMatch,
    /// A write conditional on an ETag, against an absent key, created it.
    IfMatchOnAbsentKey,
}

impl IgnoredCondition {
    /// The HTTP header the service ignores.
    pub fn header(self) -> &'static str {
        match self {
            IgnoredCondition::IfNoneMatch => "If-None-Match",
            IgnoredCondition::IfMatch | IgnoredCondition::IfMatchOnAbsentKey => "If-Match",
        }
    }
}

impl fmt::Display for IgnoredCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IgnoredCondition::IfNoneMatch => f.write_str("If-None-Match on PUT"),
            IgnoredCondition::IfMatch => f.write_str("If-Match on PUT"),
            IgnoredCondition::IfMatchOnAbsentKey => {
                f.write_str("If-Match on PUT to an absent key (it created the key)")
            }
        }
    }
}

/// Why a lease operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseError {
    /// Another instance holds a fresh lease on the key, or won the race for
    /// it against this attempt.
    Held {
        /// The lease object's key.
        key: String,
        /// Who holds it, as its record names it (`unknown` when the record
        /// could not be read).
        holder: String,
    },
    /// This lease is no longer ours: its record was replaced or deleted.
    /// A lost lease never comes back.
    Lost {
        /// The lease object's key.
        key: String,
        /// Who holds it now, when anyone does.
        holder: Option<String>,
    },
    /// The service accepted a conditional write whose condition was false,
    /// so the lease could not keep a second writer out. The acquire handed
    /// the key back before failing.
    ConditionsIgnored {
        /// The lease object's key.
        key: String,
        /// What the service ignored.
        condition: IgnoredCondition,
    },
    /// A store request failed.
    Store(StoreError),
}

impl LeaseError {
    /// The store error behind this one, if a request failed.
    pub fn store_error(&self) -> Option<&StoreError> {
        match self {
            LeaseError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseError::Held { key, holder } => write!(
                f,
                "lease {key} is held by instance {holder}; wait until it is released or its \
                 TTL runs out, or break it if that holder is known to be dead"
            ),
            LeaseError::Lost {
                key,
                holder: Some(holder),
            } => write!(
                f,
                "lease {key} was lost: instance {holder} holds it now; stop writing and acquire \
                 again"
            ),
            LeaseError::Lost { key, holder: None } => write!(
                f,
                "lease {key} was lost: its record was replaced or deleted; stop writing and \
                 acquire again"
            ),
            LeaseError::ConditionsIgnored { key, condition } => write!(
                f,
                "lease {key} not taken: the store ignores {condition}, so it cannot keep a \
                 second writer out (our record was removed again); use a service that honours \
                 conditional writes, or accept a best-effort lease by setting \
                 {CONDITIONAL_ENV}=off (LeaseOptions::best_effort in code)"
            ),
            LeaseError::Store(e) => write!(f, "lease store request failed: {e}"),
        }
    }
}

impl std::error::Error for LeaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LeaseError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<StoreError> for LeaseError {
    fn from(e: StoreError) -> Self {
        LeaseError::Store(e)
    }
}
