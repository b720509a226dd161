//! Keeping a set of prefixes held: the loop every sharded worker writes,
//! written once. A [`HeldSet`] tries to take each prefix of its set, keeps
//! what it took on a [`KeeperPool`], takes a prefix again after losing
//! it, and says which it holds.
//!
//! What it promises:
//!
//! - **It takes its fair share of what is free.** Each prefix not held
//!   is tried once at the start (in an order of its own, so that workers
//!   started together split the set rather than race for the same
//!   prefixes), then again when its retry comes: a prefix another instance
//!   holds a quarter of the TTL later (jittered), so a dead holder's prefix
//!   is taken soon after its record expires; one whose attempt failed
//!   after a pause that doubles with each failure, from
//!   [`HeldSetOptions::retry_pause`] up to the TTL, jittered. It holds at
//!   most its fair share of the set among the live workers ([Balance](#balance)),
//!   and at most [`HeldSetOptions::at_most`].
//! - **It gives up its excess by a release.** When a worker joins (or a
//!   census finds more live workers), each worker above its new share
//!   releases the excess at once: the joiner takes it at its next try,
//!   with no overlap and no wait for a TTL. Only the excess moves; a
//!   stable membership moves nothing. When a worker leaves (its stop
//!   releases its slot and its prefixes) or dies (its slot's and its
//!   prefixes' records expire within its TTL), the others' shares grow and
//!   they take what it held as it comes free.
//! - **It takes a prefix again after a loss.** A lease fenced or lost
//!   leaves the pool by itself ([`crate::pool`]); the set reports it
//!   ([`SetEvent::Lost`]) and tries the prefix again after the first
//!   pause, jittered. It never holds two leases of one prefix.
//! - **Asking never waits on I/O.** [`HeldSet::held`] and
//!   [`HeldSet::get`] read a table under a mutex held only to copy it: a
//!   [`PooledLease`] per prefix held, to ask before each write
//!   ([`PooledLease::may_write`](crate::KeptLease::may_write), [`PooledLease::writer`](crate::KeptLease::writer)). A lease just
//!   lost may still be listed until the set hears of it; its `may_write`
//!   is already false, which is what a writer must ask.
//! - **Everything it does is an event** on [`HeldSet::events`]: a prefix
//!   taken, lost, given up, or whose attempt failed. The channel is
//!   unbounded.
//! - **A prefix can be given up** by its [`HeldPrefix`]'s
//!   [`stop`](KeptLease::stop) (or its pooled lease's): released at once,
//!   so another worker may take it, reported ([`SetEvent::Released`], with
//!   what the stop answered), and tried again by this set as one another
//!   instance holds, a quarter of the TTL later.
//! - **Stopping releases every lease** ([`HeldSet::stop`], or dropping the
//!   set): an attempt in flight finishes first (bounded by
//!   [`HeldSetOptions::attempt_timeout`]), then the pool is stopped.
//!
//! # Balance
//!
//! A set learns its live workers from the bucket alone: each worker keeps
//! a membership lease on a slot of the set's members folder
//! ([`HeldSetOptions::members`]), and counts the live slots every third of
//! a TTL. Its share is the set's size over the live workers, one more for
//! the first ones by slot, so the shares add up to the set and differ by
//! one at most ([`SetEvent::Members`] says each change). Why slots, and
//! what they cost (per worker per TTL: 3 renewals of its own slot and 3
//! counts of W + 2 reads for W workers), is in `held_set/members.rs`.
//!
//! Its attempts run one at a time on a thread of its own, so a slow store
//! delays the set's other attempts, never a renewal (the pool's threads
//! renew).
//!
//! ```
//! # extern crate bucket_lease_core as bucket_lease;
//! use bucket_lease::held_set::{HeldSet, HeldSetOptions};
//! use bucket_lease::memory::MemoryStore;
//! use bucket_lease::{KeptLease, LeaseOptions};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let store = Arc::new(MemoryStore::new());
//! let shards: Vec<String> = (0..4).map(|i| format!("shards/{i}")).collect();
//! let set = HeldSet::spawn(store, shards, HeldSetOptions::new(LeaseOptions::new(30)))?;
//! let taken = set.events().recv_timeout(Duration::from_secs(5)).unwrap();
//! for shard in set.held() {
//!     if shard.may_write() {
//!         shard.writer().put_new(&format!("{}/part-0", shard.prefix()), b"...")?;
//!     }
//! }
//! set.stop();
//! # let _ = taken;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::clock::{doubling_pause, Clock};
use crate::error::LeaseError;
use crate::inspect::{inspect_before, Expiry};
use crate::keeper::{Event, Loss};
use crate::kept::{stop_answer_after_leaving, KeptLease};
use crate::lease::Lease;
use crate::lease::{Contender, LeaseOptions};
use crate::mutant::StoreMutant;
use crate::pool::{KeeperPool, LeaseId, PoolLoss, PoolOptions, PooledLease};
use crate::record::{check_holder_name, lease_key, new_instance_id, prefix_of, InvalidHolderName};
use crate::store::Store;
use crossbeam_channel::{select, Receiver, Sender};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod members;
use members::{default_members_prefix, set_name, Membership};

/// The first pause after a failed attempt, unless told otherwise.
pub const DEFAULT_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// How long one attempt's requests may take, unless told otherwise: a
/// waiter's bound, defined once.
pub use crate::lease::DEFAULT_ATTEMPT_TIMEOUT;

/// How a [`HeldSet`] takes and keeps its prefixes.
#[derive(Debug, Clone)]
pub struct HeldSetOptions {
    lease: LeaseOptions,
    pool: PoolOptions,
    retry_pause: Duration,
    attempt_timeout: Duration,
    at_most: Option<usize>,
    instance_id: Option<String>,
    holder_name: Option<String>,
    members: Option<String>,
}

impl HeldSetOptions {
    /// Leases taken with `lease` (its TTL, its clock), kept by a pool with
    /// [`PoolOptions::new`] on the same clock; pauses from
    /// [`DEFAULT_RETRY_PAUSE`]; attempts bounded by
    /// [`DEFAULT_ATTEMPT_TIMEOUT`]; no cap; one new random instance id for
    /// every prefix.
    pub fn new(lease: LeaseOptions) -> Self {
        let pool = PoolOptions::new().clock(Arc::clone(lease.clock_ref()));
        HeldSetOptions {
            lease,
            pool,
            retry_pause: DEFAULT_RETRY_PAUSE,
            attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
            at_most: None,
            instance_id: None,
            holder_name: None,
            members: None,
        }
    }

    /// Keep the leases on a pool made with `pool` (its clock is set to the
    /// leases' clock).
    pub fn pool(mut self, pool: PoolOptions) -> Self {
        self.pool = pool.clock(Arc::clone(self.lease.clock_ref()));
        self
    }

    /// Pause `pause` (jittered) after a first failed attempt, doubling
    /// with each further failure up to the TTL.
    pub fn retry_pause(mut self, pause: Duration) -> Self {
        self.retry_pause = pause;
        self
    }

    /// Bound each attempt's requests by `timeout`.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// Hold at most `n` prefixes at once, whatever the fair share: an
    /// upper bound on top of it.
    pub fn at_most(mut self, n: usize) -> Self {
        self.at_most = Some(n);
        self
    }

    /// Register this worker's membership under `prefix` (slots
    /// `{prefix}/0`, `{prefix}/1`, …; see [Balance](self#balance)). Every
    /// worker of one set must name the same; by default it is named after
    /// the set, beside its prefixes (`shards/.members-1a2b3c4d`).
    pub fn members(mut self, prefix: impl Into<String>) -> Self {
        self.members = Some(prefix.into());
        self
    }

    /// Take every prefix under the instance id `id` (see
    /// [`Contender::with_instance_id`]).
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// Write `name` as the holder's name for people (see
    /// [`Contender::with_holder_name`]).
    ///
    /// # Errors
    ///
    /// When `name` is not a valid holder name ([`check_holder_name`]).
    pub fn holder_name(mut self, name: impl Into<String>) -> Result<Self, InvalidHolderName> {
        let name = name.into();
        check_holder_name(&name)?;
        self.holder_name = Some(name);
        Ok(self)
    }
}

/// What happened to one prefix of a [`HeldSet`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SetEvent {
    /// The prefix was taken, at this epoch.
    Taken {
        /// The prefix.
        prefix: String,
        /// The epoch taken.
        epoch: u64,
    },
    /// The prefix's lease was fenced or lost; it is tried again after a
    /// pause.
    Lost {
        /// The prefix.
        prefix: String,
        /// How it ended.
        loss: Loss,
    },
    /// The prefix was given up: released as this worker's share fell
    /// below what it held (see [Balance](self#balance)), or by
    /// [`KeptLease::stop`] of its [`HeldPrefix`]; it is tried again as one
    /// another instance holds.
    Released {
        /// The prefix.
        prefix: String,
        /// What the stop answered.
        released: Result<crate::Released, LeaseError>,
    },
    /// A census found `live` workers of the set; this one's share is
    /// `share` prefixes (at most [`HeldSetOptions::at_most`]). Sent when
    /// either changes from the last count (not for the first).
    Members {
        /// The live workers counted, this one included.
        live: usize,
        /// The prefixes this worker holds at most now.
        share: usize,
    },
    /// An attempt to take the prefix failed other than by finding it held;
    /// it is tried again after a pause.
    Failed {
        /// The prefix.
        prefix: String,
        /// Why.
        error: LeaseError,
    },
}

/// A held prefix, as [`HeldSet::held`] lists it: its lease, kept by the
/// set's pool, answers as a keeper does ([`KeptLease`]).
#[derive(Debug, Clone)]
pub struct HeldPrefix {
    pooled: PooledLease,
    /// The set's thread, for [`KeptLease::stop`].
    set: Sender<GiveUp>,
}

impl HeldPrefix {
    /// Its lease as the set's pool keeps it, for its id there.
    pub fn pooled(&self) -> &PooledLease {
        &self.pooled
    }
}

/// What a held prefix answers. Its [`stop`](KeptLease::stop) gives the
/// prefix up: the set stops keeping this lease and releases it (after an
/// attempt in flight, which [`HeldSetOptions::attempt_timeout`] bounds),
/// reports [`SetEvent::Released`], and tries the prefix again as one
/// another instance holds, a quarter of the TTL later (jittered), so
/// another worker may take it at once. A lease the set let go already (a
/// clone stopped first, a loss, the set stopped) answers from how it
/// ended.
impl KeptLease for HeldPrefix {
    fn lease(&self) -> &Arc<Lease> {
        self.pooled.lease()
    }

    fn stop(self) -> Result<crate::Released, LeaseError> {
        let (reply, answer) = crossbeam_channel::bounded(1);
        if self.set.send((self.pooled.clone(), reply)).is_err() {
            // The set stopped: its pool released what it kept.
            return self.pooled.stop();
        }
        // The set stopped before it heard us: the same.
        answer.recv().unwrap_or_else(|_| self.pooled.stop())
    }
}

/// A held prefix's stop, for the set's thread: its lease, and who waits
/// for the answer.
type GiveUp = (PooledLease, Sender<Result<crate::Released, LeaseError>>);

/// Each prefix's release when the set stops: `Ok` when it was held to the
/// end and freed, `Err(Fenced | Lost)` when it had ended, or the release's
/// error.
pub type SetReleases = Vec<(String, Result<crate::Released, LeaseError>)>;

/// A set of prefixes kept held; see the [module docs](self).
pub struct HeldSet {
    table: Arc<Mutex<BTreeMap<String, PooledLease>>>,
    events: Receiver<SetEvent>,
    give_ups: Sender<GiveUp>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<SetReleases>>,
}

impl fmt::Debug for HeldSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldSet")
            .field("held", &self.table().keys().collect::<Vec<_>>())
            .finish()
    }
}

impl HeldSet {
    /// Start keeping `prefixes` held (duplicates count once). Each is named
    /// as its lease key names it, in [`held`](Self::held), the events and
    /// [`KeptLease::prefix`]: `shards/7/` is `shards/7`.
    ///
    /// # Errors
    ///
    /// When a thread cannot be started.
    pub fn spawn(
        store: Arc<dyn Store>,
        prefixes: impl IntoIterator<Item = String>,
        options: HeldSetOptions,
    ) -> std::io::Result<HeldSet> {
        let id = options.instance_id.clone().unwrap_or_else(new_instance_id);
        let mut wanted = BTreeMap::new();
        for prefix in prefixes {
            // Named as its lease key names it: `shards/7/` is `shards/7`.
            let prefix = prefix_of(&lease_key(&prefix)).to_string();
            let contender = contender(&store, &prefix, &options, &id);
            wanted.insert(prefix, contender);
        }
        let members = options.members.clone().unwrap_or_else(|| {
            let names: Vec<String> = wanted.keys().cloned().collect();
            default_members_prefix(&names)
        });
        // The loss callback hears of the set's prefixes, not of its
        // membership lease (whose loss the set handles itself).
        let mut pool_options = options.pool.clone();
        if let Some(callback) = pool_options.on_loss.take() {
            let slots = format!("{members}/");
            pool_options.on_loss = Some(Arc::new(move |loss: &PoolLoss| {
                if !loss.prefix.starts_with(&slots) {
                    callback(loss);
                }
            }));
        }
        let pool = KeeperPool::spawn(pool_options)?;
        let table = Arc::new(Mutex::new(BTreeMap::new()));
        let (events_tx, events) = crossbeam_channel::unbounded();
        let (stop, stop_rx) = crossbeam_channel::bounded(1);
        let (give_ups, give_up_rx) = crossbeam_channel::unbounded();
        let clock = Arc::clone(options.lease.clock_ref());
        // An order of this worker's own: a rotation by a random offset.
        let offset = usize::from(random_u16()) % wanted.len().max(1);
        let mut order: Vec<String> = wanted.keys().cloned().collect();
        order.rotate_left(offset);
        let now = clock.now();
        let keeper = SetKeeper {
            pool,
            clock,
            membership: Membership::new(members, set_name(&order), now),
            store,
            id,
            options,
            table: Arc::clone(&table),
            events: events_tx,
            stop: stop_rx,
            give_ups: give_up_rx,
            prefixes: order
                .into_iter()
                .map(|prefix| {
                    let contender = wanted.remove(&prefix).unwrap_or_else(|| unreachable!());
                    Prefix {
                        prefix,
                        contender,
                        held: None,
                        leaving: None,
                        next_try: now,
                        failures: 0,
                    }
                })
                .collect(),
        };
        let thread = std::thread::Builder::new()
            .name("bucket-lease-set".to_string())
            .spawn(move || keeper.run())?;
        Ok(HeldSet {
            table,
            events,
            give_ups,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The prefixes held now, each with its lease; ask it before each
    /// write. Answered without I/O.
    pub fn held(&self) -> Vec<HeldPrefix> {
        self.table()
            .values()
            .map(|lease| self.held_prefix(lease))
            .collect()
    }

    /// `prefix`'s lease, if it is held now (`shards/7/` is `shards/7`, as
    /// the set names it).
    pub fn get(&self, prefix: &str) -> Option<HeldPrefix> {
        let prefix = prefix_of(&lease_key(prefix)).to_string();
        self.table()
            .get(&prefix)
            .map(|lease| self.held_prefix(lease))
    }

    fn held_prefix(&self, lease: &PooledLease) -> HeldPrefix {
        HeldPrefix {
            pooled: lease.clone(),
            set: self.give_ups.clone(),
        }
    }

    /// What the set did, one event per prefix taken, lost, given up or
    /// failed.
    pub fn events(&self) -> &Receiver<SetEvent> {
        &self.events
    }

    /// Stop taking prefixes, release every lease held, and join the
    /// threads; each prefix's release, as [`KeeperPool::stop`] returns
    /// them.
    pub fn stop(mut self) -> SetReleases {
        self.shut_down()
    }

    fn shut_down(&mut self) -> SetReleases {
        drop(self.stop.take());
        self.thread
            .take()
            .and_then(|thread| thread.join().ok())
            .unwrap_or_default()
    }

    fn table(&self) -> MutexGuard<'_, BTreeMap<String, PooledLease>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for HeldSet {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.shut_down();
        }
    }
}

/// One prefix of the set, as its thread sees it.
struct Prefix {
    prefix: String,
    contender: Contender,
    /// Its lease's id in the pool, while held.
    held: Option<LeaseId>,
    /// Being given up: its writes are stopped, and its lease is released
    /// at this instant, once no write in flight can land any more.
    leaving: Option<(Instant, PooledLease)>,
    /// When to try to take it next, while not held.
    next_try: Instant,
    /// Failed attempts in a row.
    failures: u32,
}

/// The set's thread.
struct SetKeeper {
    pool: KeeperPool,
    clock: Arc<dyn Clock>,
    store: Arc<dyn Store>,
    /// The instance id every lease of this worker is taken under.
    id: String,
    membership: Membership,
    options: HeldSetOptions,
    table: Arc<Mutex<BTreeMap<String, PooledLease>>>,
    events: Sender<SetEvent>,
    stop: Receiver<()>,
    give_ups: Receiver<GiveUp>,
    prefixes: Vec<Prefix>,
}

impl SetKeeper {
    fn run(mut self) -> SetReleases {
        loop {
            self.hear_pool();
            let now = self.clock.now();
            if self.membership.slot.is_none() && self.membership.next_register <= now {
                self.register();
            }
            if self.membership.next_census <= now && !self.stopped() {
                self.census();
            }
            self.give_up_excess();
            self.release_left();
            let now = self.clock.now();
            for i in 0..self.prefixes.len() {
                if self.stopped() {
                    break;
                }
                let p = &self.prefixes[i];
                if p.held.is_none() && p.next_try <= now && self.room() {
                    self.attempt(i);
                }
            }
            if self.stopped() {
                break;
            }
            // A prefix waiting for room is looked at again when a loss or
            // a census makes some.
            let next_try = self
                .prefixes
                .iter()
                .filter(|p| p.held.is_none())
                .map(|p| p.next_try)
                .min()
                .filter(|_| self.room());
            let register = self
                .membership
                .slot
                .is_none()
                .then_some(self.membership.next_register);
            let leaving = self
                .prefixes
                .iter()
                .filter_map(|p| p.leaving.as_ref().map(|(at, _)| *at))
                .min();
            let wake = [
                next_try,
                register,
                leaving,
                Some(self.membership.next_census),
            ]
            .into_iter()
            .flatten()
            .min();
            // Not before a moment from now.
            let timer = match wake {
                Some(at) => self.clock.timer(at.max(self.clock.now())),
                None => crossbeam_channel::never(),
            };
            let pool_events = self.pool.events().clone();
            let give_ups = self.give_ups.clone();
            select! {
                recv(self.stop) -> _ => break,
                recv(give_ups) -> give_up => {
                    if let Ok((lease, reply)) = give_up {
                        let _ = reply.send(self.give_up(lease));
                    }
                }
                recv(pool_events) -> event => {
                    if let Ok(event) = event {
                        self.heard(event);
                    }
                }
                recv(timer) -> _ => {}
            }
        }
        // A held prefix's stop from now on falls back to the pool's answer
        // (one waiting here is let go too): none can wait for this thread
        // while it waits for the pool, whose loss callback may be one.
        drop(std::mem::replace(
            &mut self.give_ups,
            crossbeam_channel::never(),
        ));
        self.table().clear();
        // Each lease's prefix, those being given up included.
        let prefixes: BTreeMap<LeaseId, String> = self
            .prefixes
            .iter()
            .filter_map(|p| Some((p.held?, p.prefix.clone())))
            .collect();
        let slot = self.membership.slot.map(|(_, id)| id);
        self.pool
            .stop()
            .into_iter()
            .filter(|(id, _)| Some(*id) != slot)
            .map(|(id, released)| {
                let prefix = prefixes.get(&id).cloned().unwrap_or_default();
                (prefix, released)
            })
            .collect()
    }

    /// Whether the set was asked to stop (or its handle is gone).
    fn stopped(&self) -> bool {
        !matches!(
            self.stop.try_recv(),
            Err(crossbeam_channel::TryRecvError::Empty)
        )
    }

    /// How many prefixes this worker holds (not counting those it is
    /// giving up).
    fn held(&self) -> usize {
        self.prefixes
            .iter()
            .filter(|p| p.held.is_some() && p.leaving.is_none())
            .count()
    }

    /// The most this worker holds: its fair share by the last census, at
    /// most [`HeldSetOptions::at_most`].
    fn share(&self) -> usize {
        let share = self.membership.share(self.prefixes.len());
        self.options.at_most.map_or(share, |n| share.min(n))
    }

    /// Whether another prefix may be taken.
    fn room(&self) -> bool {
        if StoreMutant::SetTakesAboveShare.on() {
            return self.options.at_most.is_none_or(|n| self.held() < n);
        }
        self.held() < self.share()
    }

    /// Take the lowest free membership slot, if none is held: a lease kept
    /// by the pool as the prefixes' are. On a failure, again after a pause
    /// that doubles as an attempt's does.
    fn register(&mut self) {
        let deadline = self.clock.now().checked_add(self.options.attempt_timeout);
        let ttl = Duration::from_secs(self.options.lease.ttl_s());
        for n in 0..MAX_SLOTS {
            if self.stopped() {
                return;
            }
            let slot = self.membership.slot_prefix(n);
            let set = self.membership.set.clone();
            let mut contender = contender(&self.store, &slot, &self.options, &self.id)
                .with_payload(set)
                .unwrap_or_else(|_| unreachable!("a set's name is a valid payload"));
            let key = lease_key(&slot);
            match unpanicked("PUT", &key, || contender.try_acquire_before(deadline)) {
                Ok(lease) => {
                    let pooled = self.pool.add(lease);
                    self.membership.slot = Some((n, pooled.id()));
                    self.membership.failures = 0;
                    if !self.membership.live.contains(&n) {
                        self.membership.live.push(n);
                        self.membership.live.sort_unstable();
                    }
                    // Counted from now on: a census at once says so to the
                    // others' next one, and this one's share follows.
                    self.membership.next_census = self.clock.now();
                    log::info!("{slot}: registered as a worker of the set");
                    return;
                }
                Err(LeaseError::Held { .. }) => {}
                Err(error) => {
                    log::warn!("{slot}: could not register, trying again: {error}");
                    break;
                }
            }
        }
        self.membership.failures = self.membership.failures.saturating_add(1);
        let pause = doubling_pause(self.options.retry_pause, self.membership.failures, ttl);
        self.membership.next_register = self.clock.now() + self.clock.jitter(pause);
    }

    /// Count the live workers: read the slots from 0 up to the first that
    /// was never taken (see `held_set/members.rs`); a slot is live while its
    /// record is held, fresh and names this set. A read that fails keeps
    /// the last count, and the census comes again after a pause. Reports a
    /// change of count or share.
    fn census(&mut self) {
        let ttl = Duration::from_secs(self.options.lease.ttl_s());
        let deadline = self.clock.now().checked_add(self.options.attempt_timeout);
        let own = self.membership.slot.map(|(n, _)| n);
        let mut live = Vec::new();
        for n in 0..MAX_SLOTS {
            if Some(n) == own {
                live.push(n);
                continue;
            }
            let slot = self.membership.slot_prefix(n);
            let seen = unpanicked("GET", &lease_key(&slot), || {
                inspect_before(&*self.store, &slot, &*self.clock, deadline).map_err(Into::into)
            });
            match seen {
                // Never taken: nor is any slot above it.
                Ok(None) => break,
                Ok(Some(seen))
                    if !seen.is_released() && matches!(seen.expires_in(), Some(Expiry::In(_))) =>
                {
                    let set = seen.record.as_ref().and_then(|r| r.payload.as_deref());
                    if set == Some(self.membership.set.as_str()) {
                        live.push(n);
                    } else {
                        log::warn!(
                            "{slot}: a worker of another set holds this slot; give each set \
                             a members folder of its own (HeldSetOptions::members)"
                        );
                    }
                }
                Ok(Some(_)) => {}
                Err(error) => {
                    log::warn!("{slot}: could not count the set's workers: {error}");
                    let pause = self.clock.jitter(self.options.retry_pause.min(ttl / 3));
                    self.membership.next_census = self.clock.now() + pause;
                    return;
                }
            }
        }
        let first = self.membership.counted.is_none();
        self.membership.live = live;
        self.membership.next_census = self.clock.now() + self.clock.jitter(ttl / 3);
        let counted = (self.membership.live.len(), self.share());
        let changed = self.membership.counted.replace(counted) != Some(counted);
        let (live, share) = counted;
        // The first count is where the set starts, not a change.
        if changed && !first {
            log::info!("the set has {live} live workers; this one's share is {share}");
            let _ = self.events.send(SetEvent::Members { live, share });
        }
    }

    /// Above its share, give up the excess, the prefixes taken last in
    /// this worker's order: stop their writes at once, and release each
    /// once no write already in flight can land ([`Lease::stop_writes`]:
    /// the latest deadline a write can have been handed), so that the
    /// taker never writes beside one of ours.
    fn give_up_excess(&mut self) {
        // Not while its own slot is being taken again: a share counted
        // without it moves nothing that its next census would move back.
        if self.membership.slot.is_none() {
            return;
        }
        let excess = self.held().saturating_sub(self.share());
        let now = self.clock.now();
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        for p in self
            .prefixes
            .iter_mut()
            .rev()
            .filter(|p| p.held.is_some() && p.leaving.is_none())
            .take(excess)
        {
            let Some(lease) = table.remove(&p.prefix) else {
                continue;
            };
            let last_write = lease.lease().stop_writes();
            let at = match StoreMutant::SetReleasesBeforeWritesEnd.on() {
                true => now,
                false => last_write.unwrap_or(now),
            };
            p.leaving = Some((at, lease));
            log::info!("{}: above this worker's share; giving it up", p.prefix);
        }
    }

    /// Release each prefix being given up whose writes in flight are over,
    /// and report it.
    fn release_left(&mut self) {
        let now = self.clock.now();
        let due: Vec<PooledLease> = self
            .prefixes
            .iter()
            .filter_map(|p| p.leaving.as_ref().filter(|(at, _)| *at <= now))
            .map(|(_, lease)| lease.clone())
            .collect();
        for lease in due {
            if self.stopped() {
                return;
            }
            if StoreMutant::SetGivesUpWithoutRelease.on() {
                self.given_up(lease.id(), &Ok(crate::Released::Freed));
                continue;
            }
            // Its stop: the pool's remove, or (gone from the pool already:
            // stopped behind our back, or lost) how it ended.
            let id = lease.id();
            let answer = lease.stop();
            self.given_up(id, &answer);
        }
    }

    /// Take in every event the pool has sent.
    fn hear_pool(&mut self) {
        let events: Vec<_> = self.pool.events().try_iter().collect();
        for event in events {
            self.heard(event);
        }
    }

    /// A pool event: a loss frees the prefix for another try.
    fn heard(&mut self, event: crate::pool::PoolEvent) {
        if self.membership.slot.is_some_and(|(_, id)| id == event.id) {
            if matches!(event.event, Event::Fenced | Event::Lost { .. }) {
                // Counted out by the others soon: take a slot again.
                log::warn!("{}: the set's membership lease ended", event.prefix);
                if let Some((own, _)) = self.membership.slot.take() {
                    self.membership.live.retain(|&n| n != own);
                }
                self.membership.next_register = self.clock.now();
            }
            return;
        }
        let loss = match event.event {
            // Stopped behind the set's back, through its pooled lease.
            Event::Released(_) => {
                let held = self.prefixes.iter().find(|p| p.held == Some(event.id));
                let leaving = held.and_then(|p| p.leaving.as_ref().map(|(_, l)| l.clone()));
                let lease =
                    leaving.or_else(|| held.and_then(|p| self.table().get(&p.prefix).cloned()));
                if let Some(lease) = lease {
                    // What its stop answered, kept on the lease.
                    let answer = lease.lease().recorder().settled();
                    let answer = answer.unwrap_or_else(|| stop_answer_after_leaving(lease.lease()));
                    self.given_up(event.id, &answer);
                }
                return;
            }
            Event::Fenced => Loss::Fenced,
            Event::Lost {
                holder,
                holder_name,
                reason,
            } => Loss::Lost {
                holder,
                holder_name,
                reason,
            },
            _ => return,
        };
        let Some(p) = self.prefixes.iter_mut().find(|p| p.held == Some(event.id)) else {
            return;
        };
        p.held = None;
        p.leaving = None;
        p.failures = 1;
        p.next_try = self.clock.now() + self.clock.jitter(self.options.retry_pause);
        let prefix = p.prefix.clone();
        self.table().remove(&prefix);
        log::info!("{prefix}: lost ({loss}); trying to take it again");
        let _ = self.events.send(SetEvent::Lost { prefix, loss });
    }

    /// A held prefix's stop: stop keeping its lease and release it; the
    /// answer. The prefix, if the set still holds it by this lease, is
    /// given up ([`given_up`](Self::given_up)).
    fn give_up(&mut self, lease: PooledLease) -> Result<crate::Released, LeaseError> {
        let id = lease.id();
        let answer = lease.stop();
        self.given_up(id, &answer);
        answer
    }

    /// Lease `id` was stopped (by its held prefix, or through
    /// [`HeldPrefix::pooled`]) with `answer`: if it holds a prefix of the
    /// set, that prefix is free again, tried again as one another instance
    /// holds, and reported.
    fn given_up(&mut self, id: LeaseId, answer: &Result<crate::Released, LeaseError>) {
        let ttl = Duration::from_secs(self.options.lease.ttl_s());
        let next_try = self.clock.now() + self.clock.jitter(ttl / 4);
        let Some(p) = self.prefixes.iter_mut().find(|p| p.held == Some(id)) else {
            return;
        };
        p.held = None;
        p.leaving = None;
        p.failures = 0;
        p.next_try = next_try;
        let prefix = p.prefix.clone();
        self.table().remove(&prefix);
        log::info!("{prefix}: given up; trying it again in a quarter of its TTL");
        let released = answer.clone();
        let _ = self.events.send(SetEvent::Released { prefix, released });
    }

    /// One attempt to take prefix `i`.
    fn attempt(&mut self, i: usize) {
        let now = self.clock.now();
        let deadline = now.checked_add(self.options.attempt_timeout);
        let ttl = Duration::from_secs(self.options.lease.ttl_s());
        let key = lease_key(&self.prefixes[i].prefix);
        let contender = &mut self.prefixes[i].contender;
        let attempt = unpanicked("PUT", &key, || contender.try_acquire_before(deadline));
        let p = &mut self.prefixes[i];
        match attempt {
            Ok(lease) => {
                let epoch = lease.epoch();
                let pooled = self.pool.add(lease);
                p.held = Some(pooled.id());
                p.failures = 0;
                let prefix = p.prefix.clone();
                self.table().insert(prefix.clone(), pooled);
                let _ = self.events.send(SetEvent::Taken { prefix, epoch });
            }
            Err(LeaseError::Held { .. }) => {
                p.failures = 0;
                p.next_try = self.clock.now() + self.clock.jitter(ttl / 4);
            }
            Err(error) => {
                p.failures = p.failures.saturating_add(1);
                let pause = doubling_pause(self.options.retry_pause, p.failures, ttl);
                p.next_try = self.clock.now() + self.clock.jitter(pause);
                log::warn!("{}: could not take it, trying again: {error}", p.prefix);
                let prefix = p.prefix.clone();
                let _ = self.events.send(SetEvent::Failed { prefix, error });
            }
        }
    }

    fn table(&self) -> MutexGuard<'_, BTreeMap<String, PooledLease>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The most membership slots a set reads or tries: far more workers than
/// a set has, a bound on a census should records be missing.
const MAX_SLOTS: usize = 4096;

/// `call` (requests of `key`, the first by `method`), a panic in it (in a
/// store) turned into an error, so that the set's thread goes on: the
/// attempt failed, and comes again after a pause.
fn unpanicked<T>(
    method: &'static str,
    key: &str,
    call: impl FnOnce() -> Result<T, LeaseError>,
) -> Result<T, LeaseError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).unwrap_or_else(|panic| {
        let message = crate::keeper::panic_message(&*panic);
        Err(LeaseError::Store(
            crate::store::StoreError::new(crate::store::StoreErrorKind::Transport, method, key)
                .with_message(format!(
                    "the store panicked ({message}); the set tries again after a pause"
                )),
        ))
    })
}

/// A contender for `prefix` under this worker's instance id and holder
/// name.
fn contender(
    store: &Arc<dyn Store>,
    prefix: &str,
    options: &HeldSetOptions,
    id: &str,
) -> Contender {
    let contender = Contender::new(Arc::clone(store), prefix, options.lease.clone())
        .with_instance_id(id.to_string());
    match &options.holder_name {
        // Checked by `HeldSetOptions::holder_name`.
        Some(name) => contender
            .with_holder_name(name.clone())
            .unwrap_or_else(|_| unreachable!("a holder name the options checked")),
        None => contender,
    }
}

/// Two random bytes from the operating system (0 without randomness: the
/// order is then the set's own).
fn random_u16() -> u16 {
    let mut bytes = [0u8; 2];
    let _ = getrandom::fill(&mut bytes);
    u16::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::TestClock;
    use crate::lease::Released;
    use crate::memory::MemoryStore;

    fn shards(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("shards/{i}")).collect()
    }

    fn taken(set: &HeldSet, n: usize) -> Vec<String> {
        let mut got = Vec::new();
        while got.len() < n {
            match set.events().recv_timeout(Duration::from_secs(10)) {
                Ok(SetEvent::Taken { prefix, .. }) => got.push(prefix),
                Ok(other) => panic!("expected Taken, got {other:?}"),
                Err(e) => panic!("only {got:?} taken: {e}"),
            }
        }
        got
    }

    #[test]
    fn a_worker_alone_takes_every_free_prefix() {
        let store = Arc::new(MemoryStore::new());
        let set =
            HeldSet::spawn(store, shards(5), HeldSetOptions::new(LeaseOptions::new(30))).unwrap();
        let mut got = taken(&set, 5);
        got.sort();
        assert_eq!(got, shards(5));
        assert_eq!(set.held().len(), 5);
        assert!(set.held().iter().all(HeldPrefix::may_write));
        assert!(set.get("shards/3").is_some());
        let released = set.stop();
        assert_eq!(released.len(), 5);
        assert!(released.iter().all(|(_, r)| *r == Ok(Released::Freed)));
    }

    #[test]
    fn at_most_caps_what_one_worker_holds_and_a_second_takes_the_rest() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let options = HeldSetOptions::new(LeaseOptions::new(30)).at_most(3);
        let first = HeldSet::spawn(Arc::clone(&store), shards(6), options.clone()).unwrap();
        taken(&first, 3);
        let second = HeldSet::spawn(Arc::clone(&store), shards(6), options).unwrap();
        taken(&second, 3);
        let mut all: Vec<String> = first
            .held()
            .into_iter()
            .chain(second.held())
            .map(|h| h.prefix().to_string())
            .collect();
        all.sort();
        assert_eq!(all, shards(6), "split between them, none twice");
        first.stop();
        second.stop();
    }

    #[test]
    fn a_lost_prefix_is_reported_and_taken_again_after_its_pause() {
        let clock = TestClock::new();
        let store = Arc::new(MemoryStore::new());
        let lease_options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
        let options =
            HeldSetOptions::new(lease_options.clone()).pool(PoolOptions::new().renewal_threads(0));
        let set = HeldSet::spawn(Arc::clone(&store) as Arc<dyn Store>, shards(1), options).unwrap();
        taken(&set, 1);
        let first = set.get("shards/0").unwrap();
        let first_epoch = first.epoch();
        // Another instance breaks in: the next renewal finds it lost.
        let now = crate::record::format_stamp(clock.wall());
        let usurper = crate::record::LeaseRecord::new("usurper", now.clone(), now, 30, 9);
        store.insert("shards/0/LEASE", &usurper.to_bytes());
        clock.advance(Duration::from_secs(10));
        match set.events().recv_timeout(Duration::from_secs(10)).unwrap() {
            SetEvent::Lost { prefix, loss } => {
                assert_eq!(prefix, "shards/0");
                assert!(matches!(loss, Loss::Lost { .. }), "{loss:?}");
            }
            other => panic!("expected Lost, got {other:?}"),
        }
        assert!(!first.may_write());
        assert!(set.get("shards/0").is_none());
        // The usurper's record expires; the set takes the prefix again.
        for _ in 0..200 {
            clock.advance(Duration::from_millis(500));
            if let Ok(event) = set.events().recv_timeout(Duration::from_millis(20)) {
                match event {
                    SetEvent::Taken { prefix, epoch } => {
                        assert_eq!(prefix, "shards/0");
                        assert!(epoch > first_epoch.max(9), "a new epoch: {epoch}");
                        assert!(set.get("shards/0").unwrap().may_write());
                        set.stop();
                        return;
                    }
                    other => panic!("expected Taken, got {other:?}"),
                }
            }
        }
        panic!("the prefix was never taken again");
    }
}
