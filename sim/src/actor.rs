//! One contender: the real [`Contender`], the core's keeper driver on a
//! simulated thread ([`crate::driven`]), the real [`FencedWriter`], and
//! `bucket-lease run`'s real [`Plan`] deciding when the command dies.
//!
//! Each runs on its own simulated thread: the contender's main thread
//! (acquire, then supervise the command), the keeper, and the command's
//! writer.

// The writer's closures return the core's own `WriteError`, whatever its
// size, as `FencedWriter`'s methods do (from outside the core clippy
// measures it there).
#![allow(clippy::result_large_err)]

use super::driven::drive;
use super::env::{store_of, without_probe_names, SimClock};
use super::sched::{current, Nanos, Shared, SEC};
use super::values::ValueId;
use super::world::{nonce_of, KEY, POINTER};
use bucket_lease_core::clock::Clock;
use bucket_lease_core::keeper::{Event, KeeperOptions};
use bucket_lease_core::lease::{Contender, Lease, LeaseOptions, Wait};
use bucket_lease_core::mutant::{self, Mutant};
use bucket_lease_core::supervision::{Plan, Seen};
use bucket_lease_core::{FencedWriter, LeaseError, WriteError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `run`'s longest wait between looks at the lease.
const TICK: Nanos = 50_000_000;

/// What the threads of one held lease share.
#[derive(Debug, Default)]
struct Hold {
    stop: AtomicBool,
    keeper_done: AtomicBool,
    command_alive: AtomicBool,
}

fn now(sh: &Shared) -> Nanos {
    sh.lock().sched.now
}

fn dur(n: Nanos) -> Duration {
    Duration::from_nanos(n)
}

/// The contender's main thread: try to take the lease, and whenever it is
/// taken run a command under it; poll again after a jittered pause.
pub(crate) fn contender(sh: Arc<Shared>, c: usize) {
    let (ttl_s, poll, name, limit) = {
        let w = sh.lock();
        let ttl = w.contenders[c].ttl_s;
        (ttl, w.ttl_s * SEC / 5, w.name_of(c), w.write_limit)
    };
    let clock: Arc<dyn Clock> = Arc::new(SimClock {
        sh: Arc::clone(&sh),
        c,
    });
    let store = store_of(&sh, c);
    let options = LeaseOptions::new(ttl_s).clock(Arc::clone(&clock));
    let mut contender = Contender::new(store, "sim", options)
        .with_instance_id(name)
        .with_instance_nonce(nonce_of(c));
    loop {
        // As `run --wait` does: the real wait, expiry-aware, re-reading at
        // least every poll, each attempt bounded by a poll.
        let (span, value) = {
            let mut w = sh.lock();
            (w.rng.range(1, 4), w.draw_value(c, KEY, "acquire_with"))
        };
        // On R2's limit an acquire takes more than an interval: a wait
        // shorter than two could never take the lease.
        let deadline = clock.now() + dur((poll * span).max(2 * limit.unwrap_or(0)));
        let wait = Wait::until(deadline)
            .max_reread(dur(poll))
            .attempt_timeout(dur(poll));
        let started = now(&sh);
        let acquired = contender.acquire_with(&wait);
        {
            let mut w = sh.lock();
            let limit = w.nanos_of(deadline);
            w.returned_by(c, "acquire", started, limit);
        }
        match acquired {
            Ok(lease) => {
                let epoch = lease.epoch();
                let lease = Arc::new(lease);
                {
                    let mut w = sh.lock();
                    let t = w.sched.now;
                    w.log(|| {
                        format!(
                            "c{c} ACQUIRES epoch {epoch} as v{value} (attempt began {:.4})",
                            super::world::secs(started)
                        )
                    });
                    w.grants.push((t, c, epoch, KEY));
                    w.handed_out(value, &lease);
                }
                hold(&sh, c, value, lease);
            }
            Err(e) => {
                let text = short(&e);
                sh.lock().log(|| format!("c{c} acquire fails: {text}"));
            }
        }
        let pause = clock.jitter(dur(poll));
        clock.sleep(pause);
    }
}

fn short(e: &LeaseError) -> String {
    match e {
        LeaseError::Held { holder, .. } => format!("held by {holder}"),
        other => without_probe_names(&other.to_string()),
    }
}

/// Run a command under `lease`, as `bucket-lease run` does: the keeper on
/// one thread, the command's writes on another, and here the plan that
/// decides when the command is signalled and killed.
fn hold(sh: &Arc<Shared>, c: usize, value: ValueId, lease: Arc<Lease>) {
    let epoch = lease.epoch();
    let ttl = Duration::from_secs(lease.ttl_s());
    let hold = Arc::new(Hold::default());
    hold.command_alive.store(true, Ordering::SeqCst);
    let (command_end, grace, me) = {
        let mut w = sh.lock();
        let t = w.sched.now;
        let ttl_n = w.ttl_s * SEC;
        let end = t + w.rng.range(ttl_n / 2, 4 * ttl_n);
        let grace = w.rng.range(0, ttl_n / 2);
        let window = w.open(value, KEY, epoch, super::world::COMMAND);
        w.contenders[c].command = Some(window);
        (end, grace, current())
    };
    let keeper = {
        let (lease, hold) = (Arc::clone(&lease), Arc::clone(&hold));
        sh.spawn(c, move |sh| {
            sh.lock().act_for(current(), value);
            keep(&sh, c, me, &lease, &hold);
        })
    };
    {
        let (lease, hold) = (Arc::clone(&lease), Arc::clone(&hold));
        sh.spawn(c, move |sh| {
            sh.lock().act_for(current(), value);
            write(&sh, c, value, &lease, &hold);
        });
    }
    let mut plan = Plan::new(dur(grace), ttl);
    let mut exits_at: Option<Nanos> = None;
    let only_events = mutant::on(Mutant::KeeperNeverFences);
    loop {
        let t = now(sh);
        let at = lease.clock().now();
        let events = sh.lock().events.remove(&c).unwrap_or_default();
        let mut term = false;
        for event in events {
            let seen = match event {
                Event::Fenced => Some(Seen::Fenced),
                Event::Lost { reason, .. } => Some(Seen::Lost(reason)),
                Event::Renewed { .. } | Event::RenewalFailed { .. } if only_events => {
                    lease.write_deadline().map(Seen::Held)
                }
                _ => None,
            };
            if let Some(seen) = seen {
                term |= plan.observe(at, seen);
            }
        }
        if !only_events {
            term |= plan.observe(at, Seen::of(&lease));
        }
        if term && exits_at.is_none() {
            let mut w = sh.lock();
            let exit = t + w.rng.range(0, 2 * grace + 1);
            w.log(|| {
                format!(
                    "c{c} SIGTERM to the command (it exits by {:.4} unless killed)",
                    super::world::secs(exit)
                )
            });
            exits_at = Some(exit);
        }
        let why = if plan.kill_due(at) {
            Some("SIGKILL")
        } else if t >= command_end {
            Some("the command exits")
        } else if exits_at.is_some_and(|e| t >= e) {
            Some("the command exits after SIGTERM")
        } else {
            None
        };
        if let Some(why) = why {
            let mut w = sh.lock();
            w.log(|| format!("c{c} command dies: {why}"));
            // The command's requests in flight die with it.
            w.command_dies(c, t);
            hold.command_alive.store(false, Ordering::SeqCst);
            break;
        }
        let mut wake = command_end.min(exits_at.unwrap_or(Nanos::MAX));
        if let Some(at) = plan.next_wake(at) {
            wake = wake.min(sh.lock().nanos_of(at));
        }
        // As `run` does: never wait for nothing, at most a tick when the
        // plan names an instant already past.
        if wake <= t {
            wake = t + TICK;
        }
        sh.wait_until(wake);
    }
    hold.stop.store(true, Ordering::SeqCst);
    Shared::interrupt(&mut sh.lock(), keeper);
    while !hold.keeper_done.load(Ordering::SeqCst) {
        let t = now(sh);
        sh.wait_until(t + 3600 * SEC);
    }
    // This lease's events not read (its release, an end after the
    // command died) are no next lease's.
    sh.lock().events.remove(&c);
}

/// The keeper thread: the core's keeper driver ([`crate::driven`]), as
/// `bucket-lease run`'s [`bucket_lease_core::Keeper`] runs it, each event
/// handed to the supervisor; released when told to stop.
fn keep(sh: &Arc<Shared>, c: usize, supervisor: usize, lease: &Lease, hold: &Hold) {
    let (_, released) = drive(
        sh,
        c,
        format!("c{c} keeper"),
        lease,
        KeeperOptions::new(),
        || hold.stop.load(Ordering::SeqCst),
        |event| {
            let mut w = sh.lock();
            w.events.entry(c).or_default().push(event);
            Shared::interrupt(&mut w, supervisor);
        },
    );
    let mut w = sh.lock();
    let text = format!("{released:?}");
    w.log(|| format!("c{c} keeper stops; release: {text}"));
    hold.keeper_done.store(true, Ordering::SeqCst);
    Shared::interrupt(&mut w, supervisor);
}

/// The command's writes through the real [`FencedWriter`]: a create-only
/// data object, then the pointer moved to it (now and then read first).
fn write(sh: &Arc<Shared>, c: usize, value: ValueId, lease: &Arc<Lease>, hold: &Hold) {
    let writer = FencedWriter::new(Arc::clone(lease));
    let gap = {
        let w = sh.lock();
        dur(w.ttl_s * SEC / 8)
    };
    let epoch = lease.epoch();
    for n in 0u64.. {
        if !hold.command_alive.load(Ordering::SeqCst) {
            return;
        }
        let data = format!("sim/data/c{c}-e{epoch}-{n}");
        let written = fenced(sh, c, value, &writer, hold, "write", |w| {
            w.put_new(&data, b"x")
        });
        if written == Some(true) && hold.command_alive.load(Ordering::SeqCst) {
            // Now and then the command reads the pointer first, as a job
            // that builds on the last manifest does (a read: no window).
            if sh.lock().rng.chance(3000) {
                let read = writer.read_pointer(POINTER);
                let text = match &read {
                    Ok(Some(o)) => String::from_utf8_lossy(&o.body).into_owned(),
                    Ok(None) => "absent".to_string(),
                    Err(e) => e.to_string(),
                };
                sh.lock()
                    .log(|| format!("c{c} fenced pointer read: {text}"));
            }
            fenced(sh, c, value, &writer, hold, "pointer write", |w| {
                w.put_pointer(POINTER, data.as_bytes())
            });
        }
        let pause = lease.clock().jitter(gap);
        lease.clock().sleep(pause);
    }
}

/// One write call on the real [`FencedWriter`] while the command lives
/// and `may_write()`,
/// inside a window that opens at the call and closes with the answer of
/// its last PUT (the reads it makes write nothing; a call that sent no PUT
/// leaves an empty window). `None` when the lease forbade writing;
/// else whether the call succeeded.
fn fenced<T>(
    sh: &Arc<Shared>,
    c: usize,
    value: ValueId,
    writer: &FencedWriter,
    hold: &Hold,
    what: &'static str,
    call: impl FnOnce(&FencedWriter) -> Result<T, WriteError>,
) -> Option<bool> {
    let lease = writer.lease();
    // A dead command sends nothing; a live one asks the lease first.
    if !hold.command_alive.load(Ordering::SeqCst) || !lease.may_write() {
        return None;
    }
    let me = current();
    let window = {
        let mut w = sh.lock();
        let i = w.open(value, KEY, lease.epoch(), what);
        w.contenders[c].writing = Some((i, me));
        w.put_answer.remove(&me);
        i
    };
    let done = call(writer);
    let mut w = sh.lock();
    // Without a PUT sent, the call wrote nothing: an empty window.
    let start = w.windows[window].start;
    let end = w.put_answer.get(&me).copied().unwrap_or(start);
    let text = match &done {
        Ok(_) => "ok".to_string(),
        Err(e) => e.to_string(),
    };
    w.log(|| format!("c{c} fenced {what}: {text}"));
    w.close(window, end);
    if w.contenders[c].writing == Some((window, me)) {
        w.contenders[c].writing = None;
    }
    Some(done.is_ok())
}
