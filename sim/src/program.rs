//! Programs: simulated processes that each run a random sequence of the
//! public API's calls over one or two keys, as application code would,
//! beside the contenders of `actor.rs` (which each live one scripted life
//! with one lease at a time).
//!
//! A program holds up to two live `Lease` values per key, of four kinds:
//! a plain value (renewed by the program itself, or not: some programs
//! seldom renew), one handed to a keeper, one added to the process's pool,
//! and the one a `run_while_held` call holds on a thread of its own. At
//! each step it draws one of: an acquire (`try_acquire`,
//! `try_acquire_before`, `acquire_with`, or `acquire_with` under a `Wait`
//! with no deadline that another thread cancels), a fenced write (a
//! create-only object, then the key's pointer moved to it), a keeper
//! spawned for a plain value, a plain value added to the pool, a value
//! given up (a plain one released then dropped, or just dropped; a
//! keeper stopped or dropped; a pooled one removed), a plain value
//! released but kept, a `run_while_held` started on another thread, or
//! its contender for a key built anew under the same instance id. Before
//! each step it reacts as retry loops do: a value seen `Fenced` (a
//! keeper's or the pool's event, or a plain value's status) is, more often
//! than not, followed by an acquire of the same key while the old value
//! lives, then (for a keeper) the old keeper dropped as
//! `keeper = Keeper::spawn(contender.try_acquire()?, opts)?` drops it, (for
//! the pool) the new lease added and the old id removed, (for a plain
//! value) the old one dropped now or left for a later step. A value found
//! lost is given up. All of a process's threads share one store and one
//! clock.
//!
//! What is the real code: `Contender` and every acquire, `Lease` and its
//! `renew`, `release`, status and drop (which releases), `Cancel`,
//! `FencedWriter`, the keeper's driver (its thread's whole loop and end:
//! `keeper::driver::keep`, on a simulated thread through `driven.rs`),
//! the pool's driver with its machine `PoolSchedule` and `work` (its
//! scheduler thread's whole loop: `pool::driver::drive`, on a simulated
//! thread through `program/pool.rs`). What is driven
//! here as the real threads would drive it, because `Keeper`,
//! `KeeperPool` and `run_while_held` start OS threads the simulation
//! cannot schedule: the keeper's handle (`program/keeper.rs`: its thread
//! is the real driver, its stop and drop ask it to stop and wait for its
//! release), the pool's handle and threads (`program/pool.rs`: the
//! scheduler thread is the real driver, remove asks it and waits for the
//! release, renewal threads run the real `work`),
//! and `run_while_held` (`program/hold.rs`: the real `acquire_with`, such
//! a keeper, the closure's fenced writes, the keeper stopped however the
//! closure ends).
//!
//! Every call is made as the value it is for (`values.rs`), so the
//! checkers judge these programs value by value. What the programs drew
//! is counted in the run's `checked` counts under `program: …`.

mod hold;
mod keeper;
mod pool;

use self::keeper::SimKeeper;
use self::pool::SimPool;
use super::env::{store_of, without_probe_names, SimClock};
use super::rng::Rng;
use super::sched::{current, Nanos, Shared, SEC};
use super::values::ValueId;
use super::world::{nonce_of, WATCHED};
use bucket_lease_core::clock::Clock;
use bucket_lease_core::keeper::Event;
use bucket_lease_core::lease::{Cancel, Contender, Lease, LeaseOptions, LeaseStatus, Wait};
use bucket_lease_core::pool::LeaseId;
use bucket_lease_core::store::Store;
use bucket_lease_core::{FencedWriter, LeaseError, WriteError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How one program process is set up (see [`draw`]).
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Its contender index.
    pub(crate) contender: usize,
    /// The seed of its own draws.
    seed: u64,
    /// How many keys it uses: `sim/LEASE`, then `sim/b/LEASE`.
    pub(crate) keys: usize,
    /// How likely (per 10,000) each plain value is renewed at a step.
    pub(crate) diligence: u64,
    /// Its pool's renewal threads (0: the scheduler renews inline).
    pub(crate) pool_threads: usize,
    pub(crate) skew_ms: i64,
    pub(crate) drift_ppm: i64,
    pub(crate) pauses: Vec<(Nanos, Nanos)>,
    pub(crate) partitions: Vec<(Nanos, Nanos)>,
}

/// In about one run in three, one or two program processes, contenders
/// `first` on. Drawn from a stream of their own, so a seed that draws
/// none runs as it did before programs existed.
pub(crate) fn draw(seed: u64, first: usize, ttl_s: u64, run_len: Nanos) -> Vec<Plan> {
    let mut rng = Rng::new(seed.rotate_left(41) ^ 0x0050_0C8A_0000_0028);
    if !rng.chance(3300) {
        return Vec::new();
    }
    let ttl = ttl_s * SEC;
    let skew_limit = i64::try_from(ttl_s * 1000 * 15 / 100).unwrap_or(0);
    let count = rng.range(1, 3);
    let spans = |rng: &mut Rng, longest: Nanos| -> Vec<(Nanos, Nanos)> {
        (0..rng.range(0, 3))
            .map(|_| {
                let at = rng.range(0, run_len);
                (at, at + rng.range(ttl / 10, longest))
            })
            .collect()
    };
    (0..count)
        .map(|i| {
            let pauses = spans(&mut rng, ttl * 22 / 10);
            let partitions = spans(&mut rng, 2 * ttl);
            Plan {
                contender: first + i as usize,
                seed: rng.next_u64(),
                keys: usize::try_from(rng.range(1, 3)).unwrap_or(1),
                diligence: [9000, 5000, 1000][usize::try_from(rng.range(0, 3)).unwrap_or(0)],
                pool_threads: usize::try_from(rng.range(0, 3)).unwrap_or(1),
                skew_ms: rng.range_i(-skew_limit, skew_limit + 1),
                drift_ppm: rng.range_i(-100, 101),
                pauses,
                partitions,
            }
        })
        .collect()
}

/// What a process's threads share: who it is, its store and its clock.
#[derive(Clone)]
pub(super) struct Ctx {
    sh: Arc<Shared>,
    c: usize,
    name: String,
    ttl_s: u64,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
}

impl Ctx {
    fn now(&self) -> Nanos {
        self.sh.lock().sched.now
    }

    fn ttl(&self) -> Nanos {
        self.ttl_s * SEC
    }

    /// A contender for the lease on `prefix`, as this process's.
    fn contender(&self, prefix: &str) -> Contender {
        let options = LeaseOptions::new(self.ttl_s).clock(Arc::clone(&self.clock));
        Contender::new(Arc::clone(&self.store), prefix, options)
            .with_instance_id(self.name.clone())
            .with_instance_nonce(nonce_of(self.c))
    }

    /// Note in the trace what the process did.
    fn log(&self, line: impl FnOnce() -> String) {
        let c = self.c;
        self.sh.lock().log(|| format!("c{c} program: {}", line()));
    }

    /// Count one of what the programs drew.
    fn count(&self, what: &'static str) {
        self.sh.lock().drawn.add(what);
    }

    /// From now on this thread's calls are `value`'s.
    fn act_for(&self, value: ValueId) {
        self.sh.lock().act_for(current(), value);
    }

    /// `value`'s acquire call handed out `lease` on `key`: note it.
    fn handed_out(&self, value: ValueId, key: &'static str, lease: &Arc<Lease>) {
        let mut w = self.sh.lock();
        let (t, c, epoch) = (w.sched.now, self.c, lease.epoch());
        w.handed_out(value, lease);
        w.grants.push((t, c, epoch, key));
        w.drawn.add("program: leases handed out");
        if w.live_values(c, key) >= 2 {
            w.drawn.add("program: two live values on a key");
        }
        w.log(|| format!("c{c} program: v{value} takes {key} at epoch {epoch}"));
    }
}

/// How the program keeps a value.
enum Kind {
    /// The program renews it itself (or not).
    Plain,
    /// A keeper renews it.
    Kept(SimKeeper),
    /// The process's pool renews it.
    Pooled(LeaseId),
}

impl Kind {
    fn name(&self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Kept(_) => "kept",
            Kind::Pooled(_) => "pooled",
        }
    }
}

/// A value the program holds.
struct Held {
    value: ValueId,
    lease: Arc<Lease>,
    /// Its writer, kept with it (it remembers the pointer's version).
    writer: FencedWriter,
    kind: Kind,
    /// Released by the program (a plain value kept after its release).
    released: bool,
    /// Seen fenced.
    fenced: bool,
    /// Its writes so far, which name its data objects.
    writes: u64,
}

impl Held {
    /// Value `value`, just handed out as `lease`, as a plain value.
    fn plain(value: ValueId, lease: Arc<Lease>) -> Self {
        Held {
            value,
            writer: FencedWriter::new(Arc::clone(&lease)),
            lease,
            kind: Kind::Plain,
            released: false,
            fenced: false,
            writes: 0,
        }
    }
}

/// One key: its contender and the values held on it.
struct Slot {
    key: &'static str,
    prefix: &'static str,
    contender: Contender,
    held: Vec<Held>,
}

/// One program process's main thread.
struct Process {
    ctx: Ctx,
    rng: Rng,
    slots: Vec<Slot>,
    pool: Option<SimPool>,
    pool_threads: usize,
    diligence: u64,
    /// The key a `run_while_held` of this process is on, while one runs.
    helper: Arc<Mutex<Option<&'static str>>>,
}

/// Program `plan`'s main thread: react, renew, one step, a pause; until
/// the run ends.
pub(crate) fn process(sh: Arc<Shared>, plan: Plan) {
    let c = plan.contender;
    let (ttl_s, name) = {
        let w = sh.lock();
        (w.ttl_s, w.name_of(c))
    };
    let ctx = Ctx {
        clock: Arc::new(SimClock {
            sh: Arc::clone(&sh),
            c,
        }),
        store: store_of(&sh, c),
        sh,
        c,
        name,
        ttl_s,
    };
    let slots = WATCHED[..plan.keys]
        .iter()
        .map(|&(key, prefix, _)| Slot {
            key,
            prefix,
            contender: ctx.contender(prefix),
            held: Vec::new(),
        })
        .collect();
    let mut p = Process {
        ctx,
        rng: Rng::new(plan.seed),
        slots,
        pool: None,
        pool_threads: plan.pool_threads,
        diligence: plan.diligence,
        helper: Arc::new(Mutex::new(None)),
    };
    loop {
        p.react();
        p.renew_plain();
        p.step();
        let pause = p.ctx.ttl() * p.rng.range(5, 35) / 100;
        let at = p.ctx.now() + pause;
        p.ctx.sh.sleep_until(at);
    }
}

impl Process {
    /// How many values are live on key `k`, the helper's included.
    fn live_on(&self, k: usize) -> usize {
        let helper = self.helper.lock().unwrap_or_else(|e| e.into_inner());
        self.slots[k].held.len() + usize::from(*helper == Some(self.slots[k].key))
    }

    /// Where value `value` sits on key `k`.
    fn find(&self, k: usize, value: ValueId) -> Option<usize> {
        self.slots[k].held.iter().position(|h| h.value == value)
    }

    /// A random held value on key `k` that `pick` accepts.
    fn pick(&mut self, k: usize, pick: impl Fn(&Held) -> bool) -> Option<ValueId> {
        let fit: Vec<ValueId> = self.slots[k]
            .held
            .iter()
            .filter(|h| pick(h))
            .map(|h| h.value)
            .collect();
        let i = usize::try_from(self.rng.range(0, fit.len() as u64)).ok()?;
        fit.get(i).copied()
    }

    /// Read what happened to each value; give up the lost, and retry
    /// (more often than not) for the fenced, as retry loops do.
    fn react(&mut self) {
        let pooled = self.pool.as_ref().map(SimPool::events).unwrap_or_default();
        let mut seen = Vec::new();
        for (k, slot) in self.slots.iter_mut().enumerate() {
            for h in &mut slot.held {
                let (fenced, lost) = match &h.kind {
                    Kind::Kept(keeper) => {
                        let events = keeper.events();
                        (
                            events.contains(&Event::Fenced),
                            events.iter().any(|e| matches!(e, Event::Lost { .. })),
                        )
                    }
                    Kind::Pooled(id) => {
                        let mine = pooled.iter().filter(|e| e.id == *id);
                        let events: Vec<&Event> = mine.map(|e| &e.event).collect();
                        (
                            events.contains(&&Event::Fenced),
                            events.iter().any(|e| matches!(e, Event::Lost { .. })),
                        )
                    }
                    Kind::Plain if h.released => (false, false),
                    Kind::Plain => (h.lease.status() == LeaseStatus::Fenced, h.lease.is_lost()),
                };
                h.fenced |= fenced;
                seen.push((k, h.value, h.fenced && !h.released, lost));
            }
        }
        for (k, value, fenced, lost) in seen {
            if lost {
                self.give_up(k, value);
            } else if fenced && self.rng.chance(6000) {
                self.retry(k, value);
            }
        }
    }

    /// The retry loop after `Fenced`: take key `k` again while `old` lives,
    /// keep the new value as the old one was kept, and let the old go.
    fn retry(&mut self, k: usize, old: ValueId) {
        if self.live_on(k) >= 2 {
            return;
        }
        let Some(i) = self.find(k, old) else { return };
        self.ctx.count("program: re-acquires after Fenced");
        let kind = &self.slots[k].held[i].kind;
        let (name, kept) = (kind.name(), matches!(kind, Kind::Kept(_)));
        self.ctx
            .log(|| format!("v{old} ({name}) is fenced: taking the lease again"));
        let Some(new) = self.acquire(k) else {
            return;
        };
        if name == Kind::Plain.name() {
            self.slots[k].held.push(new);
            if self.rng.chance(5000) {
                self.give_up(k, old);
            }
        } else {
            self.keep(k, new, kept);
            self.give_up(k, old);
        }
    }

    /// Renew each plain value, each with the program's diligence.
    fn renew_plain(&mut self) {
        let plain: Vec<(ValueId, Arc<Lease>)> = self
            .slots
            .iter()
            .flat_map(|s| &s.held)
            .filter(|h| matches!(h.kind, Kind::Plain) && !h.released && !h.lease.is_lost())
            .map(|h| (h.value, Arc::clone(&h.lease)))
            .collect();
        for (value, lease) in plain {
            if !self.rng.chance(self.diligence) {
                continue;
            }
            self.ctx.act_for(value);
            self.ctx.count("program: renewals");
            let renewed = match lease.write_deadline() {
                Some(deadline) if self.rng.chance(5000) => {
                    let started = self.ctx.now();
                    let renewed = lease.renew_before(Some(deadline));
                    let mut w = self.ctx.sh.lock();
                    let limit = w.nanos_of(deadline);
                    w.returned_by(self.ctx.c, "renewal", started, limit);
                    renewed
                }
                _ => lease.renew(),
            };
            self.ctx
                .log(|| format!("v{value} renew: {}", brief(&renewed)));
        }
    }

    /// One step, drawn.
    fn step(&mut self) {
        let k = usize::try_from(self.rng.range(0, self.slots.len() as u64)).unwrap_or(0);
        match self.rng.range(0, 100) {
            0..=29 => self.maybe_acquire(k),
            30..=54 => {
                if let Some(value) = self.pick(k, |_| true) {
                    self.write(k, value);
                }
            }
            55..=71 => {
                if let Some(value) = self.pick(k, |h| matches!(h.kind, Kind::Plain) && !h.released)
                {
                    let i = self.find(k, value).unwrap_or(0);
                    let h = self.slots[k].held.remove(i);
                    let kept = self.rng.chance(5300);
                    self.keep(k, h, kept);
                }
            }
            72..=83 => {
                if let Some(value) = self.pick(k, |_| true) {
                    self.give_up(k, value);
                }
            }
            84..=90 => self.run_while_held(k),
            91..=95 => {
                if let Some(value) = self.pick(k, |h| matches!(h.kind, Kind::Plain) && !h.released)
                {
                    self.release(k, value);
                }
            }
            _ => {
                let slot = &mut self.slots[k];
                slot.contender = self.ctx.contender(slot.prefix);
                self.ctx.count("program: contenders built anew");
                let key = slot.key;
                self.ctx
                    .log(|| format!("a new contender for {key} under the same instance id"));
            }
        }
    }

    /// Take key `k` when fewer than two values live on it: usually only
    /// when none does, now and then while one still may write.
    fn maybe_acquire(&mut self, k: usize) {
        let live = self.live_on(k);
        if live >= 2 || (live == 1 && !self.rng.chance(2000)) {
            return;
        }
        let Some(new) = self.acquire(k) else {
            return;
        };
        match self.rng.range(0, 4) {
            0 => self.keep(k, new, true),
            1 => self.keep(k, new, false),
            _ => self.slots[k].held.push(new),
        }
    }

    /// One acquire call on key `k`, of a drawn kind; the new value, plain,
    /// when it handed one out.
    fn acquire(&mut self, k: usize) -> Option<Held> {
        let (key, c) = (self.slots[k].key, self.ctx.c);
        let ttl = self.ctx.ttl();
        let poll = Duration::from_nanos(ttl / 5);
        let how = match self.rng.range(0, 10) {
            0..=3 => "try_acquire",
            4..=5 => "try_acquire_before",
            6..=7 => "acquire_with",
            _ => "acquire_with cancelled",
        };
        let value = self.ctx.sh.lock().draw_value(c, key, how);
        self.ctx.count("program: acquire calls");
        let started = self.ctx.now();
        let clock = Arc::clone(&self.ctx.clock);
        let contender = &mut self.slots[k].contender;
        let (acquired, deadline) = match how {
            "try_acquire" => (contender.try_acquire(), None),
            "try_acquire_before" => {
                let deadline =
                    clock.now() + Duration::from_nanos(ttl * self.rng.range(20, 150) / 100);
                (contender.try_acquire_before(Some(deadline)), Some(deadline))
            }
            "acquire_with" => {
                let deadline =
                    clock.now() + poll * u32::try_from(self.rng.range(1, 6)).unwrap_or(1);
                let wait = Wait::until(deadline).max_reread(poll).attempt_timeout(poll);
                (contender.acquire_with(&wait), Some(deadline))
            }
            _ => {
                // No deadline: the wait ends with the lease, a permanent
                // error or the cancel, which another thread sends. (With a
                // deadline, a timer and a cancel both due could end it
                // either way, whichever the wait's `select!` took.)
                let cancel = Cancel::new();
                let at = started + self.rng.range(ttl / 4, 2 * ttl);
                {
                    let cancel = cancel.clone();
                    self.ctx.sh.spawn(c, move |sh| {
                        sh.sleep_until(at);
                        cancel.cancel();
                        sh.lock()
                            .log(|| format!("c{c} program: v{value}'s wait cancelled"));
                    });
                }
                self.ctx.count("program: cancellable waits");
                let wait = Wait::forever()
                    .max_reread(poll)
                    .attempt_timeout(poll)
                    .cancel(cancel);
                (contender.acquire_with(&wait), None)
            }
        };
        if let Some(deadline) = deadline {
            let mut w = self.ctx.sh.lock();
            let limit = w.nanos_of(deadline);
            w.returned_by(c, how, started, limit);
        }
        match acquired {
            Ok(lease) => {
                let lease = Arc::new(lease);
                self.ctx.handed_out(value, key, &lease);
                Some(Held::plain(value, lease))
            }
            Err(e) => {
                let text = brief::<()>(&Err(e));
                self.ctx.log(|| format!("v{value} {how} on {key}: {text}"));
                None
            }
        }
    }

    /// Hand value `h` to a keeper of its own (`kept`) or to the pool, and
    /// hold it so on key `k`.
    fn keep(&mut self, k: usize, mut h: Held, kept: bool) {
        let (value, lease) = (h.value, Arc::clone(&h.lease));
        h.kind = if kept {
            self.ctx.count("program: keepers spawned");
            Kind::Kept(SimKeeper::spawn(&self.ctx.sh, self.ctx.c, value, lease))
        } else {
            self.ctx.count("program: pool adds");
            let ctx = &self.ctx;
            let pool = self
                .pool
                .get_or_insert_with(|| SimPool::spawn(&ctx.sh, ctx.c, self.pool_threads));
            Kind::Pooled(pool.add(&ctx.sh, value, lease))
        };
        let name = h.kind.name();
        self.ctx.log(|| format!("v{value} is {name}"));
        self.slots[k].held.push(h);
    }

    /// A fenced write as value `value`.
    fn write(&mut self, k: usize, value: ValueId) {
        let Some(i) = self.find(k, value) else { return };
        self.ctx.act_for(value);
        let h = &mut self.slots[k].held[i];
        h.writes += 1;
        fenced_write(&self.ctx, value, &h.writer, h.writes);
    }

    /// Release plain value `value` and keep it.
    fn release(&mut self, k: usize, value: ValueId) {
        let Some(i) = self.find(k, value) else { return };
        self.ctx.act_for(value);
        self.ctx.count("program: releases");
        let h = &mut self.slots[k].held[i];
        h.released = true;
        let released = h.lease.release();
        self.ctx
            .log(|| format!("v{value} release (the value is kept): {released:?}"));
    }

    /// Let value `value` go: a plain one released then dropped, or just
    /// dropped (its drop releases it); a keeper stopped or dropped; a
    /// pooled one removed.
    fn give_up(&mut self, k: usize, value: ValueId) {
        let Some(i) = self.find(k, value) else { return };
        let h = self.slots[k].held.remove(i);
        if self.live_on(k) > 0 {
            self.ctx
                .count("program: values given up while another lived");
        }
        self.ctx.act_for(value);
        let ctx = &self.ctx;
        match h.kind {
            Kind::Plain => {
                if !h.released && self.rng.chance(5000) {
                    ctx.count("program: releases");
                    let released = h.lease.release();
                    ctx.log(|| format!("v{value} release: {released:?}"));
                }
                ctx.count("program: drops");
                ctx.log(|| format!("v{value} dropped"));
                drop(h.writer);
                drop(h.lease);
            }
            Kind::Kept(keeper) => {
                let how = if self.rng.chance(5000) {
                    "stopped"
                } else {
                    "dropped"
                };
                ctx.count("program: keepers stopped or dropped");
                let released = keeper.stop(&ctx.sh);
                ctx.log(|| format!("v{value}'s keeper {how}: {released:?}"));
            }
            Kind::Pooled(id) => {
                ctx.count("program: pool removes");
                let removed = self.pool.as_ref().and_then(|p| p.remove(&ctx.sh, id));
                ctx.log(|| format!("v{value} removed from the pool ({id}): {removed:?}"));
            }
        }
    }

    /// Start `run_while_held` on key `k` on a thread of its own, unless
    /// one runs.
    fn run_while_held(&mut self, k: usize) {
        let key = self.slots[k].key;
        {
            let mut helper = self.helper.lock().unwrap_or_else(|e| e.into_inner());
            if helper.is_some() || self.slots[k].held.len() >= 2 {
                return;
            }
            *helper = Some(key);
        }
        self.ctx.count("program: run_while_held calls");
        let (ctx, busy, seed) = (
            self.ctx.clone(),
            Arc::clone(&self.helper),
            self.rng.next_u64(),
        );
        let prefix = self.slots[k].prefix;
        self.ctx.sh.spawn(self.ctx.c, move |_| {
            hold::run_while_held(&ctx, key, prefix, seed, &busy)
        });
    }
}

/// A short account of a call's result, for the trace.
fn brief<T>(result: &Result<T, LeaseError>) -> String {
    match result {
        Ok(_) => "ok".to_string(),
        Err(LeaseError::Held { holder, .. }) => format!("held by {holder}"),
        Err(e) => without_probe_names(&e.to_string()),
    }
}

/// One write of `value` through its real [`FencedWriter`]: a create-only
/// data object under the key's prefix, then the key's pointer moved to it
/// when that landed. Each call sits in a window of `value` from its start,
/// when `may_write()`, to the answer of its last PUT (none without a PUT);
/// a call made when the lease forbids writing is made all the same (the
/// writer sends nothing) and opens no window.
// The closures return the core's own `WriteError`, whatever its size, as
// `FencedWriter`'s methods do (from outside the core clippy measures it
// here).
#[allow(clippy::result_large_err)]
pub(super) fn fenced_write(ctx: &Ctx, value: ValueId, writer: &FencedWriter, n: u64) {
    let key = writer.lease().key();
    let Some(&(key, prefix, pointer)) = WATCHED.iter().find(|(k, _, _)| *k == key) else {
        return;
    };
    let data = format!("{prefix}/data/c{}-v{value}-{n}", ctx.c);
    ctx.count("program: fenced writes");
    let written = one_write(ctx, value, key, writer, "write", |w| w.put_new(&data, b"x"));
    if written {
        one_write(ctx, value, key, writer, "pointer write", |w| {
            w.put_pointer(pointer, data.as_bytes())
        });
    }
}

/// One call on the writer, in its window; whether it succeeded.
fn one_write<T>(
    ctx: &Ctx,
    value: ValueId,
    key: &'static str,
    writer: &FencedWriter,
    what: &'static str,
    call: impl FnOnce(&FencedWriter) -> Result<T, WriteError>,
) -> bool {
    let me = current();
    let window = writer.lease().may_write().then(|| {
        let mut w = ctx.sh.lock();
        w.put_answer.remove(&me);
        w.open(value, key, writer.lease().epoch(), what)
    });
    let done = call(writer);
    let mut w = ctx.sh.lock();
    if let Some(window) = window {
        let start = w.windows[window].start;
        let end = w.put_answer.get(&me).copied().unwrap_or(start);
        w.close(window, end);
    }
    let text = match &done {
        Ok(_) => "ok".to_string(),
        Err(e) => e.to_string(),
    };
    let c = ctx.c;
    w.log(|| format!("c{c} program: v{value} fenced {what}: {text}"));
    done.is_ok()
}

/// The set-up line's account of the programs.
pub(crate) fn describe(plans: &[Plan]) -> String {
    let each: Vec<String> = plans
        .iter()
        .map(|p| {
            format!(
                "c{} on {} key{}, renewing plain values {}%, a pool of {} renewal threads",
                p.contender,
                p.keys,
                if p.keys == 1 { "" } else { "s" },
                p.diligence / 100,
                p.pool_threads
            )
        })
        .collect();
    format!(", programs: {}", each.join("; "))
}
