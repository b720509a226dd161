//! Which `Lease` value each request, write window and record belongs to.
//!
//! A process (a contender index) may hold several `Lease` values for one
//! key over its life, and two at once: a program takes the lease again
//! after `Fenced` while the old value still lives (`program.rs`). Its
//! instance id and nonce cannot tell their records apart, so the checkers
//! tell holders apart by value:
//!
//! - every acquire call draws a value id before it starts; its attempts
//!   and the `Lease` it hands out share it ([`World::draw_value`]);
//! - each simulated thread says which value it acts for while it calls
//!   into the lease ([`World::act_for`]), and each request is tagged with
//!   it; a watched key's record belongs to the value whose request wrote
//!   it;
//! - a value handed out is known by a weak reference to its `Lease`
//!   ([`World::handed_out`]), so the checkers ask the value itself, never
//!   keep it alive, and see it gone once it is dropped.
//!
//! What is checked here, as each request lands on a watched key: **no
//! loss between values of one process**. A record whose value is live
//! (not dropped) and writable, by that `Lease`'s own `may_write()` on its
//! clocks at the landing, is never replaced or removed by a request of
//! another value of the same process. (Between processes, `world.rs`
//! checks no loss by name, nonce and staleness on true time.) Safety and
//! fencing tokens compare windows by value in `check.rs`.

use super::env::with_frozen_clocks;
use super::world::{secs, World};
use bucket_lease_core::record::LeaseRecord;
use bucket_lease_core::Lease;
use std::sync::{Arc, Weak};

/// A value's number in the run (`v12` in the trace).
pub(crate) type ValueId = usize;

/// One acquire call and the `Lease` it handed out, if it did.
#[derive(Debug)]
pub(crate) struct Value {
    pub(crate) contender: usize,
    pub(crate) key: &'static str,
    /// The call that drew it, for the trace and the violations.
    pub(crate) how: &'static str,
    /// The `Lease`, once handed out (empty before, and for ever when the
    /// call failed).
    lease: Weak<Lease>,
    /// Its epoch, once handed out.
    pub(crate) epoch: Option<u64>,
}

impl World {
    /// A new value of contender `c` on `key`, for an acquire call `how`
    /// about to start on the current thread, which acts for it from now.
    pub(crate) fn draw_value(&mut self, c: usize, key: &'static str, how: &'static str) -> ValueId {
        let value = self.values.len();
        self.values.push(Value {
            contender: c,
            key,
            how,
            lease: Weak::new(),
            epoch: None,
        });
        self.act_for(super::sched::current(), value);
        value
    }

    /// From now on, thread `tid`'s requests are `value`'s.
    pub(crate) fn act_for(&mut self, tid: usize, value: ValueId) {
        self.acting.insert(tid, value);
    }

    /// The acquire call of `value` handed out `lease`.
    pub(crate) fn handed_out(&mut self, value: ValueId, lease: &Arc<Lease>) {
        let v = &mut self.values[value];
        v.lease = Arc::downgrade(lease);
        v.epoch = Some(lease.epoch());
    }

    /// Whether `value`'s `Lease` still lives and, by its own `may_write()`
    /// on its clocks as they are now, may write. Called by the scheduler
    /// between simulated threads, so no lease call is in progress.
    fn writable(&self, value: ValueId) -> bool {
        let Some(lease) = self.values[value].lease.upgrade() else {
            return false;
        };
        let walls = (0..self.contenders.len()).map(|c| self.wall(c)).collect();
        with_frozen_clocks(self.mono(), walls, || lease.may_write())
    }

    /// Request `id` changed the record on `key` to `after` (`None`: it
    /// deleted it): it must not take the record of a live, writable value
    /// of its own process other than its own. Then the record is its
    /// value's.
    pub(crate) fn check_own_values(&mut self, id: usize, key: &'static str, after: Option<&[u8]>) {
        let (c, by) = (self.requests[id].contender, self.requests[id].value);
        let removed = after.is_none();
        let before = if removed {
            self.record_writer.remove(key)
        } else {
            match by {
                Some(v) => self.record_writer.insert(key, v),
                None => self.record_writer.remove(key),
            }
        };
        let (Some(by), Some(owner)) = (by, before) else {
            return;
        };
        let o = &self.values[owner];
        if owner == by || o.contender != c || !self.writable(owner) {
            return;
        }
        let how = match after.and_then(LeaseRecord::parse) {
            None if removed => "removed",
            Some(rec) if rec.is_released() => "released",
            _ => "replaced",
        };
        let (o_how, o_epoch) = (o.how, o.epoch.unwrap_or(0));
        let (b_how, b_epoch) = (self.values[by].how, self.values[by].epoch);
        let deadline = self.values[owner]
            .lease
            .upgrade()
            .map(|l| secs(self.nanos_of(l.confirmed_at() + l.fence_after())));
        self.violation(format!(
            "no loss: request #{id} of c{c}'s value v{by} ({b_how}, epoch {}) {how} the record \
             on {key} of v{owner} ({o_how}, epoch {o_epoch}), a live value of the same process \
             that may still write (until {:.4} s)",
            b_epoch.map_or("none yet".to_string(), |e| e.to_string()),
            deadline.unwrap_or(0.0)
        ));
    }

    /// Whether `value` handed out a `Lease` that still lives.
    pub(crate) fn is_live(&self, value: ValueId) -> bool {
        self.values[value].lease.strong_count() > 0
    }

    /// The values of contender `c` on `key` whose `Lease` still lives.
    pub(crate) fn live_values(&self, c: usize, key: &str) -> usize {
        self.values
            .iter()
            .filter(|v| v.contender == c && v.key == key && v.lease.strong_count() > 0)
            .count()
    }
}
