//! The renewal thread: one named OS thread per held lease.
//!
//! A [`Keeper`] owns a [`Lease`] and renews it every third of its TTL until
//! it is stopped, dropped, lost or fenced. Its decisions are a machine
//! without I/O, `RenewalSchedule` (internal); the loop around it (wait,
//! warm up, renew, record, end, release) is written once, the keeper
//! driver (`keeper/driver.rs`, internal), which the thread runs with real
//! waits and the simulation runs on simulated time. What it promises:
//!
//! - **The application never waits on I/O to ask.** [`Keeper::may_write`](crate::KeptLease::may_write)
//!   and [`Keeper::write_deadline`](crate::KeptLease::write_deadline) read the lease's state under a mutex held
//!   only for arithmetic; they are answered from any thread at any time.
//! - **A hung request cannot outlive the fence.** Each renewal is abandoned
//!   at the write deadline; a failed renewal is retried after a growing,
//!   jittered pause, but never scheduled past the deadline. The moment the
//!   deadline passes without a renewal (a renewal that times out exactly
//!   at it included) the keeper reports [`Event::Fenced`] and stops
//!   renewing: the lease may already belong to someone else. Every path
//!   out of the renewal loop reports either [`Event::Fenced`] or
//!   [`Event::Lost`] first.
//! - **Every change is an event** on a `crossbeam-channel` receiver:
//!   [`Event::Renewed`] with the request's latency, [`Event::RenewalFailed`]
//!   with the error and whether another try is scheduled, [`Event::Fenced`],
//!   [`Event::Lost`] naming the new holder when known, and
//!   [`Event::Released`]. The channel is unbounded: a renewal adds at most one
//!   event a renewal interval, so an application that never reads it does
//!   not block the keeper.
//! - **Running totals can be asked for at any time.** [`Keeper::stats`](crate::KeptLease::stats)
//!   returns a snapshot ([`crate::stats`]): renewals by outcome and
//!   duration, retries, losses, the time left to the fence; answered
//!   without I/O, as `may_write` is.
//! - **A panic is a loss, never silence.** A panic inside the renewal path
//!   marks the lease lost and is reported as [`Event::Lost`] with the panic's
//!   message; the thread then waits to be stopped, and still tries to free
//!   its record then. A panic in that release is reported as
//!   [`Event::Released`] with an error, and `stop` returns it.
//! - **A lost lease never stops as "released".** [`Keeper::stop`](crate::KeptLease::stop) after the
//!   lease was fenced or lost returns that ([`LeaseError::Fenced`],
//!   [`LeaseError::Lost`]), whatever its release did, so `keeper.stop()?`
//!   fails for a job that did not hold the lease to its end.
//! - **`may_write()` turns false before the event.** The lease's state says
//!   fenced or lost (so [`Keeper::may_write`](crate::KeptLease::may_write) is false on every thread)
//!   before [`Event::Fenced`] or [`Event::Lost`] is sent.
//! - **No thread outlives its handle.** [`Keeper::stop`](crate::KeptLease::stop) and dropping the
//!   keeper both release the lease and join the thread. A renewal already
//!   in flight is finished first (it is bounded by the write deadline); the
//!   release is bounded by the release timeout.
//! - **A loss can be heard without a channel.** A callback given with
//!   [`KeeperOptions::on_loss`] is called exactly once per keeper, on the
//!   renewal thread, when the lease ends other than by a release that
//!   freed it: fenced ([`Loss::Fenced`]), lost ([`Loss::Lost`]), or
//!   stopped or dropped with a release that failed or found the record
//!   another's ([`Loss::NotReleased`], [`Loss::Lost`]). It is never called
//!   after a clean release. The fence never waits on it: the callback runs
//!   only once the renewal loop has ended, after the lease's state says
//!   fenced or lost (so [`Keeper::may_write`](crate::KeptLease::may_write) is already false on every
//!   thread) and after the event is on the channel. A callback that blocks
//!   delays only the release at [`Keeper::stop`](crate::KeptLease::stop) (which waits for it); one
//!   that panics is logged, and the release still happens.

use crate::clock::{doubling_pause, Clock};
use crate::error::LeaseError;
use crate::kept::{stop_answer, KeptLease};
use crate::lease::{Lease, LeaseStatus, Released};
use crate::mutant::{self, Mutant};
use crate::stats::{LossReason, RenewalOutcome};
use crossbeam_channel::{select, Receiver, Sender, TryRecvError};
use std::any::Any;
use std::fmt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

internal! {
pub mod driver;
}

use driver::Runtime;

/// How long the keeper gives the release request when it stops, unless told
/// otherwise.
pub const DEFAULT_RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// The first pause after a failed renewal; each further failure doubles it,
/// up to a renewal interval.
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(200);

/// What happened to a kept lease.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A renewal landed; the write deadline moved on.
    Renewed {
        /// How long the renewal took, from just before the request was sent
        /// to its answer.
        latency: Duration,
    },
    /// A renewal failed without losing the lease.
    RenewalFailed {
        /// What went wrong.
        error: LeaseError,
        /// Whether another try is scheduled before the write deadline.
        retrying: bool,
    },
    /// The write deadline passed without a renewal: writes must stop, and
    /// the keeper renews no more.
    Fenced,
    /// The lease is lost for good.
    Lost {
        /// Who holds it now (its instance id), when known.
        holder: Option<String>,
        /// The new holder's name for people, when its record carries one.
        holder_name: Option<String>,
        /// Why: the renewal's error, or the message of a panic in it.
        reason: String,
    },
    /// The keeper was stopped and gave the lease up.
    Released(Result<Released, LeaseError>),
}

/// Why a kept lease ended without a clean release, as a loss callback
/// ([`KeeperOptions::on_loss`]) is told.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Loss {
    /// The write deadline passed without a renewal ([`Event::Fenced`]).
    Fenced,
    /// The record was replaced or removed, a write proved another writer,
    /// or the renewal panicked ([`Event::Lost`]); or, at stop, the release
    /// found the record another holder's.
    Lost {
        /// Who holds it now (its instance id), when known.
        holder: Option<String>,
        /// The new holder's name for people, when its record carries one.
        holder_name: Option<String>,
        /// Why.
        reason: String,
    },
    /// The keeper was stopped or dropped while it held the lease, and the
    /// release failed: the record keeps the prefix taken until its TTL
    /// runs out.
    NotReleased(LeaseError),
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loss::Fenced => f.write_str("fenced: no renewal landed before the write deadline"),
            Loss::Lost {
                holder: Some(holder),
                holder_name: Some(name),
                reason,
            } => write!(f, "lost to instance {holder} ({name}): {reason}"),
            Loss::Lost {
                holder: Some(holder),
                reason,
                ..
            } => write!(f, "lost to instance {holder}: {reason}"),
            Loss::Lost {
                holder: None,
                reason,
                ..
            } => write!(f, "lost: {reason}"),
            Loss::NotReleased(e) => write!(f, "stopped without releasing: {e}"),
        }
    }
}

impl Loss {
    /// What a release at the end of a kept lease's life (a keeper's stop,
    /// a pool's remove or stop) says of a lease that had not ended before
    /// it: a failed release is [`Loss::NotReleased`], a record found
    /// another's (a holder named or not: taken over, or taken over and
    /// freed, or broken, since the last renewal) is [`Loss::Lost`], a
    /// release that freed the record or found it free is none. The one
    /// rule the keeper's and the pool's drivers tell their loss callbacks
    /// by.
    pub(crate) fn of_release(released: &Result<Released, LeaseError>) -> Option<Loss> {
        match released {
            Err(e) => Some(Loss::NotReleased(e.clone())),
            Ok(Released::LeftAlone {
                holder,
                holder_name,
            }) => Some(Loss::Lost {
                holder: holder.clone(),
                holder_name: holder_name.clone(),
                reason: "the release found the record another holder's".to_string(),
            }),
            Ok(_) => None,
        }
    }
}

/// A loss callback, shared by clones of one [`KeeperOptions`].
type OnLoss = Arc<dyn Fn(&Loss) + Send + Sync>;

/// How a [`Keeper`] runs.
#[derive(Clone)]
pub struct KeeperOptions {
    release_timeout: Duration,
    thread_name: String,
    on_loss: Option<OnLoss>,
}

impl fmt::Debug for KeeperOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeeperOptions")
            .field("release_timeout", &self.release_timeout)
            .field("thread_name", &self.thread_name)
            .field("on_loss", &self.on_loss.as_ref().map(|_| "Fn(&Loss)"))
            .finish()
    }
}

impl KeeperOptions {
    /// Release within [`DEFAULT_RELEASE_TIMEOUT`], on a thread named
    /// `bucket-lease`.
    pub fn new() -> Self {
        KeeperOptions {
            release_timeout: DEFAULT_RELEASE_TIMEOUT,
            thread_name: "bucket-lease".to_string(),
            on_loss: None,
        }
    }

    /// Give the release at stop at most `timeout`.
    /// On a store with a write interval
    /// ([`Store::write_interval`](crate::store::Store::write_interval)),
    /// the interval is added: a release right after a renewal waits its
    /// turn.
    pub fn release_timeout(mut self, timeout: Duration) -> Self {
        self.release_timeout = timeout;
        self
    }

    /// Name the renewal thread `name` (as `top -H` shows it; Linux keeps 15
    /// bytes).
    pub fn thread_name(mut self, name: impl Into<String>) -> Self {
        self.thread_name = name.into();
        self
    }

    /// Call `callback` once, on the renewal thread, when the lease ends
    /// without a clean release: fenced, lost, or stopped with a release
    /// that failed (see [`Loss`] and the [module docs](self)). For code
    /// that cannot poll [`Keeper::events`]. It runs after the lease's
    /// state already forbids writing and after the event is sent, so it
    /// cannot hold up the fence; keep it short all the same, since
    /// [`Keeper::stop`](crate::KeptLease::stop) waits for it before releasing. Each keeper spawned
    /// with these options (or a clone) calls it at most once. A second
    /// call of `on_loss` replaces the first callback.
    pub fn on_loss(mut self, callback: impl Fn(&Loss) + Send + Sync + 'static) -> Self {
        self.on_loss = Some(Arc::new(callback));
        self
    }

    /// The callback, for a wrapper that adds its own before it.
    pub(crate) fn take_on_loss(&mut self) -> Option<OnLoss> {
        self.on_loss.take()
    }
}

impl Default for KeeperOptions {
    fn default() -> Self {
        Self::new()
    }
}

/// A held lease and the thread that renews it. See the [module docs](self).
#[must_use = "a keeper dropped at once releases its lease at once"]
#[derive(Debug)]
pub struct Keeper {
    kept: Arc<Lease>,
    events: Receiver<Event>,
    stop_signal: Option<Sender<()>>,
    thread: Option<JoinHandle<Ended>>,
}

internal! {
/// How a kept lease ended ([`driver::keep`]): the loss it reported, if
/// any, and its release.
pub type Ended = (Option<LeaseError>, Result<Released, LeaseError>);
}

impl Keeper {
    /// Start renewing `lease` on its own thread.
    ///
    /// # Errors
    ///
    /// When the operating system cannot start a thread; the lease is then
    /// released before the error is returned.
    pub fn spawn(lease: Lease, mut options: KeeperOptions) -> std::io::Result<Keeper> {
        let lease = Arc::new(lease);
        let (events_tx, events) = crossbeam_channel::unbounded();
        let (stop, stop_rx) = crossbeam_channel::bounded(1);
        let mut runtime = ThreadRuntime {
            clock: Arc::clone(lease.clock()),
            events: events_tx,
            stop: stop_rx,
        };
        let kept = Arc::clone(&lease);
        let name = std::mem::take(&mut options.thread_name);
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || driver::keep(&kept, options, &mut runtime));
        match thread {
            Ok(thread) => Ok(Keeper {
                kept: lease,
                events,
                stop_signal: Some(stop),
                thread: Some(thread),
            }),
            Err(e) => {
                let _ = lease.release();
                Err(e)
            }
        }
    }

    /// The keeper's events. Clones of the receiver share one queue.
    pub fn events(&self) -> &Receiver<Event> {
        &self.events
    }

    /// Stop as [`stop`](KeptLease::stop) does, and return what the release
    /// itself did, whatever happened before it: for a program that already
    /// knows the lease ended (from an event or the loss callback) and asks
    /// whether its record was freed.
    ///
    /// # Errors
    ///
    /// The release's error, when its request failed (the record then
    /// expires after its TTL); [`LeaseError::Lost`] when the renewal thread
    /// died without releasing.
    pub fn stop_with_release(mut self) -> Result<Released, LeaseError> {
        self.shut_down().1
    }

    /// Stop the thread; the stop's answer ([`stop_answer`], kept on the
    /// lease) and what the release did.
    fn shut_down(&mut self) -> (Result<Released, LeaseError>, Result<Released, LeaseError>) {
        drop(self.stop_signal.take());
        let (loss, released) = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(ended)) => ended,
            // The thread died outside the guarded renewal: nothing released.
            _ => {
                let lost = LeaseError::Lost {
                    key: self.kept.key().to_string(),
                    holder: self.kept.lost_to(),
                };
                (Some(lost.clone()), Err(lost))
            }
        };
        (stop_answer(&self.kept, loss, &released), released)
    }
}

/// What the keeper answers: the lease it renews on its thread. Its
/// [`stop`](KeptLease::stop) stops renewing, releases the lease and joins
/// the thread; [`LeaseError::Lost`] too when the renewal thread died
/// without releasing.
impl KeptLease for Keeper {
    fn lease(&self) -> &Arc<Lease> {
        &self.kept
    }

    fn stop(mut self) -> Result<Released, LeaseError> {
        self.shut_down().0
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.shut_down();
        }
    }
}

/// The renewal thread's side: the [`driver`] on real waits, a stop
/// channel (a message, or the handle gone) and the events' channel.
struct ThreadRuntime {
    clock: Arc<dyn Clock>,
    events: Sender<Event>,
    stop: Receiver<()>,
}

impl Runtime for ThreadRuntime {
    fn now(&self) -> Instant {
        self.clock.now()
    }

    fn wait(&mut self, until: Option<Instant>) -> bool {
        // A stop already asked wins over an instant already come (which
        // `select!` would pick between at random): nothing more begins.
        if !matches!(self.stop.try_recv(), Err(TryRecvError::Empty)) {
            return false;
        }
        let timer = match until {
            Some(at) => self.clock.timer(at),
            None => crossbeam_channel::never(),
        };
        select! {
            recv(self.stop) -> _ => false,
            recv(timer) -> _ => true,
        }
    }

    fn report(&mut self, event: Event) {
        // The handle may be gone; its drop stops us next.
        let _ = self.events.send(event);
    }
}

internal! {
/// How one renewal attempt ended, as [`RenewalSchedule::record`] takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The renewal landed after `latency`.
    Renewed(Duration),
    /// The renewal failed without losing the lease.
    Failed(LeaseError),
    /// The lease is lost; `reason` says why.
    Lost {
        /// Who holds it now, when known.
        holder: Option<String>,
        /// Why: the renewal's error, or the message of a panic in it.
        reason: String,
    },
}
}

internal! {
/// What the renewal loop does next, as [`RenewalSchedule::step`] decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing is due before `until`: the next renewal, or the write
    /// deadline when that comes first.
    Wait {
        /// When to ask again.
        until: Instant,
    },
    /// Renew now, every request bounded by `deadline` (the write deadline).
    Renew {
        /// The write deadline.
        deadline: Instant,
    },
    /// The lease is over for this holder: report this event
    /// ([`Event::Fenced`] or [`Event::Lost`]) and renew no more.
    End(Event),
}
}

internal! {
/// The renewal loop's decisions, without I/O or threads: when to renew,
/// when to retry, and when the lease is over.
///
/// Every step starts from [`Lease::status`], so each answer is one of three
/// and none is "wait for nothing": wait until a definite instant (the next
/// renewal, never past the write deadline), renew now, or end with the
/// event that says why. A renewal that fails at or after the deadline is
/// followed at once by [`Step::End`]. The keeper driver
/// ([`driver::keep`]) drives this machine, on the [`Keeper`]'s thread with
/// real waits and in the simulation on simulated time; a [`KeeperPool`]'s
/// machine keeps one per lease.
///
/// [`KeeperPool`]: crate::KeeperPool
#[derive(Debug)]
pub struct RenewalSchedule {
    next: Instant,
    failures: u32,
    /// Why a renewal found the lease lost, for the next step's event.
    /// Boxed, a thin pointer: a pool keeps a schedule per lease, and this
    /// is seldom set.
    #[allow(
        clippy::box_collection,
        reason = "a thin pointer: 8 bytes in every schedule, not 16"
    )]
    lost_reason: Option<Box<String>>,
}
}

impl RenewalSchedule {
    /// The schedule of `lease`: the first renewal a third of a TTL after its
    /// last confirmed write.
    pub fn new(lease: &Lease) -> Self {
        RenewalSchedule {
            next: lease.confirmed_at() + lease.renew_interval(),
            failures: 0,
            lost_reason: None,
        }
    }

    /// What to do now, by the lease's status and clock.
    pub fn step(&mut self, lease: &Lease) -> Step {
        let deadline = match lease.fence_status() {
            LeaseStatus::Held { deadline } => deadline,
            LeaseStatus::Lost { holder } => {
                let reason = self.lost_reason.take().map_or_else(
                    || "a refused write marked it lost".to_string(),
                    |reason| *reason,
                );
                let holder_name = lease.lost_to_name();
                return Step::End(Event::Lost {
                    holder,
                    holder_name,
                    reason,
                });
            }
            LeaseStatus::Fenced if mutant::on(Mutant::KeeperNeverFences) => {
                return Step::Wait {
                    until: lease.clock().now() + Duration::from_secs(1 << 30),
                }
            }
            LeaseStatus::Fenced => {
                // Reported and renewed no more: fenced for good.
                lease.fence_for_good();
                return Step::End(Event::Fenced);
            }
            LeaseStatus::Released => return Step::End(Event::Fenced),
        };
        if lease.clock().now() < self.next {
            Step::Wait {
                until: self.next.min(deadline),
            }
        } else {
            Step::Renew { deadline }
        }
    }

    /// Take the outcome of the renewal the last [`Step::Renew`] asked for,
    /// and say what to report: [`Event::Renewed`] or
    /// [`Event::RenewalFailed`]; `None` for a loss, which the next step
    /// reports as [`Step::End`].
    pub fn record(&mut self, lease: &Lease, attempt: Attempt) -> Option<Event> {
        match attempt {
            Attempt::Renewed(latency) => {
                self.failures = 0;
                self.next = lease.confirmed_at() + lease.renew_interval();
                Some(Event::Renewed { latency })
            }
            Attempt::Lost { reason, .. } => {
                lease.mark_lost(None);
                self.lost_reason = Some(Box::new(reason));
                None
            }
            Attempt::Failed(error) => {
                self.failures = self.failures.saturating_add(1);
                let pause = lease.clock().jitter(doubling_pause(
                    FIRST_RETRY_PAUSE,
                    self.failures,
                    lease.renew_interval(),
                ));
                self.next = lease.clock().now() + pause;
                let retrying = lease.fence_deadline().is_some_and(|d| self.next < d);
                if retrying {
                    log::warn!(
                        "{}: renewal failed, retrying in {pause:?}: {error}",
                        lease.key()
                    );
                } else {
                    log::warn!(
                        "{}: renewal failed, no time left before the fence: {error}",
                        lease.key()
                    );
                }
                Some(Event::RenewalFailed { error, retrying })
            }
        }
    }
}

/// How long before a renewal a keeper asks the store to
/// [warm up](crate::Store::warm_up): long enough for a TCP and a TLS
/// handshake over a long path, short against the idle time after which
/// services close connections (5 s and up), and never more than a quarter
/// of the renewal interval.
pub const WARM_UP_LEAD: Duration = Duration::from_secs(1);

/// The lead for a renewal every `interval`: see [`WARM_UP_LEAD`].
pub fn warm_up_lead(interval: Duration) -> Duration {
    WARM_UP_LEAD.min(interval / 4)
}

/// [`Store::warm_up`](crate::Store::warm_up) for `lease`'s next renewal
/// due at `due`; a panic in it is logged, never passed on (the renewal
/// itself decides the lease's fate).
pub fn warm_up_guarded(lease: &Lease, due: Instant) {
    warm_up_guarded_with(lease, due, &|_| false);
}

/// A panic a guard caught: passed on when `passes` says it is a runtime's
/// own unwind ([`Runtime::passes_through`]), else handed back.
type Passes<'a> = &'a dyn Fn(&(dyn Any + Send)) -> bool;

/// Run `f`, catching a panic, but passing on an unwind `passes` names.
fn guarded<T>(f: impl FnOnce() -> T, passes: Passes<'_>) -> Result<T, Box<dyn Any + Send>> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        if passes(&*panic) {
            resume_unwind(panic);
        }
        panic
    })
}

/// [`warm_up_guarded`], passing on an unwind `passes` names.
fn warm_up_guarded_with(lease: &Lease, due: Instant, passes: Passes<'_>) {
    let warmed = guarded(|| lease.store().warm_up(lease.key(), due), passes);
    if let Err(panic) = warmed {
        log::warn!(
            "{}: warming the store up for the renewal panicked: {}",
            lease.key(),
            panic_message(&*panic)
        );
    }
}

/// One renewal of `lease` bounded by `deadline`, a panic in it turned into
/// a loss.
pub(crate) fn renew_guarded(lease: &Lease, deadline: Instant) -> Attempt {
    renew_guarded_with(lease, deadline, &|_| false)
}

/// [`renew_guarded`], passing on an unwind `passes` names (uncounted: it
/// is no outcome of the renewal).
fn renew_guarded_with(lease: &Lease, deadline: Instant, passes: Passes<'_>) -> Attempt {
    let started = lease.clock().now();
    let renewed = guarded(|| lease.renew_before(Some(deadline)), passes);
    let took = lease.clock().now().saturating_duration_since(started);
    if renewed.is_err() {
        // A panic never reached the renewal's own count.
        lease.recorder().renewal(RenewalOutcome::Failed, took);
    }
    match renewed {
        Ok(Ok(())) => Attempt::Renewed(took),
        Ok(Err(LeaseError::Lost { holder, .. })) => Attempt::Lost {
            holder,
            reason: "the record was replaced or deleted".to_string(),
        },
        Ok(Err(error)) => Attempt::Failed(error),
        Err(panic) => {
            let message = panic_message(&*panic);
            log::error!("{}: the renewal panicked: {message}", lease.key());
            Attempt::Lost {
                holder: None,
                reason: format!("the renewal panicked: {message}"),
            }
        }
    }
}

/// Release `lease` within `timeout`, a panic in it turned into an error;
/// on a store with a write interval, within that much more, as the release
/// may wait for its turn after a renewal.
pub(crate) fn release_guarded(lease: &Lease, timeout: Duration) -> Result<Released, LeaseError> {
    release_guarded_with(lease, release_deadline(lease, timeout), &|_| false)
}

/// The deadline of a release of `lease` given `timeout` from now: on a
/// store with a write interval, that much more (the release may wait for
/// its turn after a renewal).
fn release_deadline(lease: &Lease, timeout: Duration) -> Option<Instant> {
    // Saturating: a timeout past what an instant can hold is no bound
    // (`None`), not a panic outside the release's guard.
    let timeout = timeout.saturating_add(lease.store().write_interval().unwrap_or_default());
    lease.clock().now().checked_add(timeout)
}

/// [`release_guarded`] by `deadline`, passing on an unwind `passes` names.
fn release_guarded_with(
    lease: &Lease,
    deadline: Option<Instant>,
    passes: Passes<'_>,
) -> Result<Released, LeaseError> {
    let released = guarded(|| lease.release_before(deadline), passes).unwrap_or_else(|panic| {
        log::error!(
            "{}: the release panicked: {}",
            lease.key(),
            panic_message(&*panic)
        );
        Err(LeaseError::Lost {
            key: lease.key().to_string(),
            holder: lease.lost_to(),
        })
    });
    lease.recorder().released(&released);
    released
}

/// Count the end a keeper or pool reports for `lease` ([`Event::Fenced`]
/// or [`Event::Lost`]) in its totals.
pub(crate) fn note_end(lease: &Lease, event: &Event) {
    match (event, lease.fence_status()) {
        // Released by hand (the schedule ends it as fenced): no loss.
        (_, LeaseStatus::Released) => lease.recorder().observe(false),
        (Event::Fenced, _) => lease.recorder().ended(LossReason::Fenced),
        (Event::Lost { .. }, _) => lease.recorder().ended(LossReason::Lost),
        _ => {}
    }
}

/// The message a panic carried, as far as it can be read.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}
