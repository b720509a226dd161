//! `bench --interval`: renewals at the cadence a holder lives at, in an
//! open loop, one [`Sample`] per renewal.
//!
//! What it promises:
//!
//! - **Open loop.** Each of the `--leases` leases is renewed at fixed
//!   instants, `taken + k × interval` for k = 1, 2, … while that stays
//!   within `--duration`, where `taken` is when its own acquire wrote its
//!   record (so a lease taken before the others is not fenced while they
//!   are taken), each on a thread of its own.
//!   A renewal that runs past the next instant delays the next one, and
//!   that one's latency still counts from its own instant (wrk2's
//!   correction for coordinated omission): a slow service shows as slow,
//!   not as fewer requests.
//! - **As a keeper renews.** Before each renewal the store is asked to
//!   [warm up](bucket_lease::Store::warm_up) with the keeper's lead, then
//!   the renewal is `Lease::renew_before` with the lease's write deadline;
//!   a renewal that fails is tried again after a pause until it lands or
//!   the deadline passes, when the lease has fenced itself: its later
//!   renewals are not sent, as a keeper's would not be. A lease found
//!   taken over is renewed no more either.
//! - **What each renewal met** (its `Sample`): the requests it sent and on
//!   which connection, from the HTTP store's traces
//!   (`bucket_lease::backends::trace`); a store without HTTP gives
//!   `Connection::Unknown`, `200` for a renewal that landed and `412` for
//!   one refused.
//! - **Bounded.** Every wait ends at a stop (SIGINT, SIGTERM, or the
//!   command's `--timeout`), and every request by the lease's write
//!   deadline; the leases are released by the caller.

pub mod command;
pub mod compare;
pub mod plot;
pub mod report;
pub mod sample;

use bucket_lease::backends::trace::{self, ConnectionUse, Outcome, RequestTrace};
use bucket_lease::clock::{jittered, transient_backoff};
use bucket_lease::keeper::{warm_up_guarded, warm_up_lead};
use bucket_lease::{Lease, LeaseError};
use sample::{Answer, Connection, OffsetBounds, Sample};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How the open loop runs.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Between two renewals of a lease.
    pub interval: Duration,
    /// How long renewals are scheduled for.
    pub duration: Duration,
}

impl Plan {
    /// How many renewals each lease is due.
    pub fn renewals(&self) -> u64 {
        let ratio = self.duration.as_secs_f64() / self.interval.as_secs_f64();
        // A whole number of renewals that fit; the float is small and exact
        // enough (both durations are at most days, in milliseconds).
        (ratio + 1e-9).floor() as u64
    }
}

/// Told once, by another thread, that the loop must end: every wait of
/// the loop ends at once.
#[derive(Debug, Default)]
pub struct Stop {
    stopped: Mutex<bool>,
    told: Condvar,
}

impl Stop {
    /// End the loop.
    pub fn stop(&self) {
        *self.stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.told.notify_all();
    }

    /// Wait until `at`; false when told to stop first (or before).
    fn wait_until(&self, at: Instant) -> bool {
        let mut stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if *stopped {
                return false;
            }
            let left = at.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            stopped = self
                .told
                .wait_timeout(stopped, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// Renew every lease of `leases` by `plan`, each from its own acquire,
/// until done or told to `stop`; the samples of every lease, in the order
/// they were due, their instants counted from `start`.
pub fn run(leases: &[Arc<Lease>], plan: Plan, start: Instant, stop: &Stop) -> Vec<Sample> {
    let mut samples: Vec<Sample> = std::thread::scope(|scope| {
        let handles: Vec<_> = leases
            .iter()
            .enumerate()
            .map(|(i, lease)| {
                let index = u32::try_from(i).unwrap_or(u32::MAX);
                std::thread::Builder::new()
                    .name(format!("bench-lease-{i}"))
                    .spawn_scoped(scope, move || renew_one(lease, index, plan, start, stop))
                    .expect("a thread per lease")
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    samples.sort_by(|a, b| {
        a.scheduled_s
            .total_cmp(&b.scheduled_s)
            .then(a.lease.cmp(&b.lease))
    });
    samples
}

/// The open loop of one lease.
fn renew_one(lease: &Lease, index: u32, plan: Plan, start: Instant, stop: &Stop) -> Vec<Sample> {
    let lead = warm_up_lead(plan.interval);
    let taken = lease.confirmed_at();
    let mut samples = Vec::new();
    for seq in 1..=plan.renewals() {
        let Some(due) = u32::try_from(seq)
            .ok()
            .and_then(|k| taken.checked_add(plan.interval * k))
        else {
            break;
        };
        if let Some(at) = due.checked_sub(lead).filter(|at| *at > Instant::now()) {
            if !stop.wait_until(at) {
                break;
            }
            warm_up_guarded(lease, due);
        }
        if !stop.wait_until(due) {
            break;
        }
        let sample = renew_at(lease, index, seq - 1, due, start, stop);
        let over = sample.fenced();
        samples.push(sample);
        if over {
            break;
        }
    }
    samples
}

/// One renewal due at `due`, tried until it lands or its deadline passes.
fn renew_at(
    lease: &Lease,
    index: u32,
    seq: u64,
    due: Instant,
    start: Instant,
    stop: &Stop,
) -> Sample {
    let since_due = |at: Instant| at.saturating_duration_since(due).as_secs_f64() * 1000.0;
    let began = Instant::now();
    let deadline = lease.write_deadline();
    let mut sample = Sample {
        lease: index,
        seq,
        scheduled_s: due.saturating_duration_since(start).as_secs_f64(),
        latency_ms: None,
        start_ms: since_due(began),
        answer: Answer::NotSent,
        requests: 0,
        connection: Connection::Unknown,
        budget_ms: deadline.map_or(0.0, since_due),
        offset: None,
    };
    let Some(deadline) = deadline else {
        return sample;
    };
    let mut failures = 0;
    loop {
        let (renewed, traces) = trace::collect(|| lease.renew_before(Some(deadline)));
        let ended = Instant::now();
        note(&mut sample, &traces);
        let attempts = u32::try_from(traces.len()).unwrap_or(u32::MAX).max(1);
        sample.requests = sample.requests.saturating_add(attempts);
        match renewed {
            Ok(()) => {
                if traces.is_empty() {
                    sample.answer = Answer::Status(200);
                }
                sample.latency_ms = Some(since_due(ended));
                return sample;
            }
            Err(e) => {
                if traces.is_empty() {
                    sample.answer = answer_of(&e);
                }
                if matches!(e.cause(), LeaseError::Lost { .. }) {
                    return sample;
                }
            }
        }
        failures += 1;
        let pause = jittered(transient_backoff(failures));
        if Instant::now() + pause >= deadline || !stop.wait_until(Instant::now() + pause) {
            return sample;
        }
    }
}

/// Take what `traces` say into `sample`: the first request's connection,
/// the last one's answer, and the clock offsets their `Date`s allow.
fn note(sample: &mut Sample, traces: &[RequestTrace]) {
    if sample.connection == Connection::Unknown {
        if let Some(first) = traces.first() {
            sample.connection = match first.connection {
                ConnectionUse::Kept => Connection::Kept,
                ConnectionUse::New { connect, tls } => Connection::New {
                    connect_ms: connect.as_secs_f64() * 1000.0,
                    tls_ms: tls.map(|t| t.as_secs_f64() * 1000.0),
                },
            };
        }
    }
    if let Some(last) = traces.last() {
        sample.answer = match last.outcome {
            Outcome::Status(code) => Answer::Status(code),
            Outcome::Timeout => Answer::Timeout,
            Outcome::NotSent => Answer::NotSent,
            Outcome::Failed => Answer::Failed,
        };
    }
    for t in traces {
        let Some(date) = t.date else { continue };
        let bounds = OffsetBounds {
            low_ms: millis_between(t.ended_wall, date),
            high_ms: millis_between(t.started_wall, date) + 1000.0,
        };
        sample.offset = Some(match sample.offset {
            None => bounds,
            Some(o) => OffsetBounds {
                low_ms: o.low_ms.max(bounds.low_ms),
                high_ms: o.high_ms.min(bounds.high_ms),
            },
        });
    }
}

/// `to − from` in milliseconds, negative when `to` is earlier.
fn millis_between(from: SystemTime, to: SystemTime) -> f64 {
    match to.duration_since(from) {
        Ok(d) => d.as_secs_f64() * 1000.0,
        Err(e) => -e.duration().as_secs_f64() * 1000.0,
    }
}

/// The answer of a renewal on a store without HTTP, from its error.
fn answer_of(error: &LeaseError) -> Answer {
    match error.cause() {
        LeaseError::Lost { .. } => Answer::Status(412),
        _ => match error.store_error() {
            Some(e) if e.is_timeout() => Answer::Timeout,
            Some(e) if e.delivery() == bucket_lease::store::Delivery::NotSent => Answer::NotSent,
            _ => Answer::Failed,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucket_lease::memory::MemoryStore;
    use bucket_lease::{LeaseOptions, Store};

    /// Seconds from `start` to when `s` was due: its lease's acquire plus
    /// 100 ms per renewal.
    fn due_of(taken: &[Instant], s: &Sample, start: Instant) -> f64 {
        let taken = taken[s.lease as usize];
        let due = taken + Duration::from_millis(100) * (s.seq as u32 + 1);
        due.saturating_duration_since(start).as_secs_f64()
    }

    #[test]
    fn renewals_fit_the_duration() {
        let plan = |i, d| Plan {
            interval: Duration::from_millis(i),
            duration: Duration::from_millis(d),
        };
        assert_eq!(plan(1000, 10_000).renewals(), 10);
        assert_eq!(plan(300, 1000).renewals(), 3);
        assert_eq!(plan(1000, 999).renewals(), 0);
        assert_eq!(plan(100, 300).renewals(), 3);
    }

    /// Every lease renewed at each instant, each sample due where the plan
    /// says, landed, with its budget; a stop ends the loop early.
    #[test]
    fn each_lease_is_renewed_at_each_instant() {
        let store = Arc::new(MemoryStore::new());
        let leases: Vec<_> = (0..2)
            .map(|i| {
                Arc::new(
                    Lease::acquire(store.clone(), &format!("p/{i}"), LeaseOptions::new(3)).unwrap(),
                )
            })
            .collect();
        let plan = Plan {
            interval: Duration::from_millis(100),
            duration: Duration::from_millis(300),
        };
        let start = Instant::now();
        let taken: Vec<_> = leases.iter().map(|l| l.confirmed_at()).collect();
        let samples = run(&leases, plan, start, &Stop::default());
        assert_eq!(samples.len(), 6, "{samples:?}");
        for (n, s) in samples.iter().enumerate() {
            assert_eq!(s.seq, (n / 2) as u64);
            assert!(
                (s.scheduled_s - due_of(&taken, s, start)).abs() < 1e-6,
                "{s:?}"
            );
            assert_eq!(s.answer, Answer::Status(200));
            assert!(
                !s.fenced() && s.latency_ms.is_some() && s.budget_ms > 1000.0,
                "{s:?}"
            );
        }
        let stop = Stop::default();
        stop.stop();
        assert!(run(&leases, plan, Instant::now(), &stop).is_empty());
    }

    /// A lease taken over shows the refusal, and is renewed no more.
    #[test]
    fn a_lease_lost_ends_its_loop() {
        let store = Arc::new(MemoryStore::new());
        let lease = Arc::new(Lease::acquire(store.clone(), "p", LeaseOptions::new(3)).unwrap());
        store
            .delete(
                "p/LEASE",
                &bucket_lease::store::DeleteMode::Unconditional,
                None,
            )
            .unwrap();
        let plan = Plan {
            interval: Duration::from_millis(50),
            duration: Duration::from_millis(200),
        };
        let samples = run(&[lease], plan, Instant::now(), &Stop::default());
        assert_eq!(samples.len(), 1, "{samples:?}");
        assert_eq!(samples[0].answer, Answer::Status(412));
        assert!(samples[0].fenced());
    }
}
