//! `Contender::run_while_held` as a program calls it, on a thread of its
//! own beside the program's main thread, with a contender of its own
//! built under the process's instance id (the main thread keeps using
//! its own for the same key meanwhile).
//!
//! As the real call does: the real `acquire_with` under a `Wait`; the
//! lease handed to a keeper (`keeper.rs`, the keeper's thread driven as
//! the real one would be); nothing run if the lease may no longer be
//! written then (the keeper stopped, which releases it); otherwise the
//! closure's work, here fenced writes through the real `FencedWriter`
//! until its drawn length is over or a stop is requested (the keeper's
//! loop ended, or `may_write()` is false); then the keeper stopped,
//! which releases the lease, and the outcome read from the status at the
//! closure's return and the release.

use super::super::rng::Rng;
use super::super::world::secs;
use super::keeper::SimKeeper;
use super::{brief, fenced_write, Ctx};
use bucket_lease_core::lease::{LeaseStatus, Wait};
use bucket_lease_core::FencedWriter;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One `run_while_held` on `key` (the lease on `prefix`), its draws from
/// `seed`; `busy` names the key while it runs and is cleared at its end.
pub(super) fn run_while_held(
    ctx: &Ctx,
    key: &'static str,
    prefix: &'static str,
    seed: u64,
    busy: &Mutex<Option<&'static str>>,
) {
    let mut rng = Rng::new(seed);
    let mut contender = ctx.contender(prefix);
    let value = ctx.sh.lock().draw_value(ctx.c, key, "run_while_held");
    let ttl = ctx.ttl();
    let poll = Duration::from_nanos(ttl / 5);
    let started = ctx.now();
    let deadline = ctx.clock.now() + poll * u32::try_from(rng.range(1, 6)).unwrap_or(1);
    let wait = Wait::until(deadline).max_reread(poll).attempt_timeout(poll);
    let acquired = contender.acquire_with(&wait);
    {
        let mut w = ctx.sh.lock();
        let limit = w.nanos_of(deadline);
        w.returned_by(ctx.c, "run_while_held's wait", started, limit);
    }
    match acquired {
        Err(e) => {
            let text = brief::<()>(&Err(e));
            ctx.log(|| format!("v{value} run_while_held on {key} runs nothing: {text}"));
        }
        Ok(lease) => {
            let lease = Arc::new(lease);
            ctx.handed_out(value, key, &lease);
            let keeper = SimKeeper::spawn(&ctx.sh, ctx.c, value, lease);
            if keeper.may_write() {
                work(ctx, value, &keeper, &mut rng);
                // The lease as the closure left it, before the release.
                let at_return = match keeper.lease().status() {
                    LeaseStatus::Held { deadline } => {
                        let deadline = ctx.sh.lock().nanos_of(deadline);
                        format!("held until {:.4} s", secs(deadline))
                    }
                    other => format!("{other:?}"),
                };
                let released = keeper.stop(&ctx.sh);
                ctx.log(|| {
                    format!(
                        "v{value} run_while_held returns: the lease was {at_return} at the \
                         closure's return; release: {released:?}"
                    )
                });
            } else {
                let released = keeper.stop(&ctx.sh);
                ctx.log(|| {
                    format!(
                        "v{value} run_while_held: fenced before the work; release: {released:?}"
                    )
                });
            }
        }
    }
    *busy.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// The closure: fenced writes, a pause after each, until its length is
/// over or a stop is requested.
fn work(ctx: &Ctx, value: usize, keeper: &SimKeeper, rng: &mut Rng) {
    let writer = FencedWriter::new(Arc::clone(keeper.lease()));
    let ttl = ctx.ttl();
    let end = ctx.now() + rng.range(ttl / 2, 3 * ttl);
    let mut n = 0;
    while ctx.now() < end && !keeper.ended() && keeper.may_write() {
        n += 1;
        fenced_write(ctx, value, &writer, n);
        let at = ctx.now() + ttl * rng.range(5, 25) / 100;
        ctx.sh.sleep_until(at);
    }
}
