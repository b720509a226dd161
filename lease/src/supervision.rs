//! When a command that runs under a lease must be stopped: the decisions
//! of `bucket-lease run`, as a machine without processes or I/O, so that a
//! simulation can check them on simulated time.
//!
//! A [`Plan`] is told what the lease looks like at each instant
//! ([`Plan::observe`], from [`Seen::of`] or the keeper's events) and which
//! signals reached the supervisor ([`Plan::signal`]); it answers when
//! SIGTERM goes (the return value) and when SIGKILL is due
//! ([`Plan::kill_due`], [`Plan::next_wake`]). Its promises, with
//! `W = min(grace, TTL/6)`:
//!
//! - **Dead by the write deadline.** While renewals fail, SIGTERM goes `W`
//!   (at least [`KILL_MARGIN`]) before the write deadline and SIGKILL
//!   [`KILL_MARGIN`] before it. Fenced: SIGKILL at once. Lost: SIGTERM at
//!   once, SIGKILL `W` later but never after [`KILL_MARGIN`] before the last
//!   deadline seen.
//! - **Signals keep their grace, within the deadline.** A forwarded signal
//!   gives the command `grace`, never past the current deadline; a second
//!   one means SIGKILL at once.
//! - **A stop is never undone**: a renewal that lands after SIGTERM moves
//!   no SIGKILL later.
//!
//! With the defaults (TTL 30 s, grace 10 s) a renewal is due 10 s after the
//! last; without one SIGTERM goes at 15 s and SIGKILL at 19.95 s, and no
//! contender may take over before 30 s.
//!
//! Internal (feature `internals`, not for users): compiled for the command
//! and the simulation only.

use crate::lease::{Lease, LeaseStatus};
use crate::mutant::{self, Mutant};
use std::time::{Duration, Instant};

/// How long before the write deadline SIGKILL is sent, so that the command
/// is dead by the deadline.
pub const KILL_MARGIN: Duration = Duration::from_millis(50);

/// The earlier of two optional instants; `None` only when both are.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Why the command was told to stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// A signal to this process.
    Signal(i32),
    /// The lease was lost or fenced, or about to be, as said.
    Lease(String),
}

/// The lease as the supervising loop sees it at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Held, writable until this deadline.
    Held(Instant),
    /// Fenced: no renewal landed by the deadline.
    Fenced,
    /// Lost, as said.
    Lost(String),
}

/// When to send SIGTERM and SIGKILL: the rules of the [module docs](self)
/// on instants given to it, without I/O.
#[derive(Debug)]
pub struct Plan {
    grace: Duration,
    /// How long before the write deadline SIGTERM goes when renewals fail.
    term_window: Duration,
    stop: Option<Stop>,
    /// The SIGKILL instant fixed by the reasons so far (a signal's grace, a
    /// loss, a fence); only ever moved earlier.
    kill_by: Option<Instant>,
    /// The write deadline now; `None` once fenced or lost.
    deadline: Option<Instant>,
    /// The last write deadline seen.
    last_deadline: Option<Instant>,
    /// The TTL, for the mutant that kills at the full TTL.
    #[cfg(feature = "mutants")]
    ttl: Duration,
}

impl Plan {
    /// The plan for a command given `grace` after SIGTERM, under a lease
    /// whose TTL is `ttl`.
    pub fn new(grace: Duration, ttl: Duration) -> Plan {
        Plan {
            grace,
            term_window: grace.min(ttl / 6),
            stop: None,
            kill_by: None,
            deadline: None,
            last_deadline: None,
            #[cfg(feature = "mutants")]
            ttl,
        }
    }

    /// [`KILL_MARGIN`] before `deadline`; with the mutant `kill-at-full-ttl`,
    /// before the full TTL instead.
    fn kill_before(&self, deadline: Instant, now: Instant) -> Instant {
        #[cfg(feature = "mutants")]
        if mutant::on(Mutant::KillAtFullTtl) {
            return kill_before(deadline + self.ttl / 3, now);
        }
        kill_before(deadline, now)
    }

    /// The lease at `now`. True when SIGTERM must go now.
    pub fn observe(&mut self, now: Instant, seen: Seen) -> bool {
        match seen {
            Seen::Held(deadline) => {
                self.deadline = Some(deadline);
                self.last_deadline = Some(deadline);
                if self.stop.is_some() || now < self.term_at(deadline, now) {
                    return false;
                }
                let why = format!(
                    "no renewal has landed and the lease's write deadline is {:.1} s away",
                    deadline.saturating_duration_since(now).as_secs_f64()
                );
                self.begin(Stop::Lease(why), Some(self.kill_before(deadline, now)))
            }
            Seen::Fenced => {
                self.deadline = None;
                let why = "the lease was fenced: no renewal landed in time".to_string();
                let kill_by = match self.last_deadline {
                    Some(d) if mutant::on(Mutant::KillAtFullTtl) => self.kill_before(d, now),
                    _ => now,
                };
                self.begin(Stop::Lease(why), Some(kill_by))
            }
            Seen::Lost(why) => {
                self.deadline = None;
                let by_deadline = self.last_deadline.map(|d| self.kill_before(d, now));
                self.begin(
                    Stop::Lease(why),
                    earliest(now.checked_add(self.term_window), by_deadline),
                )
            }
        }
    }

    /// Signal `sig` reached us at `now`. True when SIGTERM must go now.
    pub fn signal(&mut self, now: Instant, sig: i32) -> bool {
        if self.stop.is_some() {
            // A second reason from the user: no more waiting.
            self.kill_by = Some(now);
            return false;
        }
        self.begin(Stop::Signal(sig), now.checked_add(self.grace))
    }

    fn begin(&mut self, why: Stop, kill_by: Option<Instant>) -> bool {
        self.kill_by = earliest(self.kill_by, kill_by);
        if self.stop.is_some() {
            return false;
        }
        self.stop = Some(why);
        true
    }

    /// When SIGTERM goes if no renewal lands: `term_window` (at least the
    /// kill margin) before `deadline`.
    fn term_at(&self, deadline: Instant, now: Instant) -> Instant {
        deadline
            .checked_sub(self.term_window.max(KILL_MARGIN))
            .unwrap_or(now)
    }

    /// When SIGKILL goes: the earliest of the fixed instant and, while the
    /// lease is held, just before its current write deadline. `None` while
    /// the command is not being stopped.
    pub fn kill_at(&self, now: Instant) -> Option<Instant> {
        self.stop.as_ref()?;
        earliest(
            self.kill_by,
            self.deadline.map(|d| self.kill_before(d, now)),
        )
    }

    /// Whether SIGKILL is due at `now`.
    pub fn kill_due(&self, now: Instant) -> bool {
        self.kill_at(now).is_some_and(|at| now >= at)
    }

    /// The next instant at which something may be due.
    pub fn next_wake(&self, now: Instant) -> Option<Instant> {
        match self.stop {
            Some(_) => self.kill_at(now),
            None => self.deadline.map(|d| self.term_at(d, now)),
        }
    }
}

/// [`KILL_MARGIN`] before `deadline` (`now` if that is not an instant).
fn kill_before(deadline: Instant, now: Instant) -> Instant {
    deadline.checked_sub(KILL_MARGIN).unwrap_or(now)
}

impl Plan {
    /// Why the command is being stopped, once it is. Never undone.
    pub fn stop(&self) -> Option<&Stop> {
        self.stop.as_ref()
    }
}

impl Seen {
    /// `lease` as its status says now, whatever the events said.
    pub fn of(lease: &Lease) -> Seen {
        match lease.fence_status() {
            LeaseStatus::Held { deadline } => Seen::Held(deadline),
            LeaseStatus::Lost { holder } => Seen::Lost(match holder {
                Some(h) => format!("the lease was lost to instance {h}"),
                None => "the lease was lost".to_string(),
            }),
            LeaseStatus::Fenced | LeaseStatus::Released => Seen::Fenced,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);
    const SIGHUP: i32 = 1;
    const SIGINT: i32 = 2;
    const SIGTERM: i32 = 15;

    /// TTL 30 s, grace 10 s: SIGTERM 5 s before the deadline.
    fn plan() -> Plan {
        Plan::new(10 * S, 30 * S)
    }

    #[test]
    fn failing_renewals_get_sigterm_a_window_before_the_deadline_and_sigkill_before_it() {
        let t0 = Instant::now();
        let deadline = t0 + 20 * S;
        let mut p = plan();
        assert!(!p.observe(t0, Seen::Held(deadline)));
        assert_eq!(p.next_wake(t0), Some(t0 + 15 * S), "wakes for the SIGTERM");
        let just_before = t0 + 15 * S - MS;
        assert!(!p.observe(just_before, Seen::Held(deadline)));
        assert!(!p.kill_due(just_before));
        let term = t0 + 15 * S;
        assert!(p.observe(term, Seen::Held(deadline)), "SIGTERM");
        assert!(matches!(p.stop, Some(Stop::Lease(_))));
        assert!(!p.observe(term, Seen::Held(deadline)), "SIGTERM once");
        assert_eq!(p.kill_at(term), Some(deadline - KILL_MARGIN));
        assert_eq!(p.next_wake(term), Some(deadline - KILL_MARGIN));
        assert!(!p.kill_due(deadline - KILL_MARGIN - MS));
        assert!(p.kill_due(deadline - KILL_MARGIN), "dead by the deadline");
    }

    #[test]
    fn a_renewal_that_lands_after_the_sigterm_does_not_undo_the_stop() {
        let t0 = Instant::now();
        let mut p = plan();
        let deadline = t0 + 20 * S;
        assert!(p.observe(t0 + 16 * S, Seen::Held(deadline)));
        // Renewed: the deadline moves on, the stop and its SIGKILL do not.
        assert!(!p.observe(t0 + 17 * S, Seen::Held(t0 + 37 * S)));
        assert!(p.stop.is_some());
        assert!(p.kill_due(deadline - KILL_MARGIN));
    }

    #[test]
    fn a_fenced_lease_gets_sigkill_at_once() {
        let t0 = Instant::now();
        let mut p = plan();
        assert!(!p.observe(t0, Seen::Held(t0 + 20 * S)));
        assert!(p.observe(t0 + S, Seen::Fenced), "SIGTERM");
        assert!(p.kill_due(t0 + S), "and SIGKILL at once");
        // Fenced while stopping for a signal: SIGKILL at once too.
        let mut p = plan();
        assert!(p.signal(t0, SIGTERM));
        assert!(!p.kill_due(t0 + S));
        assert!(!p.observe(t0 + S, Seen::Fenced));
        assert!(p.kill_due(t0 + S));
    }

    #[test]
    fn a_lost_lease_gets_the_window_but_never_past_the_last_deadline() {
        let t0 = Instant::now();
        let mut p = plan();
        assert!(!p.observe(t0, Seen::Held(t0 + 20 * S)));
        assert!(
            p.observe(t0 + S, Seen::Lost("lost".into())),
            "SIGTERM at once"
        );
        assert!(!p.kill_due(t0 + 6 * S - MS));
        assert!(p.kill_due(t0 + 6 * S), "the 5 s window");
        // Lost 2 s before the deadline: SIGKILL just before it.
        let mut p = plan();
        assert!(!p.observe(t0, Seen::Held(t0 + 20 * S)));
        assert!(p.observe(t0 + 18 * S, Seen::Lost("lost".into())));
        assert_eq!(p.kill_at(t0 + 18 * S), Some(t0 + 20 * S - KILL_MARGIN));
        // Seen again on the next turn: the SIGKILL does not move later.
        assert!(!p.observe(t0 + 19 * S, Seen::Lost("lost".into())));
        assert_eq!(p.kill_at(t0 + 19 * S), Some(t0 + 20 * S - KILL_MARGIN));
    }

    #[test]
    fn a_signal_keeps_the_grace_but_never_past_the_current_deadline() {
        let t0 = Instant::now();
        // Renewals landing: the full grace.
        let mut p = plan();
        assert!(p.signal(t0, SIGINT));
        for i in 0..10 {
            assert!(!p.observe(t0 + i * S, Seen::Held(t0 + (i + 18) * S)));
        }
        assert!(!p.kill_due(t0 + 10 * S - MS));
        assert!(p.kill_due(t0 + 10 * S));
        // Renewals failing: just before the deadline.
        let mut p = plan();
        assert!(!p.observe(t0, Seen::Held(t0 + 8 * S)));
        assert!(p.signal(t0, SIGINT));
        assert_eq!(p.kill_at(t0), Some(t0 + 8 * S - KILL_MARGIN));
        // A second signal: SIGKILL at once.
        assert!(!p.signal(t0 + S, SIGINT));
        assert!(p.kill_due(t0 + S));
    }

    #[test]
    fn a_short_grace_or_ttl_keeps_the_order_of_sigterm_and_sigkill() {
        let t0 = Instant::now();
        // TTL 3 s, grace 10 s: SIGTERM 0.5 s before the deadline.
        let mut p = Plan::new(10 * S, 3 * S);
        let deadline = t0 + 2 * S;
        assert!(!p.observe(t0 + 1499 * MS, Seen::Held(deadline)));
        assert!(p.observe(t0 + 1500 * MS, Seen::Held(deadline)));
        assert_eq!(p.kill_at(t0 + 1500 * MS), Some(deadline - KILL_MARGIN));
        // Grace 0: SIGTERM and SIGKILL together, before the deadline.
        let mut p = Plan::new(Duration::ZERO, 30 * S);
        assert!(p.observe(deadline - KILL_MARGIN, Seen::Held(deadline)));
        assert!(p.kill_due(deadline - KILL_MARGIN));
        // A signal with the longest grace there is.
        let mut p = Plan::new(Duration::MAX, 30 * S);
        assert!(p.signal(t0, SIGHUP));
        assert!(!p.kill_due(t0 + 1000 * S));
    }
}
