//! How `If-Match` spells an ETag for one service, learned from its answers.
//!
//! S3 clients send an ETag in `If-Match` as the service returned it, in
//! quotes. Some services refuse that spelling even for the right ETag and
//! accept only the bare one (Ceph RGW 16.2 answers 412 to every quoted
//! `If-Match`, right or wrong). An [`HttpStore`](crate::HttpStore) starts
//! with the profile's spelling (quoted) and, until a write conditional on a
//! right ETag has been accepted, treats a refused one as a question: it
//! reads the object's ETag (one HEAD), and when that is the very ETag the
//! write was conditional on, the service refused a right condition, so the
//! write is sent once more in the other spelling. If that one is accepted
//! the spelling is settled for the store's life; if it is refused too, the
//! first spelling stays and the refusal is returned.
//!
//! What it promises:
//!
//! - **Nothing is trusted that the probe has not checked.** The spelling
//!   only changes on the evidence of a right ETag refused, and every change
//!   is counted ([`Spelling::changes`], the store's
//!   `Store::condition_spelling`), so an acquire's probe that saw it change
//!   checks its refusals again in the new spelling.
//! - **A configured spelling is never changed** (`BUCKET_LEASE_UNQUOTED_ETAGS`
//!   or the builder's `unquoted_etags`), and neither is one a right ETag
//!   was accepted in: a conformant service costs no extra request once one
//!   conditional write has landed.
//! - **The question costs one HEAD** (two when the second spelling is
//!   refused too: a changed ETag then means a lost race, and the new
//!   spelling stays), within the write's own deadline, and
//!   only for an `If-Match` write refused while the spelling is unsettled.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One store's spelling of ETags in conditions. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Spelling {
    /// ETags are sent without their quotes.
    bare: AtomicBool,
    /// Configured, or a right ETag was accepted in the spelling in use:
    /// it never changes again.
    settled: AtomicBool,
    /// How many times the spelling changed.
    changes: AtomicU64,
}

impl Spelling {
    /// Start bare or quoted; `configured` settles it at once.
    pub(crate) fn new(bare: bool, configured: bool) -> Spelling {
        Spelling {
            bare: AtomicBool::new(bare),
            settled: AtomicBool::new(configured),
            changes: AtomicU64::new(0),
        }
    }

    /// Whether ETags go out without their quotes now.
    pub(crate) fn bare(&self) -> bool {
        self.bare.load(Ordering::SeqCst)
    }

    /// `etag` as `If-Match` carries it when sent `bare` or not.
    pub(crate) fn spell(etag: &str, bare: bool) -> String {
        if bare {
            etag.trim_matches('"').to_string()
        } else {
            etag.to_string()
        }
    }

    /// Whether a refused `If-Match` write is worth the question (the
    /// spelling is not settled yet).
    pub(crate) fn open(&self) -> bool {
        !self.settled.load(Ordering::SeqCst)
    }

    /// A write conditional on a right ETag, sent `bare` or not, was
    /// accepted: keep that spelling.
    pub(crate) fn accepted(&self, bare: bool) {
        // Once settled, a load and nothing more (every renewal comes here).
        if self.open() && self.bare() == bare {
            self.settled.store(true, Ordering::SeqCst);
        }
    }

    /// Change from the spelling `from` to the other one; `true` when this
    /// call changed it (another thread may have done so first).
    pub(crate) fn switch_from(&self, from: bool) -> bool {
        let switched = self
            .bare
            .compare_exchange(from, !from, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if switched {
            self.changes.fetch_add(1, Ordering::SeqCst);
        }
        switched
    }

    /// How many times the spelling changed.
    pub(crate) fn changes(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }
}

/// Whether two ETags are one, whatever their quotes.
pub(crate) fn same_etag(a: &str, b: &str) -> bool {
    a.trim_matches('"') == b.trim_matches('"')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_counts_once_and_a_settled_spelling_stays() {
        let s = Spelling::new(false, false);
        assert!(s.open() && !s.bare());
        assert_eq!(Spelling::spell("\"e1\"", false), "\"e1\"");
        assert_eq!(Spelling::spell("\"e1\"", true), "e1");
        assert!(s.switch_from(false));
        assert!(!s.switch_from(false), "another thread switched first");
        assert!(s.bare() && s.changes() == 1);
        s.accepted(false);
        assert!(s.open(), "accepted in a spelling no longer in use");
        s.accepted(true);
        assert!(!s.open());
        assert!(!Spelling::new(true, true).open());
        assert!(same_etag("\"e1\"", "e1") && !same_etag("e1", "e2"));
    }
}
