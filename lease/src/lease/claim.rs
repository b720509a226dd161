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

use std::collections::HashSet;
use std::ops::Deref;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// A claim's 128 bits, kept as bytes: 16 bytes in each `Lease` and in the
/// live set, with no allocation of their own (a pool keeps one per lease).
type Bits = [u8; 16];

/// The claims of this process's live acquire calls and `Lease` values.
fn live() -> MutexGuard<'static, HashSet<Bits>> {
    static LIVE: OnceLock<Mutex<HashSet<Bits>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// One acquire call's claim, live until dropped. See the [module
/// docs](self).
#[derive(Debug)]
pub(crate) struct Claim {
    bits: Bits,
}

impl Claim {
    /// A new claim, live from now.
    ///
    /// # Panics
    ///
    /// When the operating system has no random source, as
    /// [`new_instance_id`](crate::record::new_instance_id).
    pub(crate) fn draw() -> Claim {
        let mut bits = Bits::default();
        getrandom::fill(&mut bits).expect("the operating system's random source failed");
        live().insert(bits);
        Claim { bits }
    }

    /// The id the record carries: the claim's bits as 32 lower-case hex
    /// digits, written out on the stack.
    pub(crate) fn id(&self) -> ClaimId {
        ClaimId(crate::record::hex_digits(&self.bits))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        live().remove(&self.bits);
    }
}

/// A claim's id as its records spell it; reads as a `&str`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ClaimId([u8; 32]);

impl Deref for ClaimId {
    type Target = str;

    fn deref(&self) -> &str {
        std::str::from_utf8(&self.0).expect("hex digits are ASCII")
    }
}

/// Whether a live acquire call or `Lease` of this process drew `claim`:
/// only the exact spelling a claim writes (32 lower-case hex digits) names
/// one.
pub(crate) fn is_live(claim: &str) -> bool {
    crate::record::parse_hex_digits(claim).is_some_and(|bits| live().contains(&bits))
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
        assert!(is_live(&id) && is_live(&second.id()));
        drop(first);
        assert!(!is_live(&id));
        assert!(is_live(&second.id()));
    }

    /// Kept as bits, a claim still names itself exactly as the string it
    /// was: 32 lower-case hex digits, and no other spelling of its bits.
    #[test]
    fn only_a_claims_own_spelling_names_it() {
        let claim = Claim::draw();
        let id = claim.id().to_string();
        assert_eq!(id.len(), 32);
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert!(is_live(&id));
        let upper = id.to_ascii_uppercase();
        if upper != id {
            assert!(!is_live(&upper), "{upper} is not the claim's spelling");
        }
        for other in [&id[1..], &format!("{id}0"), &format!(" {}", &id[1..]), ""] {
            assert!(!is_live(other), "{other:?} is not the claim's spelling");
        }
        assert_eq!(crate::record::parse_hex_digits(&id), Some(claim.bits));
    }
}
