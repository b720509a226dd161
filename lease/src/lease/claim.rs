//! Which `Lease` value of this process a record belongs to.
//!
//! A process may hold several [`Lease`](crate::Lease) values for one key
//! over its life, and for a moment two: a retry loop takes the lease again
//! after `Fenced` while the old value still lives. The process nonce alone
//! cannot tell their records apart, so each acquire call draws a
//! [`Claim`]: a random id its record carries for the life of the lease it
//! returns.
//!
//! What it promises:
//!
//! - **A claim is live while something may still write under it**: from
//!   the start of the acquire call that drew it until that call fails or
//!   the `Lease` it returned is dropped ([`Claim`] is that value's field,
//!   released last). [`is_live`] answers for this process only; a record of
//!   another process is never looked up.
//! - **A claim is never reused**: 128 random bits, drawn per call.
//!
//! An acquire uses it to judge a live record of its own process with
//! another claim: held by a live value (kept out, as by another process,
//! until the record is stale), or left by a value that is gone (a failed
//! attempt whose write landed unseen, a lease dropped without a successful
//! release), which nobody can write under any more and which is taken over
//! at once, at the next epoch.

use crate::record::new_instance_id;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The claims of this process's live acquire calls and `Lease` values:
/// the very allocations the claims hold (one per lease, not a copy).
fn live() -> MutexGuard<'static, HashSet<Arc<str>>> {
    static LIVE: OnceLock<Mutex<HashSet<Arc<str>>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// One acquire call's claim, live until dropped. See the [module
/// docs](self).
#[derive(Debug)]
pub(crate) struct Claim {
    id: Arc<str>,
}

impl Claim {
    /// A new claim, live from now.
    pub(crate) fn draw() -> Claim {
        let id: Arc<str> = new_instance_id().into();
        live().insert(Arc::clone(&id));
        Claim { id }
    }

    /// The id the record carries.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        live().remove(&*self.id);
    }
}

/// Whether a live acquire call or `Lease` of this process drew `claim`.
pub(crate) fn is_live(claim: &str) -> bool {
    live().contains(claim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_live_until_dropped_and_never_drawn_twice() {
        let first = Claim::draw();
        let second = Claim::draw();
        assert_ne!(first.id(), second.id());
        let id = first.id().to_string();
        assert!(is_live(&id) && is_live(second.id()));
        drop(first);
        assert!(!is_live(&id));
        assert!(is_live(second.id()));
    }
}
