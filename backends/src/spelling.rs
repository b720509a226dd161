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
//! first spelling comes back (unless another thread's write settled the
//! second meanwhile) and the refusal is returned.
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
//!   conditional write has landed. The spelling is one [`State`] (open,
//!   settled or configured; quoted or bare) in one atomic word with its
//!   count of changes, and a switch is one compare-and-swap from the very
//!   open state the refused write was sent in: a question that was asked
//!   before another thread's write settled the spelling switches nothing
//!   when its HEAD comes back (issue 28), and its refusal is returned.
//! - **Nothing decided in one spelling is kept in another.** Each spelling
//!   of the store's life is a [`Spelled`] (quoted or bare, after so many
//!   changes; settling does not make it another). The check of conditional
//!   deletes ([`crate::delete_check`]) sends its deletes in one and holds
//!   for that one alone: after a change the next conditional delete checks
//!   again, in the new spelling.
//! - **The question costs one HEAD** (two when the second spelling is
//!   refused too: a changed ETag then means a lost race, and the new
//!   spelling stays), within the write's own deadline, and
//!   only for an `If-Match` write refused while the spelling is unsettled.

use bucket_lease_core::mutant::StoreMutant;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where one store's spelling stands. Only an open one ever changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Not settled yet: a refused right ETag may switch it.
    Open {
        /// ETags are sent without their quotes.
        bare: bool,
    },
    /// A write conditional on a right ETag was accepted in it: it never
    /// changes again.
    Settled {
        /// ETags are sent without their quotes.
        bare: bool,
    },
    /// Configured: never questioned, never changed.
    Configured {
        /// ETags are sent without their quotes.
        bare: bool,
    },
}

/// The spelling as one look at it saw it: where it stood, and after how
/// many changes. What a request was sent in, and what a switch is decided
/// against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Now {
    pub(crate) state: State,
    /// How many times the spelling had changed.
    pub(crate) changes: u64,
}

impl Now {
    /// Whether ETags went out without their quotes.
    pub(crate) fn bare(self) -> bool {
        match self.state {
            State::Open { bare } | State::Settled { bare } | State::Configured { bare } => bare,
        }
    }

    /// Whether the spelling was open (not settled, not configured).
    pub(crate) fn open(self) -> bool {
        matches!(self.state, State::Open { .. })
    }

    /// Which spelling of the store's life this is (settling it does not
    /// make it another).
    pub(crate) fn spelled(self) -> Spelled {
        Spelled {
            bare: self.bare(),
            changes: self.changes,
        }
    }

    /// The state in one word, for one atomic: bit 0 bare, bits 1 and 2
    /// open (0), settled (1) or configured (2), the changes above them.
    fn word(self) -> u64 {
        let (phase, bare) = match self.state {
            State::Open { bare } => (0, bare),
            State::Settled { bare } => (1, bare),
            State::Configured { bare } => (2, bare),
        };
        (self.changes << 3) | (phase << 1) | u64::from(bare)
    }

    /// The state a [`word`](Now::word) holds.
    fn of(word: u64) -> Now {
        let bare = word & 1 == 1;
        let state = match (word >> 1) & 3 {
            0 => State::Open { bare },
            1 => State::Settled { bare },
            _ => State::Configured { bare },
        };
        Now {
            state,
            changes: word >> 3,
        }
    }
}

/// One spelling of a store's life: quoted or bare, after so many changes.
/// Settling keeps it the same spelling; a change makes another, even one
/// back to the same quotes. What is decided in one spelling (the check of
/// conditional deletes, [`crate::delete_check`]) holds for it alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spelled {
    /// ETags are sent without their quotes.
    pub(crate) bare: bool,
    /// How many times the spelling had changed before it.
    pub(crate) changes: u64,
}

impl Spelled {
    /// `quoted` or `bare`, for messages.
    pub(crate) fn name(self) -> &'static str {
        if self.bare {
            "bare"
        } else {
            "quoted"
        }
    }
}

/// One store's spelling of ETags in conditions. See the [module docs](self).
///
/// Its whole state is one word: settling and switching are each one
/// compare-and-swap against the state they were decided in, so neither
/// can undo the other.
#[derive(Debug)]
pub(crate) struct Spelling(AtomicU64);

impl Spelling {
    /// Start bare or quoted; `configured` fixes it for good.
    pub(crate) fn new(bare: bool, configured: bool) -> Spelling {
        let state = if configured {
            State::Configured { bare }
        } else {
            State::Open { bare }
        };
        Spelling(AtomicU64::new(Now { state, changes: 0 }.word()))
    }

    /// Where the spelling stands now.
    pub(crate) fn now(&self) -> Now {
        Now::of(self.0.load(Ordering::SeqCst))
    }

    /// Whether ETags go out without their quotes now.
    pub(crate) fn bare(&self) -> bool {
        self.now().bare()
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
        self.now().open()
    }

    /// A write conditional on a right ETag, sent `bare` or not, was
    /// accepted: settle that spelling, if it is the open one.
    pub(crate) fn accepted(&self, bare: bool) {
        // Once settled, a load and nothing more (every renewal comes here).
        let mut now = self.now();
        while now.state == (State::Open { bare }) {
            let settled = Now {
                state: State::Settled { bare },
                ..now
            };
            match self.0.compare_exchange(
                now.word(),
                settled.word(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return,
                Err(word) => now = Now::of(word),
            }
        }
    }

    /// Change to the other spelling, from `asked`: the open state a
    /// refused write was sent in. Only from that very state: if the
    /// spelling settled since (another thread's write on a right ETag was
    /// accepted), or changed, nothing changes. The state switched to when
    /// this call changed it.
    pub(crate) fn switch_from(&self, asked: Now) -> Option<Now> {
        let State::Open { bare } = asked.state else {
            return None;
        };
        let mut from = asked;
        if StoreMutant::SettledSpellingSwitched.on() {
            // Issue 28's defect: only the spelling is compared, so one that
            // settled since the question was asked is switched all the same.
            from = self.now();
            if from.bare() != bare || matches!(from.state, State::Configured { .. }) {
                return None;
            }
        }
        let to = Now {
            state: State::Open { bare: !bare },
            changes: from.changes + 1,
        };
        self.0
            .compare_exchange(from.word(), to.word(), Ordering::SeqCst, Ordering::SeqCst)
            .ok()
            .map(|_| to)
    }

    /// How many times the spelling changed.
    pub(crate) fn changes(&self) -> u64 {
        self.now().changes
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
        let asked = s.now();
        let switched = s.switch_from(asked).expect("switched");
        assert!(
            s.switch_from(asked).is_none(),
            "another thread switched first"
        );
        assert_eq!(s.now(), switched);
        assert!(s.bare() && s.changes() == 1);
        s.accepted(false);
        assert!(s.open(), "accepted in a spelling no longer in use");
        s.accepted(true);
        assert!(!s.open());
        assert_eq!(
            s.now(),
            Now {
                state: State::Settled { bare: true },
                changes: 1
            }
        );
        assert!(s.switch_from(switched).is_none(), "settled");
        assert_eq!(s.now().spelled(), switched.spelled(), "settling keeps it");
        assert_ne!(asked.spelled(), switched.spelled());
        let fixed = Spelling::new(true, true);
        assert!(!fixed.open() && fixed.bare());
        assert!(fixed.switch_from(fixed.now()).is_none(), "configured");
        assert!(same_etag("\"e1\"", "e1") && !same_etag("e1", "e2"));
    }

    /// Issue 28: thread A's write was refused while the spelling was open,
    /// so A asks (one HEAD); meanwhile thread B's write on a right ETag is
    /// accepted in that spelling and settles it. A's HEAD then says A's
    /// ETag was right: the settled spelling is not switched.
    #[test]
    fn a_question_opened_before_the_spelling_settled_does_not_switch_it() {
        let s = Spelling::new(false, false);
        let asked = s.now();
        assert!(s.open(), "A's refusal opens the question");
        s.accepted(false);
        assert!(!s.open(), "B's accepted write settled quoted");
        assert!(
            s.switch_from(asked).is_none(),
            "settled: A's answer switches nothing"
        );
        assert!(!s.bare() && s.changes() == 0);
    }

    /// Every state, and a large count, comes back from its word.
    #[test]
    fn the_state_word_holds_every_state() {
        for bare in [false, true] {
            for state in [
                State::Open { bare },
                State::Settled { bare },
                State::Configured { bare },
            ] {
                for changes in [0, 1, 7, u64::MAX >> 3] {
                    let now = Now { state, changes };
                    assert_eq!(Now::of(now.word()), now);
                    assert_eq!(now.bare(), bare);
                }
            }
        }
    }
}
