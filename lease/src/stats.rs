//! Running totals of a kept lease, and the Prometheus text that shows them.
//!
//! Every [`Lease`] counts what its keeper ([`Keeper`](crate::Keeper) or
//! [`KeeperPool`](crate::KeeperPool)) did with it: each renewal attempt by
//! outcome and duration, the retries, and how the lease ended.
//! [`Lease::stats`] (and [`Keeper::stats`](crate::KeptLease::stats),
//! [`PooledLease::stats`](crate::KeptLease::stats),
//! [`KeeperPool::stats`](crate::KeeperPool::stats)) returns a plain
//! snapshot, [`LeaseStats`]. What it promises:
//!
//! - **Asking never waits on I/O.** A snapshot reads counters and the
//!   lease's state under mutexes held only for arithmetic, like
//!   [`Lease::may_write`]; the renewal thread holds the counters' mutex
//!   only to add to them.
//! - **Every renewal attempt is counted once**, the keeper's and the
//!   program's own ([`Lease::renew`]) alike, by outcome
//!   ([`RenewalOutcome`]): `ok`, `refused` (the service refused
//!   the condition: the record moved), `timed_out` (no answer by the
//!   write deadline or the store's timeout), `failed` (anything else, a
//!   panic included). Its duration, from just before the first request to
//!   the outcome, goes into [`LatencyHistogram`] whatever the outcome, so
//!   a slow failure shows. An attempt that follows a failed one is a
//!   retry. A renewal that sends nothing is no attempt: one refused because
//!   another is in progress ([`LeaseError::RenewalInProgress`]), or asked
//!   of a lease no longer held.
//! - **A lease ends once.** The first of fenced, lost, or released-with-a-
//!   failure (or finding the record another's) is the loss counted in
//!   [`LossCounts`]; a clean release, by the keeper or by hand, is no
//!   loss.
//! - **Transitions only go up.** [`LeaseStats::transitions`] counts the
//!   changes of "held" seen: 1 from the acquire, one more each time the
//!   lease is seen no longer held (fenced, lost, released) or held again (a
//!   renewal whose answer came after the write deadline holds it again).
//!   It is seen at each renewal, each end, and each snapshot.
//! - **The text format is Prometheus's** (version 0.0.4, as node_exporter's
//!   textfile collector and every scraper read it): [`prometheus_text`]
//!   writes each metric family once, with `# HELP` and `# TYPE`, its
//!   series labelled `key` (the lease object's key, escaped as the format
//!   says). Several snapshots of one key (a program that took the lease
//!   again after a loss) are one series: the counters summed, the gauges
//!   from the newest. The names:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `bucket_lease_held` | gauge, 0 or 1 | `key` |
//! | `bucket_lease_epoch` | gauge | `key` |
//! | `bucket_lease_held_since_seconds` | gauge, Unix time of the acquire | `key` |
//! | `bucket_lease_seconds_to_fence` | gauge, 0 when not held | `key` |
//! | `bucket_lease_fence_timestamp_seconds` | gauge, Unix time of the write deadline, 0 when not held | `key` |
//! | `bucket_lease_renewals_total` | counter | `key`, `outcome` |
//! | `bucket_lease_renewal_retries_total` | counter | `key` |
//! | `bucket_lease_renewal_duration_seconds` | histogram | `key` |
//! | `bucket_lease_last_renewal_duration_seconds` | gauge | `key` |
//! | `bucket_lease_losses_total` | counter | `key`, `reason` |
//! | `bucket_lease_transitions_total` | counter | `key` |
//!
//! ```
//! # extern crate bucket_lease_core as bucket_lease;
//! use bucket_lease::{memory::MemoryStore, Keeper, KeeperOptions, KeptLease, Lease, LeaseOptions};
//! use std::sync::Arc;
//!
//! let store = Arc::new(MemoryStore::new());
//! let lease = Lease::acquire(store, "jobs/nightly", LeaseOptions::new(30))?;
//! let keeper = Keeper::spawn(lease, KeeperOptions::new())?;
//! let stats = keeper.stats();
//! assert!(stats.is_held());
//! assert!(stats.prometheus().contains("bucket_lease_held{key=\"jobs/nightly/LEASE\"} 1\n"));
//! keeper.stop()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::error::LeaseError;
use crate::lease::{Lease, LeaseStatus, Released};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// The upper bounds, in seconds, of the renewal duration histogram's
/// buckets (Prometheus's default buckets); one more bucket, `+Inf`, takes
/// the rest.
pub const LATENCY_BUCKETS_S: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// How one renewal attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RenewalOutcome {
    /// The renewal landed.
    Ok,
    /// The service refused its condition: the record moved (replaced,
    /// deleted, or a write of ours it refused).
    Refused,
    /// No answer came by the deadline or the store's timeout.
    TimedOut,
    /// Anything else: a transport or service error, a panic.
    Failed,
}

impl RenewalOutcome {
    /// Every outcome, in the order the text format lists them.
    pub const ALL: [RenewalOutcome; 4] = [
        RenewalOutcome::Ok,
        RenewalOutcome::Refused,
        RenewalOutcome::TimedOut,
        RenewalOutcome::Failed,
    ];

    /// The `outcome` label: `ok`, `refused`, `timed_out` or `failed`.
    pub fn name(self) -> &'static str {
        match self {
            RenewalOutcome::Ok => "ok",
            RenewalOutcome::Refused => "refused",
            RenewalOutcome::TimedOut => "timed_out",
            RenewalOutcome::Failed => "failed",
        }
    }

    /// The outcome of a renewal that returned `result`.
    pub(crate) fn of(result: &Result<(), LeaseError>) -> RenewalOutcome {
        let Err(error) = result else {
            return RenewalOutcome::Ok;
        };
        match error {
            LeaseError::Lost { .. } | LeaseError::OwnWriteRefused { .. } => RenewalOutcome::Refused,
            other => match other.store_error() {
                Some(e) if e.is_refusal() => RenewalOutcome::Refused,
                Some(e) if e.is_timeout() => RenewalOutcome::TimedOut,
                _ => RenewalOutcome::Failed,
            },
        }
    }
}

/// Why a kept lease ended, as [`LossCounts`] counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// The write deadline passed without a renewal.
    Fenced,
    /// Another holder took the record, a write proved another writer, a
    /// renewal panicked, or the release found the record another's.
    Lost,
    /// The lease was stopped while held and its release failed: the record
    /// keeps the prefix until its TTL runs out.
    NotReleased,
}

impl LossReason {
    /// Every reason, in the order the text format lists them.
    pub const ALL: [LossReason; 3] = [
        LossReason::Fenced,
        LossReason::Lost,
        LossReason::NotReleased,
    ];

    /// The `reason` label: `fenced`, `lost` or `not_released`.
    pub fn name(self) -> &'static str {
        match self {
            LossReason::Fenced => "fenced",
            LossReason::Lost => "lost",
            LossReason::NotReleased => "not_released",
        }
    }
}

/// Renewal attempts by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenewalCounts {
    /// Landed.
    pub ok: u64,
    /// Refused by the service.
    pub refused: u64,
    /// Timed out.
    pub timed_out: u64,
    /// Failed otherwise.
    pub failed: u64,
}

impl RenewalCounts {
    /// The count of `outcome`.
    pub fn get(&self, outcome: RenewalOutcome) -> u64 {
        match outcome {
            RenewalOutcome::Ok => self.ok,
            RenewalOutcome::Refused => self.refused,
            RenewalOutcome::TimedOut => self.timed_out,
            RenewalOutcome::Failed => self.failed,
        }
    }

    /// Every attempt.
    pub fn total(&self) -> u64 {
        self.ok + self.refused + self.timed_out + self.failed
    }

    fn slot(&mut self, outcome: RenewalOutcome) -> &mut u64 {
        match outcome {
            RenewalOutcome::Ok => &mut self.ok,
            RenewalOutcome::Refused => &mut self.refused,
            RenewalOutcome::TimedOut => &mut self.timed_out,
            RenewalOutcome::Failed => &mut self.failed,
        }
    }

    fn add(&mut self, other: &RenewalCounts) {
        for outcome in RenewalOutcome::ALL {
            *self.slot(outcome) += other.get(outcome);
        }
    }
}

/// Ends of a lease by reason (at most one per [`Lease`] value).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LossCounts {
    /// Fenced.
    pub fenced: u64,
    /// Lost to another holder, or a panic.
    pub lost: u64,
    /// Stopped while held, and not released.
    pub not_released: u64,
}

impl LossCounts {
    /// The count of `reason`.
    pub fn get(&self, reason: LossReason) -> u64 {
        match reason {
            LossReason::Fenced => self.fenced,
            LossReason::Lost => self.lost,
            LossReason::NotReleased => self.not_released,
        }
    }

    /// Every loss.
    pub fn total(&self) -> u64 {
        self.fenced + self.lost + self.not_released
    }

    fn slot(&mut self, reason: LossReason) -> &mut u64 {
        match reason {
            LossReason::Fenced => &mut self.fenced,
            LossReason::Lost => &mut self.lost,
            LossReason::NotReleased => &mut self.not_released,
        }
    }

    fn add(&mut self, other: &LossCounts) {
        for reason in LossReason::ALL {
            *self.slot(reason) += other.get(reason);
        }
    }
}

/// Renewal durations in fixed buckets ([`LATENCY_BUCKETS_S`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LatencyHistogram {
    /// Attempts per bucket, not cumulative; the last is `+Inf`.
    counts: [u64; LATENCY_BUCKETS_S.len() + 1],
    sum: Duration,
}

/// The bucket of [`LATENCY_BUCKETS_S`] a renewal that took `duration`
/// falls in (the last, `+Inf`, past every bound).
fn bucket_of(duration: Duration) -> usize {
    let seconds = duration.as_secs_f64();
    LATENCY_BUCKETS_S
        .iter()
        .position(|&le| seconds <= le)
        .unwrap_or(LATENCY_BUCKETS_S.len())
}

impl LatencyHistogram {
    fn add(&mut self, other: &LatencyHistogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts) {
            *mine += theirs;
        }
        self.sum = self.sum.saturating_add(other.sum);
    }

    /// Each bucket's upper bound in seconds (`f64::INFINITY` last) with
    /// the number of attempts at or under it (cumulative, as Prometheus
    /// counts).
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        let bounds = LATENCY_BUCKETS_S.iter().copied().chain([f64::INFINITY]);
        let mut total = 0;
        bounds
            .zip(self.counts)
            .map(|(le, n)| {
                total += n;
                (le, total)
            })
            .collect()
    }

    /// How many attempts were timed.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Their durations added up. A lease's own totals stop growing at
    /// 2^64 ns (584 years of renewal time), which no lease reaches.
    pub fn sum(&self) -> Duration {
        self.sum
    }
}

/// A snapshot of one lease's totals and state. See the [module docs](self).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LeaseStats {
    /// The lease object's key (`{prefix}/LEASE`).
    pub key: String,
    /// Where the lease stood when the snapshot was taken.
    pub status: LeaseStatus,
    /// The epoch this holder took.
    pub epoch: u64,
    /// When, by this process's wall clock, the acquiring write was sent.
    pub held_since: SystemTime,
    /// Renewal attempts by outcome.
    pub renewals: RenewalCounts,
    /// Attempts that followed a failed one.
    pub retries: u64,
    /// How the lease ended, if it did.
    pub losses: LossCounts,
    /// The last attempt's duration, whatever its outcome.
    pub last_renewal: Option<Duration>,
    /// Every attempt's duration.
    pub latency: LatencyHistogram,
    /// How long writes may go on yet: to the write deadline, `None` when
    /// not held.
    pub to_fence: Option<Duration>,
    /// The write deadline by this process's wall clock, `None` when not
    /// held: what a reader of a snapshot written to a file compares with
    /// its own clock, however old the file.
    pub fence_at: Option<SystemTime>,
    /// Changes of "held" seen: 1 from the acquire, one more at each
    /// change after it.
    pub transitions: u64,
}

impl LeaseStats {
    /// Whether the lease was held (writes allowed) at the snapshot.
    pub fn is_held(&self) -> bool {
        matches!(self.status, LeaseStatus::Held { .. })
    }

    /// The state's name: `held`, `fenced`, `lost` or `released`.
    pub fn state_name(&self) -> &'static str {
        match self.status {
            LeaseStatus::Held { .. } => "held",
            LeaseStatus::Fenced => "fenced",
            LeaseStatus::Lost { .. } => "lost",
            LeaseStatus::Released => "released",
        }
    }

    /// This snapshot in the Prometheus text format; see [`prometheus_text`].
    pub fn prometheus(&self) -> String {
        prometheus_text([self])
    }
}

/// What a lease counts, under its own mutex.
#[derive(Debug)]
pub(crate) struct Recorder {
    held_since: SystemTime,
    counts: Mutex<Counts>,
}

/// What a lease counted so far. Kept small, as a pool keeps one per lease:
/// 32-bit counters, saturating (a lease renewed every second would take
/// 136 years to fill one), widened to [`LeaseStats`]' 64 bits in a
/// snapshot.
#[derive(Debug)]
struct Counts {
    /// Whether the lease was held when last looked at.
    held: bool,
    last_failed: bool,
    /// Why the lease ended, once it did: a lease ends once.
    loss: Option<LossReason>,
    /// What the first stop of a kept lease answered, for any later one
    /// ([`crate::kept`]). Boxed: set once at the end, 8 bytes until then.
    answer: Option<Box<Result<Released, LeaseError>>>,
    transitions: u32,
    /// Attempts by outcome, in [`RenewalOutcome::ALL`]'s order.
    renewals: [u32; RenewalOutcome::ALL.len()],
    retries: u32,
    /// The last attempt's duration in nanoseconds, [`NO_RENEWAL`] before
    /// the first: 8 bytes where an `Option<Duration>` takes 16.
    last_renewal_ns: u64,
    /// Attempts per bucket of [`LATENCY_BUCKETS_S`], not cumulative; the
    /// last is `+Inf`.
    latency: [u32; LATENCY_BUCKETS_S.len() + 1],
    /// Their durations added up, in nanoseconds: 8 bytes where a
    /// `Duration` takes 16. Saturates at 2^64 ns (584 years of renewals).
    latency_sum_ns: u64,
}

/// [`Counts::last_renewal_ns`] before the first renewal attempt.
const NO_RENEWAL: u64 = u64::MAX;

/// `duration` in nanoseconds, saturating at 2^64 ns (584 years).
fn nanos_of(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl Recorder {
    /// Totals for a lease whose acquiring write was sent at `held_since`.
    pub(crate) fn new(held_since: SystemTime) -> Self {
        Recorder {
            held_since,
            counts: Mutex::new(Counts {
                held: true,
                last_failed: false,
                loss: None,
                answer: None,
                transitions: 1,
                renewals: [0; RenewalOutcome::ALL.len()],
                retries: 0,
                last_renewal_ns: NO_RENEWAL,
                latency: [0; LATENCY_BUCKETS_S.len() + 1],
                latency_sum_ns: 0,
            }),
        }
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One renewal attempt that took `duration`.
    pub(crate) fn renewal(&self, outcome: RenewalOutcome, duration: Duration) {
        let mut c = self.counts();
        let slot = RenewalOutcome::ALL
            .iter()
            .position(|o| *o == outcome)
            .unwrap_or_default();
        c.renewals[slot] = c.renewals[slot].saturating_add(1);
        if c.last_failed {
            c.retries = c.retries.saturating_add(1);
        }
        c.last_failed = outcome != RenewalOutcome::Ok;
        c.last_renewal_ns = nanos_of(duration).min(NO_RENEWAL - 1);
        let bucket = bucket_of(duration);
        c.latency[bucket] = c.latency[bucket].saturating_add(1);
        let nanos = nanos_of(duration);
        c.latency_sum_ns = c.latency_sum_ns.saturating_add(nanos);
    }

    /// Whether the lease is held now: a change from what was last looked
    /// at is a transition.
    pub(crate) fn observe(&self, held: bool) {
        let mut c = self.counts();
        if c.held != held {
            c.held = held;
            c.transitions = c.transitions.saturating_add(1);
        }
    }

    /// The lease ended for `reason`, unless it ended already.
    pub(crate) fn ended(&self, reason: LossReason) {
        self.observe(false);
        let mut c = self.counts();
        if c.loss.is_none() {
            c.loss = Some(reason);
        }
    }

    /// What ended the lease's keeping answers, once (the first answer
    /// stays): what a later stop of a handle answers by.
    pub(crate) fn settle(&self, answer: &Result<Released, LeaseError>) {
        let mut c = self.counts();
        if c.answer.is_none() {
            c.answer = Some(Box::new(answer.clone()));
        }
    }

    /// The answer [`settle`](Self::settle) kept, if any.
    pub(crate) fn settled(&self) -> Option<Result<Released, LeaseError>> {
        self.counts().answer.as_deref().cloned()
    }

    /// What a keeper's release returned: a failure, or a record found
    /// another's, ends the lease (unless it ended already).
    pub(crate) fn released(&self, released: &Result<Released, LeaseError>) {
        self.observe(false);
        match released {
            Err(_) => self.ended(LossReason::NotReleased),
            // Another's record, a holder named or not (taken over and
            // freed since, broken): lost, as `Loss::of_release` says.
            Ok(Released::LeftAlone { .. }) => self.ended(LossReason::Lost),
            Ok(_) => {}
        }
    }
}

impl Lease {
    /// A snapshot of this lease's totals and state; see [`crate::stats`].
    pub fn stats(&self) -> LeaseStats {
        let status = self.status();
        let to_fence = match status {
            LeaseStatus::Held { deadline } => {
                Some(deadline.saturating_duration_since(self.clock().now()))
            }
            _ => None,
        };
        let recorder = self.recorder();
        recorder.observe(to_fence.is_some());
        let c = recorder.counts();
        let mut renewals = RenewalCounts::default();
        for (outcome, n) in RenewalOutcome::ALL.into_iter().zip(c.renewals) {
            *renewals.slot(outcome) = u64::from(n);
        }
        let mut losses = LossCounts::default();
        if let Some(reason) = c.loss {
            *losses.slot(reason) = 1;
        }
        LeaseStats {
            key: self.key().to_string(),
            transitions: u64::from(c.transitions),
            status,
            epoch: self.epoch(),
            held_since: recorder.held_since,
            renewals,
            retries: u64::from(c.retries),
            losses,
            last_renewal: (c.last_renewal_ns != NO_RENEWAL)
                .then(|| Duration::from_nanos(c.last_renewal_ns)),
            latency: LatencyHistogram {
                counts: c.latency.map(u64::from),
                sum: Duration::from_nanos(c.latency_sum_ns),
            },
            fence_at: to_fence.and_then(|left| self.clock().wall().checked_add(left)),
            to_fence,
        }
    }
}

/// The Prometheus text (format 0.0.4) of `stats`: each family once, a
/// series per key. Snapshots of one key are merged: counters and the
/// histogram summed, gauges from the held one, else the latest acquired.
pub fn prometheus_text<'a>(stats: impl IntoIterator<Item = &'a LeaseStats>) -> String {
    let merged = merge_by_key(stats);
    let mut text = String::new();
    header(&mut text, "bucket_lease_held", "gauge", HELD_HELP);
    for s in &merged {
        series(
            &mut text,
            "bucket_lease_held",
            &s.key,
            &[],
            gauge(s.is_held() as u64),
        );
    }
    header(
        &mut text,
        "bucket_lease_epoch",
        "gauge",
        "The epoch this process took the lease at.",
    );
    for s in &merged {
        series(&mut text, "bucket_lease_epoch", &s.key, &[], gauge(s.epoch));
    }
    header(
        &mut text,
        "bucket_lease_held_since_seconds",
        "gauge",
        "When this process took the lease, in seconds since the Unix epoch.",
    );
    for s in &merged {
        let since = unix_seconds(s.held_since);
        series(
            &mut text,
            "bucket_lease_held_since_seconds",
            &s.key,
            &[],
            number(since),
        );
    }
    header(
        &mut text,
        "bucket_lease_seconds_to_fence",
        "gauge",
        TO_FENCE_HELP,
    );
    for s in &merged {
        let left = s.to_fence.map_or(0.0, |d| d.as_secs_f64());
        series(
            &mut text,
            "bucket_lease_seconds_to_fence",
            &s.key,
            &[],
            number(left),
        );
    }
    header(&mut text, "bucket_lease_fence_timestamp_seconds", "gauge", "When this holder must stop writing (the write deadline), in seconds since the Unix epoch; 0 when not held.");
    for s in &merged {
        let at = s.fence_at.map_or(0.0, unix_seconds);
        series(
            &mut text,
            "bucket_lease_fence_timestamp_seconds",
            &s.key,
            &[],
            number(at),
        );
    }
    header(
        &mut text,
        "bucket_lease_renewals_total",
        "counter",
        "Renewal attempts by outcome: ok, refused (the record moved), timed_out, failed.",
    );
    for s in &merged {
        for outcome in RenewalOutcome::ALL {
            let labels = [("outcome", outcome.name())];
            let n = gauge(s.renewals.get(outcome));
            series(&mut text, "bucket_lease_renewals_total", &s.key, &labels, n);
        }
    }
    header(
        &mut text,
        "bucket_lease_renewal_retries_total",
        "counter",
        "Renewal attempts that followed a failed one.",
    );
    for s in &merged {
        series(
            &mut text,
            "bucket_lease_renewal_retries_total",
            &s.key,
            &[],
            gauge(s.retries),
        );
    }
    header(
        &mut text,
        "bucket_lease_renewal_duration_seconds",
        "histogram",
        "How long each renewal attempt took, whatever its outcome.",
    );
    for s in &merged {
        let name = "bucket_lease_renewal_duration_seconds";
        for (le, n) in s.latency.buckets() {
            let le = if le.is_infinite() {
                "+Inf".to_string()
            } else {
                number(le)
            };
            series(
                &mut text,
                &format!("{name}_bucket"),
                &s.key,
                &[("le", &le)],
                gauge(n),
            );
        }
        let sum = number(s.latency.sum().as_secs_f64());
        series(&mut text, &format!("{name}_sum"), &s.key, &[], sum);
        series(
            &mut text,
            &format!("{name}_count"),
            &s.key,
            &[],
            gauge(s.latency.count()),
        );
    }
    header(
        &mut text,
        "bucket_lease_last_renewal_duration_seconds",
        "gauge",
        "How long the last renewal attempt took.",
    );
    for s in merged.iter().filter(|s| s.last_renewal.is_some()) {
        let last = number(s.last_renewal.unwrap_or_default().as_secs_f64());
        series(
            &mut text,
            "bucket_lease_last_renewal_duration_seconds",
            &s.key,
            &[],
            last,
        );
    }
    header(
        &mut text,
        "bucket_lease_losses_total",
        "counter",
        "Ends of the lease other than a clean release: fenced, lost, not_released.",
    );
    for s in &merged {
        for reason in LossReason::ALL {
            let labels = [("reason", reason.name())];
            let n = gauge(s.losses.get(reason));
            series(&mut text, "bucket_lease_losses_total", &s.key, &labels, n);
        }
    }
    header(
        &mut text,
        "bucket_lease_transitions_total",
        "counter",
        "Changes of held: one at each acquire, one each time the lease is seen no longer held or held again.",
    );
    for s in &merged {
        series(
            &mut text,
            "bucket_lease_transitions_total",
            &s.key,
            &[],
            gauge(s.transitions),
        );
    }
    text
}

/// The Prometheus text of a lease this process does not hold on `key`
/// (the lease object's key): while it waits to take it, or before it
/// tried. `bucket_lease_held` and `bucket_lease_seconds_to_fence` are 0;
/// the rest need a lease taken. For a file that must not keep a holder's
/// last word, such as `bucket-lease run --metrics-file` before its
/// acquire.
pub fn prometheus_not_held(key: &str) -> String {
    let mut text = String::new();
    header(&mut text, "bucket_lease_held", "gauge", HELD_HELP);
    series(&mut text, "bucket_lease_held", key, &[], gauge(0));
    header(
        &mut text,
        "bucket_lease_seconds_to_fence",
        "gauge",
        TO_FENCE_HELP,
    );
    series(
        &mut text,
        "bucket_lease_seconds_to_fence",
        key,
        &[],
        gauge(0),
    );
    text
}

const HELD_HELP: &str =
    "Whether this process holds the lease and may write under it (1) or not (0).";
const TO_FENCE_HELP: &str =
    "Seconds left before this holder must stop writing (the write deadline); 0 when not held.";

/// Seconds since the Unix epoch, 0 before it.
fn unix_seconds(at: SystemTime) -> f64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A family's `# HELP` and `# TYPE` lines.
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// One series line: `name{key="…",labels…} value`.
fn series(out: &mut String, name: &str, key: &str, labels: &[(&str, &str)], value: String) {
    let _ = write!(out, "{name}{{key=\"{}\"", escape_label(key));
    for (label, v) in labels {
        let _ = write!(out, ",{label}=\"{}\"", escape_label(v));
    }
    let _ = writeln!(out, "}} {value}");
}

fn gauge(n: u64) -> String {
    n.to_string()
}

/// A float as the format writes it: Rust's shortest round-trip form.
fn number(x: f64) -> String {
    format!("{x}")
}

/// A label value with `\`, `"` and line feeds escaped, as the format says.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// One snapshot per key, in the order keys first appear: counters summed,
/// gauges from the held snapshot, else the one acquired last.
pub(crate) fn merge_by_key<'a>(stats: impl IntoIterator<Item = &'a LeaseStats>) -> Vec<LeaseStats> {
    let mut merged = ByKey::default();
    for s in stats {
        merged.add(s);
    }
    merged.merged
}

/// Snapshots merged one per key as [`merge_by_key`] merges them, one at a
/// time: each found by its key at once, however many keys (a pool folds in
/// each lease that leaves, on its scheduler thread).
#[derive(Debug, Default)]
pub(crate) struct ByKey {
    merged: Vec<LeaseStats>,
    /// Where each key's snapshot is in `merged`.
    at: HashMap<String, usize>,
}

impl ByKey {
    /// Fold `s` into its key's snapshot.
    pub(crate) fn add(&mut self, s: &LeaseStats) {
        let Some(&i) = self.at.get(&s.key) else {
            self.at.insert(s.key.clone(), self.merged.len());
            self.merged.push(s.clone());
            return;
        };
        let into = &mut self.merged[i];
        let newer = s.is_held() || (!into.is_held() && s.held_since >= into.held_since);
        let mut sum = if newer { s.clone() } else { into.clone() };
        let other = if newer { &*into } else { s };
        sum.renewals.add(&other.renewals);
        sum.retries += other.retries;
        sum.losses.add(&other.losses);
        sum.latency.add(&other.latency);
        sum.transitions += other.transitions;
        *into = sum;
    }

    /// One snapshot per key, in the order keys first came.
    pub(crate) fn snapshots(&self) -> &[LeaseStats] {
        &self.merged
    }
}
