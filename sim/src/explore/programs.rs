//! The scope's programs: short call sequences over the public API, each
//! run by one process on the real [`Contender`], [`Lease`] and
//! [`FencedWriter`]; and the cases, two programs on one store each.

// The writer's closures return the core's own `WriteError`, whatever its
// size, as `FencedWriter`'s methods do.
#![allow(clippy::result_large_err)]

use super::baton::Exec;
use super::io::{SearchClock, SearchStore};
use crate::sched::{current, Nanos, SEC};
use crate::values::ValueId;
use crate::world::{nonce_of, secs, KEY, POINTER};
use bucket_lease_core::clock::Clock;
use bucket_lease_core::lease::{Contender, Lease, LeaseOptions, Wait, DROP_RELEASE_TIMEOUT};
use bucket_lease_core::memory::Misbehaviour;
use bucket_lease_core::{FencedWriter, WriteError};
use std::sync::Arc;
use std::time::Duration;

/// The TTL of every lease but the one that asks for too long a TTL.
pub(crate) const TTL_S: u64 = 3;

/// A third of the TTL: how long an acquire attempt or a release may take,
/// and how often a waiting contender reads the record again.
const THIRD: Nanos = TTL_S * SEC / 3;

/// A TTL over the sane maximum, which an acquire must refuse.
const TOO_LONG_TTL_S: u64 = 4000;

/// One call of a program.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Call {
    /// `try_acquire_before` a third of a TTL from now: a new lease value
    /// when it succeeds.
    Acquire,
    /// `acquire_with`: wait up to two TTLs, each attempt bounded by a
    /// third of one and the record read again at least that often.
    Wait,
    /// While the newest value `may_write()`: a create-only data object
    /// through its [`FencedWriter`], then the pointer moved to it.
    Write,
    /// `renew_before` the newest value's write deadline, as the keeper
    /// does; nothing once it is fenced.
    Renew,
    /// `release_before` a third of a TTL from now, of the newest value.
    Release,
    /// Drop the oldest value still held: its `Drop` releases it.
    DropOldest,
    /// Time passes: the process sleeps this long.
    Idle(Nanos),
}

/// A call sequence, and the TTL its contender asks for.
#[derive(Debug)]
pub(crate) struct Program {
    pub(crate) name: &'static str,
    pub(crate) ttl_s: u64,
    calls: &'static [Call],
}

/// Take the lease, write, renew, write again, release.
const HOLD: Program = Program {
    name: "hold",
    ttl_s: TTL_S,
    calls: &[
        Call::Acquire,
        Call::Write,
        Call::Renew,
        Call::Write,
        Call::Release,
    ],
};

/// Wait for the lease, write, release.
const WAIT: Program = Program {
    name: "wait",
    ttl_s: TTL_S,
    calls: &[Call::Wait, Call::Write, Call::Release],
};

/// Take the lease, write, stall past the fence (two thirds of the TTL)
/// but not past the TTL, write again, release.
const OUTLIVE: Program = Program {
    name: "outlive",
    ttl_s: TTL_S,
    calls: &[
        Call::Acquire,
        Call::Write,
        Call::Idle(TTL_S * SEC * 11 / 12),
        Call::Write,
        Call::Release,
    ],
};

/// Two lease values in one process: take the lease, stall just past the
/// fence, wait for it again while the old value lives (the retry loop
/// after `Fenced`), drop the old value, write with the new one, release
/// it.
const REACQUIRE: Program = Program {
    name: "reacquire",
    ttl_s: TTL_S,
    calls: &[
        Call::Acquire,
        Call::Idle(TTL_S * SEC * 7 / 10),
        Call::Wait,
        Call::DropOldest,
        Call::Write,
        Call::Release,
    ],
};

/// Ask for a TTL over the sane maximum (refused), and if given it, write,
/// stall past the others' TTL, write again.
const LONG: Program = Program {
    name: "long-ttl",
    ttl_s: TOO_LONG_TTL_S,
    calls: &[
        Call::Acquire,
        Call::Write,
        Call::Idle(TTL_S * SEC * 4 / 3),
        Call::Write,
        Call::Release,
    ],
};

/// Two processes' programs on one store.
#[derive(Debug)]
pub(crate) struct Case {
    pub(crate) programs: [&'static Program; 2],
    /// The store's one misbehaviour, if any.
    pub(crate) switch: Option<Misbehaviour>,
    /// Both processes configured with one instance id.
    pub(crate) one_name: bool,
    /// The key starts with a dead holder's suspect record.
    pub(crate) suspect: bool,
}

impl Case {
    /// The case's name, as the report and the replay command give it.
    pub(crate) fn name(&self) -> String {
        let mut name = format!("{} + {}", self.programs[0].name, self.programs[1].name);
        if let Some(s) = self.switch {
            name += &format!(" on {s:?}");
        }
        if self.one_name {
            name += ", one instance id";
        }
        if self.suspect {
            name += ", suspect record";
        }
        name
    }
}

/// Every case of the scope, in the order the search explores them: the
/// plain case first, then each that sets up one defect's conditions, the
/// smaller first, then the rest of the misbehaving stores (where a lease
/// must never be handed out, or on `IgnoreIfMatchOnDelete`, where it may).
pub(crate) fn cases() -> Vec<Case> {
    let strict = |programs: [&'static Program; 2]| Case {
        programs,
        switch: None,
        one_name: false,
        suspect: false,
    };
    let on = |switch| Case {
        switch: Some(switch),
        ..strict([&HOLD, &HOLD])
    };
    vec![
        strict([&HOLD, &WAIT]),
        Case {
            suspect: true,
            ..strict([&WAIT, &WAIT])
        },
        strict([&LONG, &WAIT]),
        on(Misbehaviour::NoEtags),
        on(Misbehaviour::RefuseOwnEtag),
        Case {
            one_name: true,
            ..strict([&HOLD, &WAIT])
        },
        strict([&REACQUIRE, &WAIT]),
        strict([&OUTLIVE, &WAIT]),
        strict([&HOLD, &HOLD]),
        on(Misbehaviour::IgnoreIfNoneMatch),
        on(Misbehaviour::IgnoreIfMatch),
        on(Misbehaviour::CreateOnIfMatchAbsent),
        on(Misbehaviour::NoConditions),
        on(Misbehaviour::IgnoreIfMatchOnDelete),
    ]
}

/// One lease value a process holds, and its writer.
struct Value {
    id: ValueId,
    lease: Arc<Lease>,
    writer: FencedWriter,
    writes: u64,
}

/// Process `p` runs `program` on the real code.
pub(crate) fn run(exec: &Arc<Exec>, p: usize, program: &Program) {
    let name = exec.lock().w.name_of(p);
    let clock: Arc<dyn Clock> = Arc::new(SearchClock {
        exec: Arc::clone(exec),
        p,
    });
    let store = Arc::new(SearchStore {
        exec: Arc::clone(exec),
        p,
    });
    let options = LeaseOptions::new(program.ttl_s).clock(Arc::clone(&clock));
    let mut contender = Contender::new(store, "sim", options)
        .with_instance_id(name)
        .with_instance_nonce(nonce_of(p));
    let mut held: Vec<Value> = Vec::new();
    let now = || exec.lock().w.sched.now;
    let instant = |n: Nanos| clock.now() + Duration::from_nanos(n);
    for call in program.calls {
        {
            let mut s = exec.lock();
            s.clock_step(p);
            s.w.log(|| format!("c{p} calls {call:?}"));
        }
        match call {
            Call::Acquire | Call::Wait => {
                let how = match call {
                    Call::Wait => "acquire_with",
                    _ => "try_acquire_before",
                };
                let id = exec.lock().w.draw_value(p, KEY, how);
                let began = now();
                let (got, deadline) = if matches!(call, Call::Wait) {
                    let deadline = instant(2 * TTL_S * SEC);
                    let wait = Wait::until(deadline)
                        .max_reread(Duration::from_nanos(THIRD))
                        .attempt_timeout(Duration::from_nanos(THIRD));
                    (contender.acquire_with(&wait), deadline)
                } else {
                    let deadline = instant(THIRD);
                    (contender.try_acquire_before(Some(deadline)), deadline)
                };
                let mut s = exec.lock();
                let limit = s.w.nanos_of(deadline);
                s.w.returned_by(p, "acquire", began, limit);
                match got {
                    Ok(lease) => {
                        let (t, epoch) = (s.w.sched.now, lease.epoch());
                        s.w.log(|| format!("c{p} ACQUIRES epoch {epoch} as v{id}"));
                        s.w.grants.push((t, p, epoch, KEY));
                        let lease = Arc::new(lease);
                        s.w.handed_out(id, &lease);
                        held.push(Value {
                            id,
                            writer: FencedWriter::new(Arc::clone(&lease)),
                            lease,
                            writes: 0,
                        });
                    }
                    Err(e) => s.w.log(|| format!("c{p} acquire fails: {e}")),
                }
            }
            Call::Write => {
                if let Some(v) = held.last_mut() {
                    write(exec, p, v);
                }
            }
            Call::Renew => {
                let Some(v) = held.last() else { continue };
                let Some(deadline) = v.lease.write_deadline() else {
                    continue;
                };
                act(exec, v.id);
                let began = now();
                let renewed = v.lease.renew_before(Some(deadline));
                let mut s = exec.lock();
                let limit = s.w.nanos_of(deadline);
                s.w.returned_by(p, "renewal", began, limit);
                s.w.log(|| format!("c{p} renewal: {renewed:?}"));
            }
            Call::Release => {
                let Some(v) = held.pop() else { continue };
                act(exec, v.id);
                let (began, deadline) = (now(), instant(THIRD));
                let released = v.lease.release_before(Some(deadline));
                let mut s = exec.lock();
                let limit = s.w.nanos_of(deadline);
                s.w.returned_by(p, "release", began, limit);
                s.w.log(|| format!("c{p} release: {released:?}"));
            }
            Call::DropOldest => {
                if !held.is_empty() {
                    let v = held.remove(0);
                    drop_value(exec, p, v);
                }
            }
            Call::Idle(d) => clock.sleep(Duration::from_nanos(*d)),
        }
    }
    for v in held {
        drop_value(exec, p, v);
    }
}

/// Process `p`'s value `v` is dropped: its `Drop` releases it.
fn drop_value(exec: &Exec, p: usize, v: Value) {
    act(exec, v.id);
    let began = exec.lock().w.sched.now;
    drop(v);
    let mut s = exec.lock();
    let limit = began + u64::try_from(DROP_RELEASE_TIMEOUT.as_nanos()).unwrap_or(0);
    s.w.returned_by(p, "drop", began, limit);
}

/// This process's requests are `value`'s from now on.
fn act(exec: &Exec, value: ValueId) {
    exec.lock().w.act_for(current(), value);
}

/// A data object, then the pointer moved to it, through value `v`'s
/// writer.
fn write(exec: &Exec, p: usize, v: &mut Value) {
    act(exec, v.id);
    let data = format!("sim/data/c{p}-v{}-{}", v.id, v.writes);
    v.writes += 1;
    if fenced(exec, p, v, "write", |w| w.put_new(&data, b"x")) == Some(true) {
        fenced(exec, p, v, "pointer write", |w| {
            w.put_pointer(POINTER, data.as_bytes())
        });
    }
}

/// One write call of value `v` while it `may_write()`, inside a window
/// from the call to the answer of its last PUT (a call that sent none
/// leaves an empty window). `None` when the lease forbade writing; else
/// whether the call succeeded.
fn fenced<T>(
    exec: &Exec,
    p: usize,
    v: &Value,
    what: &'static str,
    call: impl FnOnce(&FencedWriter) -> Result<T, WriteError>,
) -> Option<bool> {
    let deadline = v.lease.write_deadline()?;
    let window = {
        let mut s = exec.lock();
        let i = s.w.open(v.id, KEY, v.lease.epoch(), what);
        s.w.put_answer.remove(&p);
        i
    };
    let done = call(&v.writer);
    let mut s = exec.lock();
    let start = s.w.windows[window].start;
    let end = s.w.put_answer.get(&p).copied().unwrap_or(start);
    s.w.close(window, end);
    let limit = s.w.nanos_of(deadline);
    s.w.returned_by(p, what, start, limit);
    let text = match &done {
        Ok(_) => "ok".to_string(),
        Err(e) => e.to_string(),
    };
    s.w.log(|| format!("c{p} fenced {what}: {text} ({:.4} s)", secs(end)));
    Some(done.is_ok())
}
