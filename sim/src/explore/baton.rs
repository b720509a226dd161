//! One execution: the processes' real code on OS threads that run one at
//! a time under a baton, and the scheduler that, each time a process
//! blocks (a store request, a sleep), asks the chooser what happens next:
//! which process goes on, what becomes of its request, or which request
//! in flight lands late.
//!
//! Time is simulated true time, one clock for the world, and moves only
//! here: a request that lands or fails at once takes [`ROUND_TRIP`]; the
//! end of a timeout or a sleep moves time to its instant. An event may
//! come next only when that keeps every other process's promises (see
//! `State::step`): a pending request must still be answerable by its
//! deadline (and, before faults are allowed, within one round trip of its
//! call), and a timeout or a sleep ends at its instant. Among the events
//! that may come next, the first option is the earliest, the process that
//! ran last first on a tie; taking another is a preemption, and counts
//! against the bound. A request landing late may come at any later event,
//! at no cost beyond its fault.

use super::dfs::Chooser;
use super::Bounds;
use crate::sched::{Nanos, SEC};
use crate::world::{describe_done, Done, Op, Request, World, KEY};
use bucket_lease_core::mutant::{self, Mutant};
use bucket_lease_core::store::{StoreError, StoreErrorKind};
use std::panic::resume_unwind;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// The round trip of a request that lands and is answered.
const ROUND_TRIP: Nanos = 1_000_000;

/// A call without a deadline, or with one further off, is cut here (as
/// the seeded simulation's store does).
const LONGEST_CALL: Nanos = 30 * SEC;

/// The most events one execution may take: more is a process that does
/// not finish, reported as a violation.
const MAX_STEPS: u64 = 400;

/// What becomes of one request: a choice at each request sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// It lands and its answer arrives one round trip later.
    Lands,
    /// It lands; its answer is lost, and the caller times out at its
    /// deadline.
    AnswerLost,
    /// It never lands; the caller times out at its deadline.
    NeverLands,
    /// It lands later, after at least one more event (any later one the
    /// search picks); the caller times out at its deadline.
    LandsLate,
    /// A 5xx at once; nothing landed. (The lease reads again after it,
    /// where a timeout at the deadline leaves no room to.)
    Fails,
    /// Under the mutant `store-sends-late` only: the store holds the
    /// request past its deadline before sending it.
    SentLate,
}

impl Fate {
    fn name(self) -> &'static str {
        match self {
            Fate::Lands => "lands",
            Fate::AnswerLost => "answer lost",
            Fate::NeverLands => "never lands",
            Fate::LandsLate => "lands late",
            Fate::Fails => "5xx",
            Fate::SentLate => "sent after its deadline",
        }
    }
}

/// What a blocked process gets when it goes on.
#[derive(Debug)]
enum Answer {
    /// Its sleep ended, or it starts.
    Woken,
    /// Its store call's result.
    Store(Result<Done, StoreError>),
}

/// Where one process is.
#[derive(Debug)]
enum Proc {
    /// Not started.
    Start,
    /// Running its code: it holds the baton.
    Running,
    /// In a store call whose request is not sent yet.
    Calling {
        op: Op,
        called: Nanos,
        deadline: Nanos,
        asked: Option<Nanos>,
    },
    /// Blocked until `until`, then given `answer` (of request `id`).
    Waiting {
        until: Nanos,
        answer: Answer,
        id: Option<usize>,
    },
    /// Given `answer`, to take when it runs.
    Ready(Answer),
    /// Its program is over.
    Done,
}

/// What one scheduling step did.
enum Stepped {
    /// Process `q` has its answer and goes on.
    Resume(usize),
    /// Time or the store moved; nobody goes on yet.
    Quiet,
    /// Nothing is left to happen.
    Finished,
    /// The execution took too many steps.
    Over,
}

/// The payload a process unwinds with when the execution is abandoned.
pub(crate) struct Abandoned;

/// The world, the choices and the processes of one execution.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) w: World,
    pub(crate) chooser: Chooser,
    bounds: Bounds,
    spent: Bounds,
    procs: Vec<Proc>,
    /// The process that ran last.
    current: Option<usize>,
    /// The process holding the baton (`None`: the driver).
    running: Option<usize>,
    /// Requests that land late: id, and the step they were sent at.
    late: Vec<(usize, u64)>,
    pub(crate) steps: u64,
    finished: bool,
    over: bool,
}

/// The state behind its lock, with a condition variable per process and
/// one for the driver.
#[derive(Debug)]
pub(crate) struct Exec {
    m: Mutex<State>,
    cvs: Vec<Condvar>,
    main: Condvar,
}

impl Exec {
    /// An execution of `processes` processes on `w`, replaying `chooser`.
    pub(crate) fn new(w: World, chooser: Chooser, bounds: Bounds, processes: usize) -> Exec {
        let state = State {
            w,
            chooser,
            bounds,
            spent: Bounds::default(),
            procs: (0..processes).map(|_| Proc::Start).collect(),
            current: None,
            running: None,
            late: Vec::new(),
            steps: 0,
            finished: false,
            over: false,
        };
        Exec {
            m: Mutex::new(state),
            cvs: (0..processes).map(|_| Condvar::new()).collect(),
            main: Condvar::new(),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run the execution from the driver's thread until nothing is left
    /// to happen (or it is abandoned).
    pub(crate) fn drive(&self) {
        let mut s = self.pass(self.lock(), None);
        while !s.finished && !s.over {
            s = self.main.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Process `p`'s thread waits for its first turn; false when the
    /// execution was abandoned first.
    pub(crate) fn begin(&self, p: usize) -> bool {
        let mut s = self.lock();
        while s.running != Some(p) && !s.over {
            s = self.cvs[p].wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.procs[p] = Proc::Running;
        !s.over
    }

    /// Process `p`'s program is over: hand the baton on.
    pub(crate) fn end(&self, p: usize) {
        let mut s = self.lock();
        s.procs[p] = Proc::Done;
        drop(self.pass(s, Some(p)));
    }

    /// Process `p` sends `op` to the store, with `deadline`; its answer.
    pub(crate) fn request(
        &self,
        p: usize,
        op: Op,
        deadline: Option<Instant>,
    ) -> Result<Done, StoreError> {
        let mut s = self.lock();
        let now = s.w.sched.now;
        let asked = deadline.map(|d| s.w.nanos_of(d));
        let limit = asked.map_or(now + LONGEST_CALL, |d| d.min(now + LONGEST_CALL));
        if limit <= now {
            let line = crate::env::describe_op(&op);
            s.w.log(|| format!("c{p} {line}: deadline already passed, not sent"));
            return Err(timeout(&op));
        }
        s.procs[p] = Proc::Calling {
            op,
            called: now,
            deadline: limit,
            asked,
        };
        match self.block(s, p) {
            Answer::Store(result) => result,
            Answer::Woken => Err(timeout(&Op::Get(KEY.to_string()))),
        }
    }

    /// Process `p` sleeps until `at`.
    pub(crate) fn sleep_until(&self, p: usize, at: Nanos) {
        let mut s = self.lock();
        let at = at.max(s.w.sched.now);
        s.procs[p] = Proc::Waiting {
            until: at,
            answer: Answer::Woken,
            id: None,
        };
        let _ = self.block(s, p);
    }

    /// Process `p` is blocked as `s.procs[p]` says: schedule until it has
    /// its answer, and take it.
    fn block(&self, s: MutexGuard<'_, State>, p: usize) -> Answer {
        let mut s = self.pass(s, Some(p));
        if s.over {
            drop(s);
            resume_unwind(Box::new(Abandoned));
        }
        match std::mem::replace(&mut s.procs[p], Proc::Running) {
            Proc::Ready(answer) => answer,
            _ => Answer::Woken,
        }
    }

    /// Schedule steps from the thread of `me` (`None`: the driver) until
    /// `me` has its answer, hands the baton to another process, or
    /// nothing is left.
    fn pass<'a>(
        &'a self,
        mut s: MutexGuard<'a, State>,
        me: Option<usize>,
    ) -> MutexGuard<'a, State> {
        loop {
            if s.over {
                return s;
            }
            if me.is_some_and(|p| matches!(s.procs[p], Proc::Ready(_))) {
                return s;
            }
            match s.step() {
                Stepped::Quiet => {}
                Stepped::Resume(q) if Some(q) == me => {}
                Stepped::Resume(q) => {
                    s.running = Some(q);
                    self.cvs[q].notify_one();
                    let Some(p) = me.filter(|&p| !matches!(s.procs[p], Proc::Done)) else {
                        return s;
                    };
                    while s.running != Some(p) && !s.over {
                        s = self.cvs[p].wait(s).unwrap_or_else(|e| e.into_inner());
                    }
                }
                Stepped::Finished => {
                    s.finished = true;
                    self.main.notify_one();
                    return s;
                }
                Stepped::Over => {
                    s.over = true;
                    for cv in &self.cvs {
                        cv.notify_all();
                    }
                    self.main.notify_one();
                    return s;
                }
            }
        }
    }
}

impl State {
    /// A choice point of wall-clock steps, before process `p`'s next call:
    /// while the bound allows, none, forward by a sixth of the TTL, or
    /// back by as much.
    pub(crate) fn clock_step(&mut self, p: usize) {
        if self.spent.clock_steps >= self.bounds.clock_steps {
            return;
        }
        let k = self.chooser.pick(3);
        if k == 0 {
            return;
        }
        self.spent.clock_steps += 1;
        let step = i64::try_from(self.w.ttl_s * 1000 / 6).unwrap_or(0);
        let skew = self.w.contenders[p].skew_ms + if k == 1 { step } else { -step };
        self.w.step_wall(p, skew);
    }

    /// One step: what happens next, as the chooser says.
    fn step(&mut self) -> Stepped {
        if self.steps >= MAX_STEPS {
            let steps = self.steps;
            self.w.violation(format!(
                "the execution took {steps} steps and was abandoned: a process does not finish"
            ));
            return Stepped::Over;
        }
        let now = self.w.sched.now;
        let quiet_until = self.w.faults_from;
        // Each blocked process: when it could go on, how long its step
        // takes at most, and the latest instant its next event may come.
        // A request is answered by its deadline (while faults are allowed,
        // other events may come first: a slow answer), or one round trip
        // after its call (before).
        let blocked: Vec<(usize, Nanos, Nanos, Nanos)> = self
            .procs
            .iter()
            .enumerate()
            .filter_map(|(p, proc)| match proc {
                Proc::Start => Some((p, now, 0, Nanos::MAX)),
                Proc::Calling {
                    called, deadline, ..
                } => {
                    let latest = if *called >= quiet_until {
                        deadline.saturating_sub(ROUND_TRIP)
                    } else {
                        called + ROUND_TRIP
                    };
                    Some((p, now.max(*called), ROUND_TRIP, latest))
                }
                Proc::Waiting { until, .. } => Some((p, now.max(*until), 0, *until)),
                _ => None,
            })
            .collect();
        let mut may_go: Vec<(usize, Nanos)> = blocked
            .iter()
            .filter(|(q, start, takes, _)| {
                blocked
                    .iter()
                    .all(|(p, _, _, latest)| p == q || start + takes <= *latest)
            })
            .map(|(q, start, _, _)| (*q, *start))
            .collect();
        if may_go.is_empty() {
            // Events due within a round trip of each other: the most
            // urgent goes.
            may_go.extend(
                blocked
                    .iter()
                    .min_by_key(|(p, _, _, latest)| (*latest, *p))
                    .map(|(p, start, _, _)| (*p, *start)),
            );
        }
        may_go.sort_by_key(|(q, start)| (*start, Some(*q) != self.current, *q));
        if self.spent.preemptions >= self.bounds.preemptions {
            may_go.truncate(1);
        }
        // A late request lands after at least one more event, or at once
        // when no process is left to make one.
        let landings: Vec<usize> = (0..self.late.len())
            .filter(|&i| self.late[i].1 < self.steps || blocked.is_empty())
            .collect();
        let options = may_go.len() + landings.len();
        if options == 0 {
            return Stepped::Finished;
        }
        let k = self.chooser.pick(options);
        self.steps += 1;
        if k >= may_go.len() {
            // It lands now: the store does it, and the world checks it.
            let (id, _) = self.late.remove(landings[k - may_go.len()]);
            self.w.apply(id);
            return Stepped::Quiet;
        }
        if k > 0 {
            self.spent.preemptions += 1;
        }
        let (q, start) = may_go[k];
        self.w.sched.now = start;
        self.current = Some(q);
        match std::mem::replace(&mut self.procs[q], Proc::Running) {
            Proc::Waiting { answer, id, .. } => {
                self.answer(q, answer, id);
                Stepped::Resume(q)
            }
            Proc::Calling {
                op,
                called,
                deadline,
                asked,
            } => self.send(q, op, called, deadline, asked),
            _ => {
                self.procs[q] = Proc::Ready(Answer::Woken);
                Stepped::Resume(q)
            }
        }
    }

    /// Send process `q`'s request now, its fate chosen.
    fn send(
        &mut self,
        q: usize,
        op: Op,
        called: Nanos,
        deadline: Nanos,
        asked: Option<Nanos>,
    ) -> Stepped {
        let now = self.w.sched.now;
        if now >= deadline {
            // Only where two events were due within a round trip: the
            // store sends nothing after the deadline.
            self.w
                .log(|| format!("c{q}: deadline passed before its request was sent"));
            let answer = Answer::Store(Err(timeout(&op)));
            self.answer(q, answer, None);
            return Stepped::Resume(q);
        }
        let mut fates = match op {
            Op::Get(_) => vec![Fate::Lands, Fate::NeverLands, Fate::Fails],
            _ => vec![
                Fate::Lands,
                Fate::AnswerLost,
                Fate::NeverLands,
                Fate::LandsLate,
                Fate::Fails,
            ],
        };
        if mutant::on(Mutant::StoreSendsLate) {
            fates.push(Fate::SentLate);
        }
        if self.spent.faults >= self.bounds.faults || now < self.w.faults_from {
            fates.truncate(1);
        }
        let fate = fates[self.chooser.pick(fates.len())];
        if fate != Fate::Lands {
            self.spent.faults += 1;
            self.w.injected.add(fate.name());
        }
        let sent = if fate == Fate::SentLate {
            deadline + ROUND_TRIP
        } else {
            now
        };
        // A record's age counts from its call, which stamped it (its
        // request may leave later), as in the seeded runs.
        if let Op::Put(key, body, _) = &op {
            if key == KEY {
                self.w.first_sent.entry(body.clone()).or_insert(called);
            }
        }
        let id = self.w.requests.len();
        let line = if self.w.trace.is_some() {
            crate::env::describe_op(&op)
        } else {
            String::new()
        };
        let failed = Err(
            StoreError::new(StoreErrorKind::Transport, method(&op), key(&op))
                .with_message("simulated 5xx"),
        );
        let timed_out = Err(timeout(&op));
        let value = self.w.acting.get(&q).copied();
        self.w.requests.push(Request {
            contender: q,
            value,
            op,
            sent,
            landed: None,
            called,
            deadline: asked,
            returned: None,
        });
        let name = fate.name();
        self.w.log(|| format!("c{q} sends #{id} {line}: {name}"));
        match fate {
            Fate::Lands | Fate::AnswerLost => self.w.apply(id),
            Fate::LandsLate => self.late.push((id, self.steps)),
            _ => {}
        }
        let back = now + ROUND_TRIP;
        let answer = match fate {
            Fate::Lands if back <= deadline => {
                let landed = self.w.requests[id].landed.take();
                landed.ok_or_else(|| timeout(&self.w.requests[id].op))
            }
            Fate::Fails if back <= deadline => failed,
            _ => {
                let until = if fate == Fate::SentLate {
                    sent + ROUND_TRIP
                } else {
                    deadline
                };
                self.procs[q] = Proc::Waiting {
                    until,
                    answer: Answer::Store(timed_out),
                    id: Some(id),
                };
                return Stepped::Quiet;
            }
        };
        self.w.sched.now = back;
        self.answer(q, Answer::Store(answer), Some(id));
        Stepped::Resume(q)
    }

    /// Give process `q` its answer (to request `id`) now.
    fn answer(&mut self, q: usize, answer: Answer, id: Option<usize>) {
        let now = self.w.sched.now;
        if let Some(id) = id {
            self.w.requests[id].returned = Some(now);
            if matches!(self.w.requests[id].op, Op::Put(..)) {
                self.w.put_answer.insert(q, now);
            }
            let shown = match &answer {
                Answer::Store(Ok(done)) => describe_done(done),
                Answer::Store(Err(e)) => format!("{:?}", e.kind()),
                Answer::Woken => String::new(),
            };
            self.w.log(|| format!("c{q} answer to #{id}: {shown}"));
        }
        self.procs[q] = Proc::Ready(answer);
    }
}

fn method(op: &Op) -> &'static str {
    match op {
        Op::Get(_) => "GET",
        Op::Put(..) => "PUT",
        Op::Delete(..) => "DELETE",
    }
}

fn key(op: &Op) -> String {
    crate::world::key_of(op).to_string()
}

/// The error of a call that timed out at its deadline.
fn timeout(op: &Op) -> StoreError {
    StoreError::new(StoreErrorKind::Transport, method(op), key(op))
        .timed_out()
        .with_message("simulated timeout")
}
