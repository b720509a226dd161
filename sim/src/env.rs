//! What a contender's real code runs on: a [`Store`] whose requests take
//! simulated time and suffer the run's faults, and a [`Clock`] on simulated
//! true time with the contender's own wall-clock skew.
//!
//! A request is sent at the caller's instant `t`. Its effect lands at
//! `t + d1` (conditions are checked then, against the store as it is then),
//! later (up to two TTLs: "late"), or never ("dropped", "5xx"); its answer
//! reaches the caller at `t + d2`, or never ("lost" after landing), in
//! which case the caller sees a timeout at its deadline. The caller's
//! thread gives the baton back until its answer arrives. Each request logs
//! its call, its deadline, its send and its return, for the check of the
//! store contract; only under the mutant `store-sends-late` does the store
//! break it, holding a request past its deadline before sending it.

use super::sched::{current, Ev, Nanos, Shared, SEC};
use super::world::{instance_id, key_of, watched, Done, Op, Request, World};
use bucket_lease_core::channel::{self, Receiver};
use bucket_lease_core::clock::Clock;
use bucket_lease_core::mutant::{self, Mutant};
use bucket_lease_core::spacing::SpacedStore;
use bucket_lease_core::store::{
    DeleteMode, Object, PutMode, PutOptions, Store, StoreError, StoreErrorKind, Version,
};
use std::cell::RefCell;
use std::fmt;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

const MS: Nanos = 1_000_000;

/// Contender `c`'s store: its view of the simulated one, spaced by R2's
/// write interval in a run with that limit, as the `r2` profile's HTTP
/// store spaces its writes.
pub(crate) fn store_of(sh: &Arc<Shared>, c: usize) -> Arc<dyn Store> {
    let store = Arc::new(SimStore {
        sh: Arc::clone(sh),
        c,
    });
    let limit = sh.lock().write_limit;
    match limit {
        Some(interval) => Arc::new(SpacedStore::new(
            store,
            Duration::from_nanos(interval),
            Arc::new(SimClock {
                sh: Arc::clone(sh),
                c,
            }),
        )),
        None => store,
    }
}

/// Contender `c`'s view of the store.
pub(crate) struct SimStore {
    pub(crate) sh: Arc<Shared>,
    pub(crate) c: usize,
}

impl fmt::Debug for SimStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimStore(c{})", self.c)
    }
}

/// How a request's answer reaches its sender.
enum Answer {
    /// What the store did.
    Result,
    /// No usable answer.
    Transport { timed_out: bool },
    /// A conflict answer, nothing landed.
    Conflict,
}

fn method(op: &Op) -> &'static str {
    match op {
        Op::Get(_) => "GET",
        Op::Put(..) => "PUT",
        Op::Delete(..) => "DELETE",
    }
}

/// `key` for the trace: the probe's key is named at random by the real
/// code (from the operating system), so it is shown without its name,
/// keeping one seed's trace identical across replays.
fn shown(key: &str) -> &str {
    key.find(".probe-").map_or(key, |i| &key[..i + 7])
}

/// `text` (an error's) with each probe key's random name left out, as
/// [`shown`] shows it.
pub(crate) fn without_probe_names(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(".probe-") {
        out.push_str(&rest[..i + 7]);
        rest = rest[i + 7..].trim_start_matches(|ch: char| ch.is_ascii_hexdigit());
    }
    out.push_str(rest);
    out
}

pub(crate) fn describe_op(op: &Op) -> String {
    let op = &match op {
        Op::Get(k) => Op::Get(shown(k).to_string()),
        Op::Put(k, b, o) => Op::Put(shown(k).to_string(), b.clone(), o.clone()),
        Op::Delete(k, m) => Op::Delete(shown(k).to_string(), m.clone()),
    };
    match op {
        Op::Get(k) => format!("GET {k}"),
        Op::Put(k, body, o) => {
            let what =
                bucket_lease_core::record::LeaseRecord::parse(body).map_or(String::new(), |r| {
                    format!(
                        " [{} epoch {}{}]",
                        r.instance_id,
                        r.epoch,
                        if r.is_released() { " released" } else { "" }
                    )
                });
            let mode = match &o.mode {
                PutMode::Create => "If-None-Match *".to_string(),
                PutMode::Update(v) => format!("If-Match {:?}", v.etag.as_deref().unwrap_or("-")),
                PutMode::Overwrite => "unconditional".to_string(),
                other => format!("{other:?}"),
            };
            format!("PUT {k} {mode}{what}")
        }
        Op::Delete(k, m) => format!("DELETE {k} {m:?}"),
    }
}

impl SimStore {
    fn request(&self, op: Op, deadline: Option<Instant>) -> Result<Done, StoreError> {
        let tid = current();
        let c = self.c;
        let mut w = self.sh.lock();
        if w.sched.over {
            // A thread that caught the end of the run as a panic (the
            // pool's jobs guard against panics) goes on until it next
            // waits: nothing it asks for is sent or seen.
            return Err(
                StoreError::new(StoreErrorKind::Transport, method(&op), key_of(&op)).timed_out(),
            );
        }
        let now = w.sched.now;
        let called = now;
        let asked = deadline.map(|d| w.nanos_of(d));
        let deadline = deadline.map_or(now + 30 * SEC, |d| w.nanos_of(d).min(now + 30 * SEC));
        let m = method(&op);
        let key = key_of(&op).to_string();
        if deadline <= now {
            let line = if w.trace.is_some() {
                describe_op(&op)
            } else {
                String::new()
            };
            w.log(|| format!("c{c} {line}: deadline already passed, not sent"));
            return Err(StoreError::new(StoreErrorKind::Transport, m, key).timed_out());
        }
        let (mut w, now, deadline) = self.sends_late(w, now, deadline);
        if let Op::Put(k, body, _) = &op {
            if watched(k).is_some() {
                w.first_sent.entry(body.clone()).or_insert(now);
            }
        }
        let ttl = w.ttl_s * SEC;
        let faulty = now >= w.faults_from && now < w.faults_until && !w.contenders[c].quiet;
        let rates = w.rates;
        let normal = |w: &mut super::world::World| w.rng.range(MS, 40 * MS);
        let mut d1 = normal(&mut w);
        let mut back = normal(&mut w);
        let mut effect = true;
        let mut answer = Answer::Result;
        let mut fault = None;
        if w.black_hole.as_deref() == Some(key.as_str()) {
            effect = false;
            answer = Answer::Transport { timed_out: true };
            fault = Some("black hole");
        } else if faulty && w.partitioned(c, now) {
            effect = false;
            if w.rng.chance(5000) {
                answer = Answer::Transport { timed_out: false };
                back = w.rng.range(MS, 200 * MS);
                fault = Some("partitioned: refused");
            } else {
                answer = Answer::Transport { timed_out: true };
                back = deadline - now;
                fault = Some("partitioned: black hole");
            }
            d1 = 0;
        } else if faulty {
            let conditional = matches!(&op, Op::Put(_, _, o) if o.mode != PutMode::Overwrite);
            if w.rng.chance(rates.drop) {
                effect = false;
                answer = Answer::Transport { timed_out: true };
                fault = Some("dropped");
            } else if w.rng.chance(rates.fail) {
                effect = false;
                answer = Answer::Transport { timed_out: false };
                fault = Some("5xx");
            } else if conditional && w.rng.chance(rates.conflict) {
                effect = false;
                answer = Answer::Conflict;
                fault = Some("409 conflict");
            } else if w.rng.chance(rates.late) {
                d1 = w.rng.range(MS, 2 * ttl);
                answer = Answer::Transport { timed_out: true };
                fault = Some("lands late");
            } else if w.rng.chance(rates.lost) {
                answer = Answer::Transport { timed_out: true };
                fault = Some("answer lost");
            } else if w.rng.chance(rates.slow) {
                back = w.rng.range(MS, ttl / 2);
                fault = Some("slow answer");
            }
        }
        if let Some(kind) = fault {
            w.injected.add(kind);
        }
        let mut answer_at = match answer {
            Answer::Transport { timed_out: true } => deadline,
            _ => now + d1 + back,
        };
        let timed_out = answer_at >= deadline;
        answer_at = answer_at.min(deadline);
        let id = w.requests.len();
        let line = if w.trace.is_some() {
            describe_op(&op)
        } else {
            String::new()
        };
        let value = w.acting.get(&tid).copied();
        w.requests.push(Request {
            contender: c,
            value,
            op,
            sent: now,
            landed: None,
            called,
            deadline: asked,
            returned: None,
        });
        if effect {
            w.push(now + d1, Ev::Apply { id });
        }
        let fault_text = fault.map_or(String::new(), |f| format!(" FAULT {f};"));
        let clocks = if w.trace.is_some() {
            w.clocks(c)
        } else {
            String::new()
        };
        w.log(|| {
            format!(
                "c{c} sends #{id} {line};{fault_text} {} answer by {:.4} {clocks}",
                if effect {
                    format!("lands at {:.4},", super::world::secs(now + d1))
                } else {
                    "never lands,".to_string()
                },
                super::world::secs(answer_at)
            )
        });
        if m == "PUT" {
            w.put_answer.insert(tid, answer_at);
        }
        drop(w);
        self.sh.sleep_until(answer_at);
        let mut w = self.sh.lock();
        w.requests[id].returned = Some(w.sched.now);
        let landed = w.requests[id].landed.take();
        let result = match (answer, landed) {
            (Answer::Conflict, _) => Err(StoreError::new(StoreErrorKind::Conflict, m, key)
                .with_code("ConditionalRequestConflict")),
            (Answer::Result, Some(done)) if !timed_out => Ok(done),
            (Answer::Transport { timed_out: false }, _) if !timed_out => {
                Err(StoreError::new(StoreErrorKind::Transport, m, key)
                    .with_message("simulated 5xx or reset"))
            }
            _ => Err(StoreError::new(StoreErrorKind::Transport, m, key)
                .timed_out()
                .with_message("simulated timeout")),
        };
        let shown = match &result {
            Ok(done) => super::world::describe_done(done),
            Err(e) => format!(
                "{:?}{}",
                e.kind(),
                if e.is_timeout() { " (timed out)" } else { "" }
            ),
        };
        w.log(|| format!("c{c} answer to #{id}: {shown}"));
        result
    }
}

impl SimStore {
    /// The store breaking its contract, under the mutant `StoreSendsLate`
    /// only: now and then (by the seed) it takes longer than the deadline
    /// before sending, as the HTTP store did when a credentials refresh was
    /// slow, and the request then leaves late with its whole timeout. Takes
    /// the world, the call's instant and its deadline; gives back the world,
    /// the instant the request leaves and the end of its timeout.
    fn sends_late<'a>(
        &'a self,
        mut w: MutexGuard<'a, World>,
        now: Nanos,
        deadline: Nanos,
    ) -> (MutexGuard<'a, World>, Nanos, Nanos) {
        if !mutant::on(Mutant::StoreSendsLate) || !w.rng.chance(300) {
            return (w, now, deadline);
        }
        let timeout = deadline - now;
        let held = timeout + w.rng.range(MS, timeout + 2 * MS);
        w.injected.add("sent after its deadline");
        let c = self.c;
        w.log(|| {
            format!(
                "c{c} store: FAULT holds a request for {:.4} s before sending it (its deadline: {:.4})",
                super::world::secs(held),
                super::world::secs(deadline)
            )
        });
        drop(w);
        self.sh.sleep_until(now + held);
        let w = self.sh.lock();
        let sent = w.sched.now;
        (w, sent, sent + timeout)
    }
}

impl Store for SimStore {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.request(Op::Get(key.to_string()), deadline)?
            .into_get(key)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        let op = Op::Put(key.to_string(), body.to_vec(), options.clone());
        self.request(op, options.deadline)?.into_put(key)
    }

    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        self.request(Op::Delete(key.to_string(), mode.clone()), deadline)?
            .into_delete(key)
    }

    /// A keeper's warm-up takes simulated time, returning by `due`
    /// ([`super::driven::slow_warm_up`]); any other thread's, none.
    fn warm_up(&self, key: &str, due: Instant) {
        super::driven::slow_warm_up(&self.sh, self.c, key, due);
    }
}

/// Contender `c`'s clocks: true time on the monotonic clock, true time
/// plus the contender's skew (and drift) on the wall clock.
pub(crate) struct SimClock {
    pub(crate) sh: Arc<Shared>,
    pub(crate) c: usize,
}

impl fmt::Debug for SimClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimClock(c{})", self.c)
    }
}

thread_local! {
    /// The clocks as the scheduler froze them: the monotonic instant and
    /// each contender's wall clock (see [`with_frozen_clocks`]).
    static FROZEN: RefCell<Option<(Instant, Vec<SystemTime>)>> = const { RefCell::new(None) };
}

/// Run `f` on the scheduler's thread, which holds the world, with every
/// [`SimClock`] read on this thread answering `mono` and `walls` instead of
/// locking the world: so the checker can ask a `Lease` itself whether it
/// may write as a request lands.
pub(crate) fn with_frozen_clocks<T>(
    mono: Instant,
    walls: Vec<SystemTime>,
    f: impl FnOnce() -> T,
) -> T {
    FROZEN.with(|frozen| *frozen.borrow_mut() = Some((mono, walls)));
    let out = f();
    FROZEN.with(|frozen| *frozen.borrow_mut() = None);
    out
}

/// The clocks as [`with_frozen_clocks`] froze them on this thread, if it
/// did: the monotonic instant and contender `c`'s wall clock.
pub(crate) fn frozen(c: usize) -> Option<(Instant, SystemTime)> {
    FROZEN.with(|f| f.borrow().as_ref().map(|(m, w)| (*m, w[c])))
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        if let Some((mono, _)) = frozen(self.c) {
            return mono;
        }
        self.sh.lock().mono()
    }

    fn wall(&self) -> SystemTime {
        if let Some((_, wall)) = frozen(self.c) {
            return wall;
        }
        self.sh.lock().wall(self.c)
    }

    fn sleep(&self, duration: Duration) {
        let at = {
            let w = self.sh.lock();
            w.sched.now + u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX / 2)
        };
        self.sh.sleep_until(at);
    }

    fn timer(&self, at: Instant) -> Receiver<Instant> {
        let until = self.sh.lock().nanos_of(at);
        self.sh.sleep_until(until);
        let (tx, rx) = channel::bounded(1);
        let _ = tx.try_send(self.now());
        rx
    }

    fn jitter(&self, base: Duration) -> Duration {
        let permille = self.sh.lock().rng.range(500, 1500);
        base * u32::try_from(permille).unwrap_or(1000) / 1000
    }
}

/// The instance id contender `c` writes.
pub(crate) fn id(c: usize) -> String {
    instance_id(c)
}
