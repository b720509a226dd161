//! What the search checks beyond the seeded simulation's checks, which
//! tell holders apart by process: a process may hold several [`Lease`]
//! values for one key (a new acquire while an old value lives), and each
//! value is a holder of its own.
//!
//! - **One value writes at a time**: no two values of one process are
//!   inside a write window at once (two processes: `check.rs`).
//! - **An old value leaves a newer one's record alone**: a request a value
//!   sent while renewing, writing or releasing (or dropped) never changes a
//!   live record another value of its process wrote. (Taking its own
//!   process's record back is an acquire's to do.)
//! - **Epochs of successive holders grow**: each lease handed out carries
//!   a higher epoch than the last one handed to another process, and never
//!   a lower one than the last handed to its own.
//!
//! [`Lease`]: bucket_lease_core::Lease

use crate::world::{secs, World};
use bucket_lease_core::record::LeaseRecord;
use std::collections::HashMap;

/// What a process's call does, as far as the checks care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deed {
    Acquire,
    Write,
    Renew,
    Release,
}

/// Lease values are numbered per process: value `k` of process `p` is
/// `p * PER_PROCESS + k`.
const PER_PROCESS: usize = 16;

/// The number of value `k` of process `p`.
pub(crate) fn value_id(p: usize, k: usize) -> usize {
    p * PER_PROCESS + k
}

fn process_of(value: usize) -> usize {
    value / PER_PROCESS
}

/// Which value of a process acts now, and doing what.
#[derive(Debug, Clone, Copy)]
struct Act {
    value: usize,
    deed: Deed,
}

/// The lease values' part of one execution.
#[derive(Debug, Default)]
pub(crate) struct Values {
    /// What each process does now.
    acting: HashMap<usize, Act>,
    /// What each request was sent for, by request id.
    sent: Vec<Option<Act>>,
    /// The value whose request first wrote each record.
    author: HashMap<Vec<u8>, usize>,
    /// Each write window's value, by window index.
    windows: Vec<(usize, usize)>,
}

impl Values {
    /// Process `p`'s value `value` starts `deed`.
    pub(crate) fn act(&mut self, p: usize, value: usize, deed: Deed) {
        self.acting.insert(p, Act { value, deed });
    }

    /// Process `p` sent the next request.
    pub(crate) fn sent(&mut self, p: usize) {
        self.sent.push(self.acting.get(&p).copied());
    }

    /// Write window `window` belongs to `value`.
    pub(crate) fn window(&mut self, window: usize, value: usize) {
        self.windows.push((window, value));
    }

    /// Request `id` landed and changed the record from `before` to
    /// `after` (equal: no change).
    pub(crate) fn landed(
        &mut self,
        w: &mut World,
        id: usize,
        before: Option<&[u8]>,
        after: Option<&[u8]>,
    ) {
        if before == after {
            return;
        }
        let Some(act) = self.sent.get(id).copied().flatten() else {
            return;
        };
        if let Some(after) = after {
            self.author.insert(after.to_vec(), act.value);
        }
        let Some(before) = before else { return };
        let Some(&author) = self.author.get(before) else {
            return;
        };
        let live = LeaseRecord::parse(before).is_some_and(|r| !r.is_released());
        if act.deed != Deed::Acquire
            && live
            && author != act.value
            && process_of(author) == process_of(act.value)
        {
            w.violation(format!(
                "an old value: c{} value {} ({:?}) changed the live record value {} of its \
                 process wrote (request #{id})",
                process_of(act.value),
                act.value,
                act.deed,
                author
            ));
        }
    }

    /// The checks over the whole execution, into `w`'s violations.
    pub(crate) fn check(&self, w: &mut World) {
        let mut found = Vec::new();
        for (i, &(a, va)) in self.windows.iter().enumerate() {
            for &(b, vb) in &self.windows[i + 1..] {
                if va == vb || process_of(va) != process_of(vb) {
                    continue;
                }
                let (x, y) = (&w.windows[a], &w.windows[b]);
                let (xe, ye) = (x.end.unwrap_or(x.start), y.end.unwrap_or(y.start));
                if x.start < ye && y.start < xe && x.start < xe && y.start < ye {
                    found.push(format!(
                        "one value writes at a time: c{} values {va} ({} from {:.4} s) and {vb} \
                         ({} from {:.4} s) inside write windows at once",
                        process_of(va),
                        x.what,
                        secs(x.start),
                        y.what,
                        secs(y.start)
                    ));
                }
            }
        }
        let mut grants = w.grants.clone();
        grants.sort_by_key(|(t, _, _)| *t);
        for pair in grants.windows(2) {
            let ((_, c1, e1), (t2, c2, e2)) = (pair[0], pair[1]);
            if e2 < e1 || (c1 != c2 && e2 == e1) {
                found.push(format!(
                    "epochs: c{c2} was handed epoch {e2} at {:.4} s after c{c1} was handed \
                     epoch {e1}",
                    secs(t2)
                ));
            }
        }
        w.violations.extend(found);
    }
}
