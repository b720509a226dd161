//! The state of one run: the contenders' clocks and faults, the store, the
//! requests in flight, the write windows seen, and the trace; and the
//! checks made as each request lands (no loss, pointers).

use super::rng::Rng;
use super::sched::{Ev, Nanos, Sched, SEC};
use super::values::{Value, ValueId};
use bucket_lease_core::memory::{MemoryStore, Misbehaviour};
use bucket_lease_core::record::LeaseRecord;
use bucket_lease_core::store::{
    DeleteMode, Object, PutOptions, Store, StoreError, StoreErrorKind, Version,
};
use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

/// The lease key every contender contends for.
pub(crate) const KEY: &str = "sim/LEASE";

/// The pointer every holder's command moves to the data object it wrote
/// last, through [`bucket_lease_core::FencedWriter::put_pointer`].
pub(crate) const POINTER: &str = "sim/LATEST";

/// The second key some programs (`program.rs`) also take, and its pointer.
pub(crate) const KEY_B: &str = "sim/b/LEASE";
pub(crate) const POINTER_B: &str = "sim/b/LATEST";

/// Every lease key the checkers watch: (key, its prefix, its pointer).
pub(crate) const WATCHED: [(&str, &str, &str); 2] =
    [(KEY, "sim", POINTER), (KEY_B, "sim/b", POINTER_B)];

/// `key` as a watched lease key, if it is one.
pub(crate) fn watched(key: &str) -> Option<&'static str> {
    WATCHED.iter().map(|(k, _, _)| *k).find(|k| *k == key)
}

/// `key` as a watched pointer, if it is one.
fn pointer(key: &str) -> Option<&'static str> {
    WATCHED.iter().map(|(_, _, p)| *p).find(|p| *p == key)
}

/// The instance id of the dead holder whose suspect record some runs
/// start with.
pub(crate) const GHOST: &str = "ghost";

/// The kind of window of a command alive under the lease.
pub(crate) const COMMAND: &str = "command alive";

/// One contender's clocks, faults and life.
#[derive(Debug)]
pub(crate) struct Contender {
    pub(crate) ttl_s: u64,
    /// Wall clock minus true time, in milliseconds, and its rate error in
    /// parts per million.
    pub(crate) skew_ms: i64,
    pub(crate) drift_ppm: i64,
    pub(crate) pauses: Vec<(Nanos, Nanos)>,
    pub(crate) partitions: Vec<(Nanos, Nanos)>,
    pub(crate) crashed: bool,
    pub(crate) threads: Vec<usize>,
    /// No faults, pauses or partitions of its own (the pool's contender).
    pub(crate) quiet: bool,
    /// A program process (`program.rs`): it holds leases without a
    /// command.
    pub(crate) program: bool,
    /// The window of the command now running, if any.
    pub(crate) command: Option<usize>,
    /// The window of the command's write in flight, if any, and the
    /// writer's thread.
    pub(crate) writing: Option<(usize, usize)>,
}

/// A write window: `may_write()` at a write's send through its answer, or
/// a command alive under `run`'s plan; of one `Lease` value on one key.
#[derive(Debug, Clone)]
pub(crate) struct Window {
    pub(crate) contender: usize,
    pub(crate) value: ValueId,
    pub(crate) key: &'static str,
    pub(crate) epoch: u64,
    pub(crate) what: &'static str,
    /// The thread that opened it: a write's ends with the answer to that
    /// thread's last PUT.
    pub(crate) thread: usize,
    pub(crate) start: Nanos,
    pub(crate) end: Option<Nanos>,
}

/// A request to the store.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Get(String),
    Put(String, Vec<u8>, PutOptions),
    Delete(String, DeleteMode),
}

/// What the store did with a request when it landed.
#[derive(Debug, Clone)]
pub(crate) enum Done {
    Get(Result<Object, StoreError>),
    Put(Result<Version, StoreError>),
    Delete(Result<(), StoreError>),
}

/// A request in flight or answered.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) contender: usize,
    /// The `Lease` value its thread acted for, if any (see `values.rs`).
    pub(crate) value: Option<ValueId>,
    pub(crate) op: Op,
    /// When it left for the store.
    pub(crate) sent: Nanos,
    pub(crate) landed: Option<Done>,
    /// When its caller called the store, the caller's deadline (none when
    /// it gave none), and when the call returned (none while it has not).
    pub(crate) called: Nanos,
    pub(crate) deadline: Option<Nanos>,
    pub(crate) returned: Option<Nanos>,
}

/// How strongly each fault is injected in this run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rates {
    /// Per request, in parts per 10,000.
    pub(crate) drop: u64,
    pub(crate) fail: u64,
    pub(crate) conflict: u64,
    pub(crate) late: u64,
    pub(crate) lost: u64,
    pub(crate) slow: u64,
}

/// Faults injected, by kind, for the summary.
#[derive(Debug, Default, Clone)]
pub(crate) struct Injected {
    pub(crate) counts: std::collections::BTreeMap<&'static str, u64>,
}

impl Injected {
    pub(crate) fn add(&mut self, kind: &'static str) {
        *self.counts.entry(kind).or_default() += 1;
    }
}

/// One run's world.
#[derive(Debug)]
pub(crate) struct World {
    pub(crate) sched: Sched,
    pub(crate) rng: Rng,
    /// The keepers' warm-ups' draws (`driven.rs`), a generator of their
    /// own: warm-ups leave every other draw of a seed as it was.
    pub(crate) warm_up_rng: Rng,
    pub(crate) base: Instant,
    pub(crate) wall0: SystemTime,
    pub(crate) ttl_s: u64,
    pub(crate) contenders: Vec<Contender>,
    pub(crate) store: MemoryStore,
    pub(crate) switch: Option<Misbehaviour>,
    pub(crate) rates: Rates,
    /// Faults start here (a suspect run's quiet start, until the suspect
    /// record's takeover is due) and stop here (a crash run's quiet period
    /// after the crash).
    pub(crate) faults_from: Nanos,
    pub(crate) faults_until: Nanos,
    /// The suspect record the run started with (a dead holder's, stamped
    /// far ahead or with an absurd TTL), if any.
    pub(crate) suspect: Option<LeaseRecord>,
    /// The highest epoch each pointer has carried, and how many of their
    /// states were checked.
    pub(crate) pointer_epochs: HashMap<&'static str, u64>,
    pub(crate) pointer_checks: u64,
    pub(crate) requests: Vec<Request>,
    pub(crate) windows: Vec<Window>,
    /// (when, contender, epoch, key) of every lease handed out.
    pub(crate) grants: Vec<(Nanos, usize, u64, &'static str)>,
    /// When the holder crashed, the record's TTL, and who it was.
    pub(crate) crash: Option<(Nanos, u64, usize)>,
    /// When each lease body was first sent.
    pub(crate) first_sent: HashMap<Vec<u8>, Nanos>,
    /// The last instant a request sent before the crash landed.
    pub(crate) last_landing_before_crash: Nanos,
    pub(crate) violations: Vec<String>,
    pub(crate) injected: Injected,
    pub(crate) trace: Option<Vec<String>>,
    /// The put answer time of each thread's last PUT.
    pub(crate) put_answer: HashMap<usize, Nanos>,
    /// Every request on this key hangs until its deadline.
    pub(crate) black_hole: Option<String>,
    /// The pool run's set-up and what it saw, in a pool run.
    pub(crate) pool: Option<super::pooled::PoolRun>,
    /// Keeper events waiting for each contender's supervisor.
    pub(crate) events: HashMap<usize, Vec<bucket_lease_core::keeper::Event>>,
    /// In a shared-name run, (owner, namesake): the namesake contender, a
    /// process of its own, is configured with the owner's instance id.
    pub(crate) shared_name: Option<(usize, usize)>,
    /// Every `Lease` value drawn, which one each simulated thread acts
    /// for, and which one wrote each watched key's record (`values.rs`).
    pub(crate) values: Vec<Value>,
    pub(crate) acting: HashMap<usize, ValueId>,
    pub(crate) record_writer: HashMap<&'static str, ValueId>,
    /// What the programs drew, by kind (`program.rs`).
    pub(crate) drawn: Injected,
    /// R2's limit, in a run that has it: one accepted write of a key per
    /// this long; a write within it is answered 429 and takes no effect.
    /// The contenders' stores know it and space their writes
    /// (`env::store_of`).
    pub(crate) write_limit: Option<Nanos>,
    /// When each key's last write was accepted, under `write_limit`.
    pub(crate) last_write: HashMap<String, Nanos>,
}

/// Seconds, for the trace.
pub(crate) fn secs(t: Nanos) -> f64 {
    t as f64 / SEC as f64
}

impl World {
    /// Add a line to the trace, when tracing (and the run is not over:
    /// see `SimStore::request`).
    pub(crate) fn log(&mut self, line: impl FnOnce() -> String) {
        if self.trace.is_some() && !self.sched.over {
            let now = self.sched.now;
            let text = line();
            if let Some(trace) = self.trace.as_mut() {
                trace.push(format!("{:>10.4}  {text}", secs(now)));
            }
        }
    }

    /// Record a violation (and trace it).
    pub(crate) fn violation(&mut self, what: String) {
        let at = secs(self.sched.now);
        self.log(|| format!("VIOLATION {what}"));
        self.violations.push(format!("at {at:.4} s: {what}"));
    }

    /// Contender `c`'s monotonic clock now.
    pub(crate) fn mono(&self) -> Instant {
        self.base + Duration::from_nanos(self.sched.now)
    }

    /// True time of a monotonic instant.
    pub(crate) fn nanos_of(&self, at: Instant) -> Nanos {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Contender `c`'s wall clock now.
    pub(crate) fn wall(&self, c: usize) -> SystemTime {
        let k = &self.contenders[c];
        let t = self.sched.now as i128;
        let off = t + t * i128::from(k.drift_ppm) / 1_000_000 + i128::from(k.skew_ms) * 1_000_000;
        let off = i64::try_from(off).unwrap_or(0);
        if off >= 0 {
            self.wall0 + Duration::from_nanos(off.unsigned_abs())
        } else {
            self.wall0 - Duration::from_nanos(off.unsigned_abs())
        }
    }

    /// Contender `c`'s clocks now, for the trace: the monotonic clock runs
    /// at true time; the wall clock is off by its skew and drift.
    pub(crate) fn clocks(&self, c: usize) -> String {
        let wall = self.wall(c);
        let truth = self.wall0 + Duration::from_nanos(self.sched.now);
        let off = match wall.duration_since(truth) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        };
        format!("[c{c} wall {off:+.3} s]")
    }

    /// The instant `c`'s pause ends, when `c` is paused at `at`.
    pub(crate) fn paused_until(&self, c: usize, at: Nanos) -> Option<Nanos> {
        self.contenders[c]
            .pauses
            .iter()
            .find(|(from, to)| *from <= at && at < *to)
            .map(|(_, to)| *to)
    }

    /// Nothing blocks past its deadline: a call of `c`'s that began at
    /// `began` with `deadline` must have returned by it, unless `c` was
    /// paused meanwhile (a paused process returns late, whatever it does).
    pub(crate) fn returned_by(&mut self, c: usize, what: &str, began: Nanos, deadline: Nanos) {
        let now = self.sched.now;
        let paused = self.contenders[c]
            .pauses
            .iter()
            .any(|(from, to)| *from < now && *to > began);
        if now > deadline && !paused {
            self.violation(format!(
                "deadline: c{c}'s {what} began at {:.4} s returned at {:.4} s, past its \
                 deadline {:.4} s",
                secs(began),
                secs(now),
                secs(deadline)
            ));
        }
    }

    /// Whether `c` is cut off from the store at `at`.
    pub(crate) fn partitioned(&self, c: usize, at: Nanos) -> bool {
        self.contenders[c]
            .partitions
            .iter()
            .any(|(from, to)| *from <= at && at < *to)
    }

    /// Open a window of value `value` on `key`; its index.
    pub(crate) fn open(
        &mut self,
        value: ValueId,
        key: &'static str,
        epoch: u64,
        what: &'static str,
    ) -> usize {
        let start = self.sched.now;
        let c = self.values[value].contender;
        self.log(|| format!("c{c} window opens: v{value} {what} on {key}, epoch {epoch}"));
        self.windows.push(Window {
            contender: c,
            value,
            key,
            epoch,
            what,
            thread: super::sched::current(),
            start,
            end: None,
        });
        self.windows.len() - 1
    }

    /// Close window `i` at `at`.
    pub(crate) fn close(&mut self, i: usize, at: Nanos) {
        if self.windows[i].end.is_none() {
            self.windows[i].end = Some(at.max(self.windows[i].start));
            let w = self.windows[i].clone();
            self.log(|| {
                format!(
                    "c{} window closes: v{} {}, epoch {} (ends {:.4})",
                    w.contender,
                    w.value,
                    w.what,
                    w.epoch,
                    secs(at)
                )
            });
        }
    }

    /// End contender `c`'s command at `t`: its window closes, and so does
    /// the window of its write call in flight, at `t` or at the answer of
    /// the call's last PUT when that came earlier.
    pub(crate) fn command_dies(&mut self, c: usize, t: Nanos) {
        if let Some(i) = self.contenders[c].command.take() {
            self.close(i, t);
        }
        if let Some((i, tid)) = self.contenders[c].writing.take() {
            // A call that sent no PUT yet wrote nothing: an empty window.
            let answered = self
                .put_answer
                .get(&tid)
                .copied()
                .unwrap_or(self.windows[i].start);
            self.close(i, t.min(answered));
        }
    }

    /// Request `id` lands: the store does it, and the landing is checked.
    pub(crate) fn apply(&mut self, id: usize) {
        let (c, op, sent) = {
            let r = &self.requests[id];
            (r.contender, r.op.clone(), r.sent)
        };
        if self.crash.is_some_and(|(t, _, _)| sent < t) {
            self.last_landing_before_crash = self.last_landing_before_crash.max(self.sched.now);
        }
        let key = watched(key_of(&op));
        let before = key.and_then(|k| self.store.peek(k));
        let done = match (&op, self.turned_away(&op)) {
            (Op::Get(key), _) => Done::Get(self.store.get(key, None)),
            (Op::Put(..), Some(throttled)) => Done::Put(Err(throttled)),
            (Op::Delete(..), Some(throttled)) => Done::Delete(Err(throttled)),
            (Op::Put(key, body, options), None) => {
                let mut options = options.clone();
                options.deadline = None;
                Done::Put(self.store.put(key, body, &options))
            }
            (Op::Delete(key, mode), None) => Done::Delete(self.store.delete(key, mode, None)),
        };
        let accepted = match &done {
            Done::Put(answer) => answer.is_ok(),
            Done::Delete(answer) => answer.is_ok(),
            Done::Get(_) => false,
        };
        if accepted && self.write_limit.is_some() {
            let now = self.sched.now;
            self.last_write.insert(key_of(&op).to_string(), now);
        }
        let after = key.and_then(|k| self.store.peek(k));
        self.log(|| {
            format!(
                "   store: request #{id} of c{c} lands: {}",
                describe_done(&done)
            )
        });
        if let Some(key) = key.filter(|_| before != after) {
            self.check_replacement(c, key, before.as_deref(), after.as_deref());
            self.check_own_values(id, key, after.as_deref());
        }
        if let Some(pointer) = pointer(key_of(&op)) {
            self.check_pointer(c, id, pointer);
        }
        self.requests[id].landed = Some(done);
    }

    /// The throttled answer to a write `op` that R2's limit turns away (the
    /// key's last accepted write less than `write_limit` ago), if any.
    fn turned_away(&mut self, op: &Op) -> Option<StoreError> {
        let limit = self.write_limit?;
        if matches!(op, Op::Get(_)) {
            return None;
        }
        let key = key_of(op);
        let open = self.last_write.get(key)? + limit;
        let now = self.sched.now;
        if now >= open {
            return None;
        }
        self.injected.add("429: R2's write limit");
        let method = if matches!(op, Op::Put(..)) {
            "PUT"
        } else {
            "DELETE"
        };
        Some(
            StoreError::new(StoreErrorKind::Transport, method, key)
                .answered()
                .throttled(Some(Duration::from_nanos(open - now)))
                .with_code("TooManyRequests"),
        )
    }

    /// No loss: a record is removed or replaced only by the holder it names,
    /// or by a takeover of a record stale on true time (allowing for the
    /// clocks' disagreement).
    fn check_replacement(
        &mut self,
        c: usize,
        key: &str,
        before: Option<&[u8]>,
        after: Option<&[u8]>,
    ) {
        let Some(before) = before else { return };
        if let Some(after) = after {
            self.first_sent
                .entry(after.to_vec())
                .or_insert(self.sched.now);
        }
        if matches!(
            self.switch,
            Some(
                Misbehaviour::IgnoreIfNoneMatch
                    | Misbehaviour::IgnoreIfMatch
                    | Misbehaviour::CreateOnIfMatchAbsent
            )
        ) {
            // A store that ignores write conditions can lose anything; the
            // lease must fail closed there instead (checked on grants).
            return;
        }
        let Some(rec) = LeaseRecord::parse(before) else {
            return;
        };
        if rec.is_released() || self.written_by(&rec, c) {
            return;
        }
        if rec.instance_id == GHOST {
            // The suspect record is taken over by design once it sat
            // unchanged for its watch (its liveness is checked in
            // `check.rs`); never before that watch, on true time.
            let watch = rec.suspect_watch_s(self.ttl_s) * SEC;
            if self.sched.now < watch {
                self.violation(format!(
                    "no loss: c{c} took over the suspect record of {GHOST} after {:.4} s, before \
                     its watch of {} s",
                    secs(self.sched.now),
                    watch / SEC
                ));
            }
            return;
        }
        let sent = self.first_sent.get(before).copied().unwrap_or(0);
        let skew_room = self.ttl_s * SEC / 3;
        let stale_at = sent
            .saturating_add(rec.ttl_s.saturating_mul(SEC))
            .saturating_sub(skew_room);
        if self.sched.now < stale_at {
            let how = if after.is_some() {
                "replaced"
            } else {
                "removed"
            };
            self.violation(format!(
                "no loss: c{c} {how} the live record on {key} of {} (nonce {}, epoch {}, ttl {} \
                 s, sent at {:.4} s)",
                rec.instance_id,
                rec.instance_nonce.as_deref().unwrap_or("none"),
                rec.epoch,
                rec.ttl_s,
                secs(sent)
            ));
        }
    }

    /// Every state of a pointer a reader could see (checked as each
    /// request on it lands): it names a data object that exists and was
    /// written at the pointer's epoch or later, and its epoch never goes
    /// back.
    fn check_pointer(&mut self, c: usize, id: usize, key: &'static str) {
        let Ok(pointer) = self.store.get(key, None) else {
            return;
        };
        self.pointer_checks += 1;
        let epoch = epoch_of(&pointer);
        let named = String::from_utf8_lossy(&pointer.body).into_owned();
        let data_epoch = self.store.get(&named, None).ok().map(|o| epoch_of(&o));
        let problem = match data_epoch {
            None => Some(format!("names {named}, which does not exist")),
            Some(e) if e < epoch => Some(format!("names {named}, written at epoch {e}")),
            _ if epoch < self.pointer_epochs.get(key).copied().unwrap_or(0) => Some(format!(
                "went back from epoch {} (names {named})",
                self.pointer_epochs[key]
            )),
            _ => None,
        };
        if let Some(problem) = problem {
            self.violation(format!(
                "pointer: after request #{id} of c{c} the pointer {key} at epoch {epoch} \
                 {problem}"
            ));
        }
        let highest = self.pointer_epochs.entry(key).or_insert(0);
        *highest = (*highest).max(epoch);
    }

    /// Whoever holds the lease now crashes: no more steps, never a
    /// release; its command (or its write in flight) dies with it.
    pub(crate) fn crash_holder(&mut self) {
        let now = self.sched.now;
        let running = |c: usize| !self.contenders[c].crashed && self.paused_until(c, now).is_none();
        // The holder: the running command of the highest epoch (a paused
        // contender may still run a command under an older lease)...
        let command = (0..self.contenders.len())
            .filter(|&c| running(c))
            .filter_map(|c| {
                self.contenders[c]
                    .command
                    .map(|i| (self.windows[i].epoch, c))
            })
            .max();
        // ... unless a program process, which holds without a command,
        // holds the live record on the key (a `Lease` of its wrote it and
        // lives) at a higher epoch.
        let program = self
            .record_writer
            .get(KEY)
            .filter(|&&v| self.is_live(v))
            .map(|&v| self.values[v].contender)
            .filter(|&c| self.contenders[c].program && running(c))
            .and_then(|c| {
                let rec = LeaseRecord::parse(&self.store.peek(KEY)?)?;
                (!rec.is_released()).then_some((rec.epoch, c))
            });
        let holder = match (command, program) {
            (Some(command), Some(program)) => Some(command.max(program)),
            (command, program) => command.or(program),
        };
        let Some((_, c)) = holder else {
            self.log(|| "crash: nobody holds the lease".to_string());
            return;
        };
        self.contenders[c].crashed = true;
        let ttl = self.contenders[c].ttl_s;
        self.crash = Some((now, ttl, c));
        self.last_landing_before_crash = now;
        self.injected.add("crash");
        self.log(|| format!("c{c} CRASHES (holder; never releases)"));
        self.command_dies(c, now);
        for i in 0..self.windows.len() {
            if self.windows[i].contender == c {
                let end = self.window_end(i, now);
                self.close(i, end);
            }
        }
    }

    /// Contender `c`'s wall clock steps.
    pub(crate) fn step_wall(&mut self, c: usize, skew_ms: i64) {
        let old = self.contenders[c].skew_ms;
        self.contenders[c].skew_ms = skew_ms;
        self.injected.add("wall clock step");
        self.log(|| format!("c{c} wall clock steps from {old:+} ms to {skew_ms:+} ms"));
    }

    /// The run is over: close what is open.
    pub(crate) fn finish(&mut self) {
        let now = self.sched.now;
        for c in 0..self.contenders.len() {
            self.command_dies(c, now);
        }
        for i in 0..self.windows.len() {
            let end = self.window_end(i, now);
            self.close(i, end);
        }
    }

    /// Where window `i`, still open, ends when its thread stops at `t`: a
    /// command's at `t`; a write's at the answer of its last PUT, if that
    /// came earlier (none sent: it wrote nothing, an empty window).
    fn window_end(&self, i: usize, t: Nanos) -> Nanos {
        let x = &self.windows[i];
        if x.what == COMMAND {
            return t;
        }
        let answered = self.put_answer.get(&x.thread).copied();
        t.min(answered.unwrap_or(x.start))
    }

    /// Queue an event.
    pub(crate) fn push(&mut self, at: Nanos, ev: Ev) {
        self.sched.push(at, ev);
    }
}

/// Who each simulated process is. A process is its contender index: its
/// instance id is the one it is configured with (in a shared-name run two
/// processes share one), and its nonce is its own, as a process start's.
impl World {
    /// The instance id contender `c` is configured with.
    pub(crate) fn name_of(&self, c: usize) -> String {
        match self.shared_name {
            Some((owner, namesake)) if namesake == c => instance_id(owner),
            _ => instance_id(c),
        }
    }

    /// Whether `rec` was written by contender `c`'s process: its instance
    /// id and its nonce both. Compared here, not through the lease's own
    /// test, so that a mutant of that test cannot blind the checker.
    fn written_by(&self, rec: &LeaseRecord, c: usize) -> bool {
        rec.instance_id == self.name_of(c) && rec.instance_nonce.as_deref() == Some(&nonce_of(c))
    }
}

/// The process nonce of contender `c`: every simulated process its own
/// (the real one, drawn from the operating system, is shared by all of
/// them, and would not replay).
pub(crate) fn nonce_of(c: usize) -> String {
    format!("sim-process-{c}")
}

/// The key a request names.
pub(crate) fn key_of(op: &Op) -> &str {
    match op {
        Op::Get(k) | Op::Put(k, ..) | Op::Delete(k, _) => k,
    }
}

/// The epoch a fenced write stored in `object`'s metadata (0: none).
fn epoch_of(object: &Object) -> u64 {
    object
        .metadata
        .iter()
        .find(|(name, _)| name == bucket_lease_core::fence::EPOCH_METADATA)
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0)
}

/// The instance id of contender `c`.
pub(crate) fn instance_id(c: usize) -> String {
    format!("c{c}")
}

/// A short description of what the store did.
pub(crate) fn describe_done(done: &Done) -> String {
    fn body(o: &Object) -> String {
        match LeaseRecord::parse(&o.body) {
            Some(r) => format!(
                "{} epoch {}{}",
                r.instance_id,
                r.epoch,
                if r.is_released() { " released" } else { "" }
            ),
            None => format!("{} bytes", o.body.len()),
        }
    }
    match done {
        Done::Get(Ok(o)) => format!("GET ok ({}, {:?})", body(o), o.version.etag),
        Done::Get(Err(e)) => format!("GET {:?}", e.kind()),
        Done::Put(Ok(v)) => format!("PUT ok ({:?})", v.etag),
        Done::Put(Err(e)) => format!("PUT {:?}", e.kind()),
        Done::Delete(Ok(())) => "DELETE ok".to_string(),
        Done::Delete(Err(e)) => format!("DELETE {:?}", e.kind()),
    }
}
