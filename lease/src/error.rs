//! Why a lease could not be taken, renewed or released.
//!
//! # How errors read
//!
//! One convention holds for every error type of the workspace
//! ([`LeaseError`], [`StoreError`], [`BreakError`](crate::inspect::BreakError),
//! [`WriteError`](crate::fence::WriteError),
//! [`ReadError`](crate::fence::ReadError), and the backends' `ConfigError`
//! and `CredentialsError`): **`Display` tells the whole story, and
//! [`source`](std::error::Error::source) returns `None`.** An error that
//! wraps another (`LeaseError::Store`, `ConfigError::Open`, …) writes its
//! own context, then the wrapped error's text, once:
//!
//! ```text
//! lease store request failed: GET s3://bucket/p/LEASE: rejected (NoSuchBucket: …); the bucket does not exist: …
//! ```
//!
//! So printing an error with `{}` (as the `bucket-lease` command and the
//! `log` warnings do) shows everything, and a reporter that walks the
//! `source()` chain (`anyhow`, `eyre`, `Box<dyn Error>` printed by `main`)
//! shows nothing twice. The wrapped error itself is reached by matching on
//! the variant (or with [`LeaseError::store_error`]).
//!
//! A store error names the object as a user writes its URL
//! ([`StoreError::url`]: `GET s3://bucket/p/LEASE`), while
//! [`StoreError::key`] stays the plain key for code that matches on it.

use crate::record::{longest_key_bytes, max_prefix_bytes, MAX_SANE_TTL_S, PROBE_KEY_EXTRA_BYTES};
use crate::store::StoreError;
use std::fmt;

/// The environment variable that, set to `off`, asks for a best-effort lease
/// (read, then unconditional write) on a service without usable conditional
/// writes. Programs read it through
/// [`LeaseOptions::best_effort_from_env`](crate::LeaseOptions::best_effort_from_env).
pub const CONDITIONAL_ENV: &str = "BUCKET_LEASE_CONDITIONAL";

/// The environment variable through which the HTTP stores are told the ETag
/// form a service wants in `If-Match` (named in messages; read by the
/// backends, not by this crate).
const UNQUOTED_ENV: &str = "BUCKET_LEASE_UNQUOTED_ETAGS";

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

/// Who holds a lease to the contender that found it held
/// ([`LeaseError::Held`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HolderRelation {
    /// Another instance: another id, or a record nobody could read.
    Other,
    /// Another process under this contender's own instance id (its record
    /// carries another process nonce, or none): two processes were given
    /// one id. Give each process its own.
    Namesake,
    /// Another live [`Lease`](crate::Lease) of this very process, taken by
    /// an earlier acquire call and not yet released or dropped. A process
    /// holds a key through one value at a time: release or drop the older
    /// one first (its record is then freed, or taken over at once), or wait
    /// until its record goes stale, when it is taken over at the next epoch
    /// as another process's would be.
    ThisProcess,
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
        /// The holder's name for people, when its record carries one
        /// (see [`crate::record`]); informational only.
        holder_name: Option<String>,
        /// Who the holder is to this contender: another instance, another
        /// process under this contender's own instance id, or another
        /// live [`Lease`](crate::Lease) of this very process.
        relation: HolderRelation,
        /// The holder's epoch, when its record could be read.
        epoch: Option<u64>,
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
    /// The service refused a write conditional on the lease object's own,
    /// current ETag (`If-Match`), the write every renewal is: the lease
    /// could be taken but never kept. The acquire tried to hand the key
    /// back before failing.
    OwnEtagRefused {
        /// The lease object's key.
        key: String,
    },
    /// The service refused a write of our record conditional on its own,
    /// current ETag (`If-Match`), although the record still names this
    /// holder at exactly that version: nobody else wrote it. A refused
    /// renewal leaves the lease held until its write deadline (renew again
    /// meanwhile); a refused release leaves the record in place until its
    /// TTL runs out.
    OwnWriteRefused {
        /// The lease object's key.
        key: String,
        /// Which write was refused.
        write: OwnWrite,
    },
    /// No renewal landed within two thirds of the TTL (or the lease can no
    /// longer be renewed): the holder must stop writing. Returned by an
    /// acquire whose own requests outlasted the fence (the record was given
    /// back) and by a renewal of a lease fenced for good.
    Fenced {
        /// The lease object's key.
        key: String,
    },
    /// The TTL asked for is longer than
    /// [`MAX_SANE_TTL_S`]: every contender
    /// would treat the record as suspect and could take it from a live
    /// holder. Nothing was written.
    TtlTooLong {
        /// The TTL asked for, in seconds.
        ttl_s: u64,
    },
    /// The store takes one write of a key per
    /// [`write_interval`](crate::store::Store::write_interval), and the
    /// TTL's renewal interval (a third of it) is shorter, so renewals would
    /// be refused. Nothing was written.
    TtlTooShort {
        /// The TTL asked for, in seconds.
        ttl_s: u64,
        /// The smallest TTL whose renewals the store takes, in seconds.
        min_ttl_s: u64,
        /// The store's interval between two writes of a key.
        write_interval: std::time::Duration,
    },
    /// The record's epoch is `u64::MAX`, so no later holder can be given a
    /// greater one. Nothing was written.
    EpochExhausted {
        /// The lease object's key.
        key: String,
    },
    /// The lease key, or the acquire probe's key beside it
    /// ([`PROBE_KEY_EXTRA_BYTES`] longer; a best-effort lease sends no
    /// probe), is longer than the store accepts
    /// ([`Store::max_key_bytes`](crate::Store::max_key_bytes)). Nothing was
    /// sent.
    KeyTooLong {
        /// The lease object's key.
        key: String,
        /// The longest key the store accepts, in bytes.
        limit: usize,
        /// Whether the probe's key had to fit too.
        probe: bool,
    },
    /// A wait for the lease was cancelled through its
    /// [`Cancel`](crate::lease::Cancel) handle. Nothing of ours is left
    /// holding the key.
    Cancelled {
        /// The lease object's key.
        key: String,
    },
    /// Another renewal of this lease was in progress (on another thread),
    /// so this one sent nothing: renewals of one lease take turns. The
    /// lease is as the other renewal leaves it.
    RenewalInProgress {
        /// The lease object's key.
        key: String,
    },
    /// An acquire failed (`cause`), and so did its hand-back of the record
    /// it had written: the record names this instance and keeps the key
    /// from every other contender until `blocks_until`, when its TTL runs
    /// out, unless someone breaks it (`bucket-lease break`).
    RecordLeft {
        /// The lease object's key.
        key: String,
        /// Why the acquire failed.
        cause: Box<LeaseError>,
        /// Why the record could not be handed back.
        hand_back: Box<LeaseError>,
        /// When the record goes stale, as an RFC 3339 instant of the
        /// writer's clock.
        blocks_until: String,
    },
    /// A store request failed.
    Store(StoreError),
}

/// Which write of a held lease's own record the service refused
/// ([`LeaseError::OwnWriteRefused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OwnWrite {
    /// A renewal.
    Renewal,
    /// A release (the record rewritten as released).
    Release,
}

impl LeaseError {
    /// The store error behind this one, if a request failed.
    pub fn store_error(&self) -> Option<&StoreError> {
        match self {
            LeaseError::Store(e) => Some(e),
            LeaseError::RecordLeft { cause, .. } => cause.store_error(),
            _ => None,
        }
    }

    /// The error an acquire failed with, without what its failed hand-back
    /// added ([`LeaseError::RecordLeft`]): for deciding what to do.
    pub fn cause(&self) -> &LeaseError {
        match self {
            LeaseError::RecordLeft { cause, .. } => cause.cause(),
            other => other,
        }
    }

    /// Whether trying again cannot help until someone changes the
    /// configuration, the service or the bucket: refused credentials or
    /// permissions, a missing bucket, a service that ignores conditions, a
    /// TTL over the maximum, an exhausted epoch; or the caller cancelled
    /// the wait.
    pub fn is_permanent(&self) -> bool {
        match self {
            LeaseError::Store(e) => e.is_permanent(),
            LeaseError::RecordLeft { cause, .. } => cause.is_permanent(),
            LeaseError::ConditionsIgnored { .. }
            | LeaseError::OwnEtagRefused { .. }
            | LeaseError::TtlTooLong { .. }
            | LeaseError::TtlTooShort { .. }
            | LeaseError::EpochExhausted { .. }
            | LeaseError::KeyTooLong { .. }
            | LeaseError::Cancelled { .. } => true,
            LeaseError::RenewalInProgress { .. }
            | LeaseError::Held { .. }
            | LeaseError::Lost { .. }
            | LeaseError::Fenced { .. }
            | LeaseError::OwnWriteRefused { .. } => false,
        }
    }
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseError::Held {
                key,
                holder,
                holder_name,
                relation: HolderRelation::ThisProcess,
                epoch,
            } => write!(
                f,
                "the lease {key} is held by another Lease of this process (epoch {}, instance \
                 {holder}{}); release or drop it first, or wait until its record goes stale \
                 (one process holds a key through one Lease at a time)",
                epoch.map_or_else(|| "unknown".to_string(), |e| e.to_string()),
                named(holder_name)
            ),
            LeaseError::Held {
                key,
                holder,
                holder_name,
                relation: HolderRelation::Namesake,
                ..
            } => write!(
                f,
                "the lease {key} is held by another process under this same instance id \
                 {holder}{}; give each process its own instance id (this one waits until that \
                 process releases the lease or its TTL runs out)",
                named(holder_name)
            ),
            LeaseError::Held {
                key,
                holder,
                holder_name,
                ..
            } => write!(
                f,
                "lease {key} is held by instance {holder}{}; wait until it is released or its \
                 TTL runs out, or break it if that holder is known to be dead",
                named(holder_name)
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
                 second writer out (our record was handed back, marked released); use a service \
                 that honours conditional writes, or accept a best-effort lease by setting \
                 {CONDITIONAL_ENV}=off (LeaseOptions::best_effort in code)"
            ),
            LeaseError::OwnEtagRefused { key } => write!(
                f,
                "lease {key} not taken: the store refused a write conditional on the lease \
                 object's own ETag (If-Match), which every renewal is, so the lease could never \
                 be kept (an HTTP store tries the ETag in quotes and bare, unless \
                 BUCKET_LEASE_UNQUOTED_ETAGS fixes one: unset it, or set it to on for a service \
                 that wants bare ETags, as Ceph RGW 16.2 does); use a service that honours \
                 If-Match. The record may block the prefix until its TTL runs out, as the \
                 store refuses to let it be marked released"
            ),
            LeaseError::OwnWriteRefused {
                key,
                write: OwnWrite::Renewal,
            } => write!(
                f,
                "lease {key} not renewed: the store refused a write conditional on the record's \
                 own, current ETag (If-Match), although the record still names this holder at \
                 that version, so nobody else has taken it; the lease stays held until its write \
                 deadline and can be renewed again meanwhile. The store accepted such a write \
                 when the lease was taken: look for a proxy or a service that changed, and for \
                 {UNQUOTED_ENV} (unset, the store finds the ETag form the service wants)"
            ),
            LeaseError::OwnWriteRefused {
                key,
                write: OwnWrite::Release,
            } => write!(
                f,
                "lease {key} not released: the store refused to mark our record released with a \
                 write conditional on its own, current ETag (If-Match); the record still names \
                 this holder and keeps the prefix taken until its TTL runs out. Look for a proxy \
                 or a service that changed, and for {UNQUOTED_ENV} (unset, the store finds the \
                 ETag form the service wants)"
            ),
            LeaseError::Fenced { key } => write!(
                f,
                "lease {key} is fenced: no renewal landed within two thirds of its TTL; stop \
                 writing and acquire again"
            ),
            LeaseError::TtlTooLong { ttl_s } => write!(
                f,
                "a lease TTL of {ttl_s} s is over the maximum of {MAX_SANE_TTL_S} s: contenders \
                 would treat such a record as suspect and could take it from a live holder; use \
                 a TTL from 1 to {MAX_SANE_TTL_S} s"
            ),
            LeaseError::TtlTooShort {
                ttl_s,
                min_ttl_s,
                write_interval,
            } => write!(
                f,
                "a lease TTL of {ttl_s} s is too short for this store: it takes one write of a \
                 key every {write_interval:?}, and a lease is renewed every third of its TTL; \
                 use a TTL of at least {min_ttl_s} s"
            ),
            LeaseError::EpochExhausted { key } => write!(
                f,
                "lease {key} not taken: its record's epoch is at the largest value ({}), so no \
                 later holder can have a greater one; nothing was written. Remove the LEASE \
                 object by hand once no holder is alive",
                u64::MAX
            ),
            LeaseError::KeyTooLong { key, limit, probe } => {
                let (shown, bytes) = (shortened(key, 40), key.len());
                write!(
                    f,
                    "lease {shown} not taken: the store accepts keys of at most {limit} bytes, \
                     and "
                )?;
                if *probe {
                    write!(
                        f,
                        "beside the lease key ({bytes} bytes) the acquire's probe writes one \
                         {PROBE_KEY_EXTRA_BYTES} bytes longer, {} bytes",
                        longest_key_bytes(key, true)
                    )?;
                } else {
                    write!(f, "the lease key is {bytes} bytes")?;
                }
                write!(
                    f,
                    "; nothing was sent. Use a prefix of at most {} bytes",
                    max_prefix_bytes(*limit, *probe)
                )
            }
            LeaseError::RenewalInProgress { key } => write!(
                f,
                "a renewal of the lease {key} was not sent: another renewal of it is in progress \
                 on another thread; renew a lease from one thread at a time (a Keeper renews the \
                 lease it keeps: leave the renewals to it)"
            ),
            LeaseError::Cancelled { key } => write!(
                f,
                "waiting for lease {key} was cancelled; nothing was taken"
            ),
            LeaseError::Store(e) => write!(f, "lease store request failed: {e}"),
            LeaseError::RecordLeft {
                key,
                cause,
                hand_back,
                blocks_until,
            } => write!(
                f,
                "{cause}; and the record could not be handed back ({hand_back}): it names this \
                 instance and keeps {key} from every other contender until {blocks_until}, when \
                 its TTL runs out (or break it: bucket-lease break)"
            ),
        }
    }
}

/// No `source()`: `Display` already says the store error's text (see the
/// [module docs](self)).
impl std::error::Error for LeaseError {}

impl From<StoreError> for LeaseError {
    fn from(e: StoreError) -> Self {
        LeaseError::Store(e)
    }
}

/// ` (NAME)` for a holder with a name, nothing for one without.
fn named(holder_name: &Option<String>) -> String {
    holder_name
        .as_deref()
        .map(|name| format!(" ({name})"))
        .unwrap_or_default()
}

/// `text` cut to its first `chars` characters and `…` when longer, for a
/// message that names a very long key.
fn shortened(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreErrorKind;

    #[test]
    fn a_store_failure_is_said_once_along_the_chain() {
        let store = StoreError::new(StoreErrorKind::Rejected, "GET", "p/LEASE")
            .with_code("NoSuchBucket")
            .with_store_url("s3://b/");
        let e = LeaseError::Store(store.clone());
        crate::conformance::assert_said_once(&e, &store.to_string());
        assert!(e
            .to_string()
            .starts_with("lease store request failed: GET s3://b/p/LEASE"));
        assert_eq!(e.store_error(), Some(&store));
    }
}
