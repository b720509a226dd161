//! The core's keeper driver ([`keep`]) on the simulation's scheduler: the
//! one renewal loop a [`bucket_lease_core::Keeper`] runs (wait, warm up,
//! renew, record, end, the loss callback, the wait for the stop, the
//! release), here under simulated time. The simulation's keepers, a
//! contender's (`actor.rs`) and a program's (`program/keeper.rs`), are
//! this runtime and nothing of their own: no file of the simulation builds
//! a renewal loop.
//!
//! The runtime holds the driver to what it promises its runtime:
//!
//! - no warm-up and no renewal begins after a wait said stop
//!   (mutant `driver-renews-after-stop`);
//! - every renewal returns by the write deadline its step gave
//!   (`driver-renews-past-deadline`), every warm-up by its renewal's due
//!   instant (`driver-warms-past-due`), the release by its timeout; a
//!   process paused meanwhile excused, as for every call
//!   ([`World::returned_by`](crate::world::World::returned_by)).
//!
//! On a keeper's thread the store's warm-up takes simulated time (a
//! connection made: up to twice the warm-up lead, now and then one that
//! hangs, drawn from a generator of their own so that every other draw of
//! a seed stays as it was), returning by the instant it was given
//! ([`slow_warm_up`]). A
//! pool's warm-ups still take none: the simulation's pool runtimes run
//! them on a renewal thread (an inline program pool on its scheduler),
//! where the real pool has a thread of their own.
//!
//! When a run ends, every simulated thread unwinds with the scheduler's
//! own payload ([`Over`]); the driver's guards pass it on
//! ([`Runtime::passes_through`]) rather than take the run's end for a
//! panic of the renewal path (a loss, an event, a release after the run).

use super::sched::{Nanos, Over, Shared, SEC};
use super::world::secs;
use bucket_lease_core::keeper::driver::{keep, Runtime, Work};
use bucket_lease_core::keeper::{warm_up_lead, Ended, Event, KeeperOptions};
use bucket_lease_core::lease::Lease;
use std::any::Any;
use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

thread_local! {
    /// Whether this simulated thread is a keeper's: its warm-ups take time.
    static KEEPER_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Keep `lease` on the calling simulated thread (contender `c`'s, named
/// `name` in the trace, `c0 keeper`, `c1 v3 keeper`) with the core's
/// driver, until `stop_asked` says so and the release is done. Each event
/// goes to `deliver`; the loss callback, if any, is `options`'.
pub(crate) fn drive(
    sh: &Arc<Shared>,
    c: usize,
    name: String,
    lease: &Lease,
    options: KeeperOptions,
    stop_asked: impl Fn() -> bool,
    deliver: impl FnMut(Event),
) -> Ended {
    KEEPER_THREAD.with(|k| k.set(true));
    let mut runtime = Driven {
        sh,
        c,
        name,
        stop_asked,
        deliver,
        stopped: false,
    };
    keep(lease, options, &mut runtime)
}

/// The runtime of one simulated keeper.
struct Driven<'a, S, D> {
    sh: &'a Arc<Shared>,
    c: usize,
    name: String,
    stop_asked: S,
    deliver: D,
    /// A wait said stop.
    stopped: bool,
}

impl<S: Fn() -> bool, D: FnMut(Event)> Runtime for Driven<'_, S, D> {
    fn now(&self) -> Instant {
        self.sh.lock().mono()
    }

    fn wait(&mut self, until: Option<Instant>) -> bool {
        loop {
            if (self.stop_asked)() {
                self.stopped = true;
                return false;
            }
            let (now, at) = {
                let w = self.sh.lock();
                let now = w.sched.now;
                (now, until.map(|u| w.nanos_of(u)))
            };
            match at {
                Some(at) if now >= at => return true,
                Some(at) => self.sh.wait_until(at),
                // For ever: until a stop wakes it.
                None => self.sh.wait_until(now + 3600 * SEC),
            }
        }
    }

    fn report(&mut self, event: Event) {
        {
            let mut w = self.sh.lock();
            let text = format!("{event:?}");
            let name = &self.name;
            w.log(|| format!("{name} event: {text}"));
        }
        (self.deliver)(event);
    }

    fn begins(&mut self, work: Work) {
        // A stop asked before the call begins: nothing was in flight when
        // it was asked (the call begins now), so the call must not begin.
        let asked = !self.stopped && (self.stop_asked)();
        let mut w = self.sh.lock();
        let what = match work {
            Work::WarmUp { .. } => "keeper warm-ups",
            Work::Renewal { .. } => "keeper renewals",
            Work::Release { .. } => "keeper releases",
        };
        w.drawn.add(what);
        let late = match work {
            Work::WarmUp { due } => Some(("warm-up for the renewal due", due)),
            Work::Renewal { deadline } => Some(("renewal bounded by", deadline)),
            Work::Release { .. } => None,
        };
        if let Some((what, at)) = late.filter(|_| self.stopped) {
            let at = secs(w.nanos_of(at));
            w.violation(format!(
                "keeper: {} began a {what} {at:.4} s after a wait said stop",
                self.name
            ));
        } else if let Some((what, at)) = late.filter(|_| asked) {
            let at = secs(w.nanos_of(at));
            w.violation(format!(
                "keeper: {} began a {what} {at:.4} s with a stop already asked",
                self.name
            ));
        }
    }

    fn returned(&mut self, work: Work, began: Instant) {
        let mut w = self.sh.lock();
        let (what, limit) = match work {
            Work::WarmUp { due } => ("warm-up", Some(due)),
            Work::Renewal { deadline } => ("renewal", Some(deadline)),
            Work::Release { deadline } => ("release", deadline),
        };
        let Some(limit) = limit else { return };
        let (began, limit) = (w.nanos_of(began), w.nanos_of(limit));
        let what = format!("{}'s {what}", self.name);
        w.returned_by(self.c, &what, began, limit);
    }

    fn passes_through(&self, unwind: &(dyn Any + Send)) -> bool {
        unwind.is::<Over>()
    }
}

/// The store's warm-up of contender `c` for a renewal due at `due`: on a
/// keeper's thread, a connection made in up to twice the lead a keeper
/// gives it (a TTL's, the contender's), one in six hanging, each
/// returning by `due` (the store's promise); on any other thread,
/// nothing, as before.
pub(crate) fn slow_warm_up(sh: &Shared, c: usize, key: &str, due: Instant) {
    if !KEEPER_THREAD.with(Cell::get) {
        return;
    }
    let at = {
        let mut w = sh.lock();
        let now = w.sched.now;
        let ttl = Duration::from_secs(w.contenders[c].ttl_s);
        let lead = u64::try_from(warm_up_lead(ttl / 3).as_nanos()).unwrap_or(SEC);
        let took: Nanos = if w.warm_up_rng.chance(1667) {
            u64::MAX / 4
        } else {
            w.warm_up_rng.range(0, 2 * lead + 1)
        };
        let until = w.nanos_of(due);
        let at = now.saturating_add(took).min(until.max(now));
        w.log(|| {
            format!(
                "c{c} store: warm-up for {key} (due {:.4}) connects until {:.4}",
                secs(until),
                secs(at)
            )
        });
        at
    };
    sh.sleep_until(at);
}
