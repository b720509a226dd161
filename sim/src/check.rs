//! The invariants checked after every run, on true time. (No loss is
//! checked as each request lands, in [`super::world`].)

use super::sched::{Nanos, SEC};
use super::values::ValueId;
use super::world::{secs, Op, Window, World, COMMAND, KEY, WATCHED};
use bucket_lease_core::memory::Misbehaviour;

/// Check safety, fencing tokens, failing closed and liveness; record each
/// violation in the world.
pub(crate) fn check(w: &mut World) {
    safety_and_epochs(w);
    fail_closed(w);
    liveness(w);
    suspect_taken_over(w);
    pool_fences_alone(w);
    pool_fences_on_time(w);
    store_contract(w);
}

/// On each key: no two `Lease` values inside a window at once, two values
/// of one process included (a value is one acquire call's lease: see
/// `values.rs`), and each new value's epoch above the previous one's.
fn safety_and_epochs(w: &mut World) {
    for (key, _, _) in WATCHED {
        let found = safety_on(w, key);
        w.violations.extend(found);
    }
}

/// [`safety_and_epochs`] on `key`: what it found.
fn safety_on(w: &World, key: &str) -> Vec<String> {
    let mut windows: Vec<Window> = Vec::new();
    for x in w.windows.iter().filter(|x| x.key == key) {
        if x.what == COMMAND {
            // A paused contender's command is paused with it (a paused
            // machine, or SIGSTOP to the whole process group): it is not
            // writing meanwhile. At the resume the plan is consulted first.
            let mut pieces = vec![x.clone()];
            for &(from, to) in &w.contenders[x.contender].pauses {
                pieces = pieces
                    .into_iter()
                    .flat_map(|p| {
                        let end = p.end.unwrap_or(p.start);
                        if to <= p.start || from >= end {
                            return vec![p];
                        }
                        let mut out = Vec::new();
                        if from > p.start {
                            out.push(Window {
                                end: Some(from),
                                ..p.clone()
                            });
                        }
                        if to < end {
                            out.push(Window {
                                start: to,
                                ..p.clone()
                            });
                        }
                        out
                    })
                    .collect();
            }
            windows.extend(pieces);
        } else {
            windows.push(x.clone());
        }
    }
    windows.retain(|x| x.end.is_some_and(|e| e > x.start));
    windows.sort_by_key(|x| (x.start, x.end));
    // The window reaching furthest, and the furthest of any other value.
    type Lease = (ValueId, usize, u64);
    let mut best: Option<(Nanos, Lease, &'static str)> = None;
    let mut second: Option<(Nanos, Lease, &'static str)> = None;
    let mut last_lease: Option<Lease> = None;
    let mut found = Vec::new();
    for x in &windows {
        let lease = (x.value, x.contender, x.epoch);
        let end = x.end.unwrap_or(x.start);
        let clash = match (best, second) {
            (Some(b), _) if b.1 .0 != lease.0 && x.start < b.0 => Some(b),
            (Some(b), Some(s)) if b.1 .0 == lease.0 && x.start < s.0 => Some(s),
            _ => None,
        };
        if let Some((other_end, (ov, oc, oe), what)) = clash {
            found.push(format!(
                "safety: on {key} c{} (v{}, {}, epoch {}) opens a window at {:.4} s while c{oc} \
                 (v{ov}, {what}, epoch {oe}) is inside one until {:.4} s",
                x.contender,
                x.value,
                x.what,
                x.epoch,
                secs(x.start),
                secs(other_end)
            ));
        }
        if let Some((pv, pc, pe)) = last_lease {
            if pv != lease.0 && x.epoch <= pe {
                found.push(format!(
                    "fencing tokens: on {key} c{} (v{}) opens a window with epoch {} at {:.4} s \
                     after c{pc}'s window (v{pv}) with epoch {pe}",
                    x.contender,
                    x.value,
                    x.epoch,
                    secs(x.start),
                ));
            }
        }
        last_lease = Some(lease);
        let me = (end, lease, x.what);
        match best {
            Some(b) if b.1 .0 == lease.0 => {
                if end > b.0 {
                    best = Some(me);
                }
            }
            Some(b) if end > b.0 => {
                second = Some(b);
                best = Some(me);
            }
            Some(_) => {
                if second.is_none_or(|s| end > s.0) {
                    second = Some(me);
                }
            }
            None => best = Some(me),
        }
    }
    found
}

/// On a store that ignores a write condition (or cannot send one, or
/// returns no ETag), no lease may be handed out.
fn fail_closed(w: &mut World) {
    let ignoring = matches!(
        w.switch,
        Some(
            Misbehaviour::IgnoreIfNoneMatch
                | Misbehaviour::IgnoreIfMatch
                | Misbehaviour::CreateOnIfMatchAbsent
                | Misbehaviour::NoEtags
                | Misbehaviour::NoConditions
                | Misbehaviour::RefuseOwnEtag
        )
    );
    if !ignoring {
        return;
    }
    if let Some(&(t, c, epoch, key)) = w.grants.first() {
        w.violations.push(format!(
            "fail closed: c{c} was handed epoch {epoch} on {key} at {:.4} s on a store with {:?}",
            secs(t),
            w.switch
        ));
    }
}

/// After the holder crashed (and faults stopped), a live contender holds
/// the lease within: the last landing of a request sent before the crash,
/// plus the record's TTL, plus the clocks' disagreement, plus two poll
/// intervals (jittered up to 1.5 times), plus a second for the acquire's
/// own requests (and two write intervals on R2's limit).
fn liveness(w: &mut World) {
    let Some((crashed_at, ttl_s, holder)) = w.crash else {
        return;
    };
    if ttl_s > bucket_lease_core::record::MAX_SANE_TTL_S {
        return;
    }
    let from = crashed_at.max(w.last_landing_before_crash);
    let poll = w.ttl_s * SEC / 5;
    let bound = from + ttl_s * SEC + w.ttl_s * SEC / 3 + 3 * poll + SEC + limited_extra(w);
    let next = w
        .grants
        .iter()
        .find(|(t, c, _, key)| *t >= crashed_at && *c != holder && *key == KEY)
        .map(|(t, _, _, _)| *t);
    match next {
        Some(t) if t <= bound => {}
        other => w.violations.push(format!(
            "liveness: c{holder} crashed holding the lease at {:.4} s; nobody held it by {:.4} s \
             (next grant: {})",
            secs(crashed_at),
            secs(bound),
            other.map_or("none".to_string(), |t| format!("{:.4} s", secs(t)))
        )),
    }
}

/// What R2's write limit adds to a takeover's time, in a run that has it:
/// two intervals (the acquire's probe writes its record an interval after
/// the acquire's write, and a write throttled by another's waits one), and
/// two TTLs: at the shortest TTL the store takes, an acquire whose six
/// probe writes (one after another on the simulated store) meet slow
/// answers can outlast its fence and fail, and the next attempt follows a
/// poll later.
fn limited_extra(w: &World) -> Nanos {
    w.write_limit
        .map_or(0, |interval| 2 * interval + 2 * w.ttl_s * SEC)
}

/// A run that starts with a suspect record (a dead holder's, stamped far
/// ahead or with an absurd TTL): a live contender holds the lease within
/// two TTLs (the record's watch, at most the run's TTL, plus the polls
/// and requests of the attempts that watch it), at an epoch above the
/// record's. Skipped on a store that ignores a condition, where no lease
/// may be handed out at all.
fn suspect_taken_over(w: &mut World) {
    let Some(rec) = w.suspect.clone() else {
        return;
    };
    if w.switch.is_some() && w.switch != Some(Misbehaviour::IgnoreIfMatchOnDelete) {
        return;
    }
    let bound = 2 * rec.suspect_watch_s(w.ttl_s) * SEC + limited_extra(w);
    let first = w
        .grants
        .iter()
        .find(|(_, _, _, key)| *key == KEY)
        .map(|&(t, c, epoch, _)| (t, c, epoch));
    match first {
        Some((t, _, epoch)) if t <= bound && epoch > rec.epoch => {}
        Some((t, c, epoch)) if t <= bound => w.violations.push(format!(
            "fencing tokens: c{c} took over the suspect record of epoch {} at epoch {epoch}",
            rec.epoch
        )),
        other => {
            w.violations.push(format!(
            "liveness: the suspect record (renewed_at {}, ttl {} s) was not taken over by {:.4} \
             s (first grant: {})",
            rec.renewed_at,
            rec.ttl_s,
            secs(bound),
            other.map_or("none".to_string(), |(t, c, _)| format!("c{c} at {:.4} s", secs(t)))
        ))
        }
    }
}

/// In a pool run: the black-holed lease is fenced by its own write
/// deadline, the removed lease is released, and no other lease of the pool
/// is ever fenced or lost (fenced is allowed in a jammed run, where the
/// only renewal thread hangs; `pool_fences_on_time` checks when).
fn pool_fences_alone(w: &mut World) {
    let Some(run) = w.pool.clone() else {
        return;
    };
    let mut found = Vec::new();
    for (t, key, event) in &run.events {
        let bad =
            (event == "Fenced" && !run.jammed && *t > run.started) || event.starts_with("Lost");
        if bad && *key != run.hole {
            found.push(format!(
                "pool: {key} reported {event} at {:.4} s although only {} was black-holed",
                secs(*t),
                run.hole
            ));
        }
    }
    if let Some(deadline) = run.hole_deadline {
        let fenced = run
            .events
            .iter()
            .find(|(_, key, event)| *key == run.hole && event == "Fenced")
            .map(|(t, _, _)| *t);
        match fenced {
            Some(t) if t <= deadline.max(run.started) => {}
            other => found.push(format!(
                "pool: black-holed {} was not fenced by its write deadline {:.4} s (fenced: {})",
                run.hole,
                secs(deadline),
                other.map_or("never".to_string(), |t| format!("at {:.4} s", secs(t)))
            )),
        }
    }
    if let Some((key, at)) = &run.removed {
        let released = run.events.iter().any(|(_, k, event)| {
            k == key
                && (event.starts_with("Released(Ok(Freed))")
                    || event.starts_with("left after its loss, released Ok(Freed)"))
        });
        // In a jammed run the release may wait for the one renewal thread,
        // which the black-holed renewal holds for up to a third of its TTL.
        let queued = if run.jammed { run.ttls[0] * SEC / 3 } else { 0 };
        if *at + 10 * SEC + queued < w.sched.now && !released {
            found.push(format!(
                "pool: {key}, removed at {:.4} s, was never released",
                secs(*at)
            ));
        }
    }
    w.violations.extend(found);
}

/// In a pool run: every `Fenced` event goes out by the lease's write
/// deadline, and every lease still kept whose write deadline passed before
/// the run ended was reported fenced (or lost) by then, whether or not a
/// renewal thread was free to take its renewal.
fn pool_fences_on_time(w: &mut World) {
    let Some(run) = w.pool.clone() else {
        return;
    };
    let mut found = Vec::new();
    for (t, key, deadline) in &run.fenced {
        if *t > (*deadline).max(run.started) {
            found.push(format!(
                "pool: {key} was reported fenced at {:.4} s, after its write deadline {:.4} s",
                secs(*t),
                secs(*deadline)
            ));
        }
    }
    let removed = run.removed.as_ref().map(|(key, _)| key.as_str());
    for (i, deadline) in run.deadlines.iter().enumerate() {
        let key = format!("sim/pool-{i}/LEASE");
        let Some(deadline) = *deadline else { continue };
        if Some(key.as_str()) == removed || deadline >= w.sched.now {
            continue;
        }
        let told = run.events.iter().any(|(t, k, event)| {
            *k == key
                && *t <= deadline.max(run.started)
                && (event == "Fenced" || event.starts_with("Lost"))
        });
        if !told {
            let first = run
                .fenced
                .iter()
                .find(|(_, k, _)| *k == key)
                .map_or("never".to_string(), |(t, _, _)| {
                    format!("at {:.4} s", secs(*t))
                });
            found.push(format!(
                "pool: {key}'s write deadline {:.4} s passed with no Fenced event by then \
                 (reported: {first})",
                secs(deadline)
            ));
        }
    }
    w.violations.extend(found);
}

/// How long past its deadline a store call may return: the `Store`
/// contract's [`DEADLINE_SLACK`](bucket_lease_core::store::DEADLINE_SLACK). (The
/// simulated store cuts every answer at the deadline itself.)
pub(crate) const RETURN_SLACK: Nanos = bucket_lease_core::store::DEADLINE_SLACK.as_nanos() as Nanos;

/// The `Store` contract, which the lease relies on and does not check: no
/// request leaves for the store after its caller's deadline, and no store
/// call returns later than its deadline plus [`RETURN_SLACK`] (unless its
/// contender was paused meanwhile: a paused process returns late whatever
/// it does). A request sent in time may still land late: that is the
/// network's delay, which the lease allows for (the "lands late" fault).
fn store_contract(w: &mut World) {
    let mut found = Vec::new();
    for (id, r) in w.requests.iter().enumerate() {
        let Some(deadline) = r.deadline else { continue };
        let c = r.contender;
        let what = || {
            let (method, key) = match &r.op {
                Op::Get(k) => ("GET", k),
                Op::Put(k, ..) => ("PUT", k),
                Op::Delete(k, _) => ("DELETE", k),
            };
            format!(
                "c{c}'s request #{id} ({method} {key}, called at {:.4} s)",
                secs(r.called)
            )
        };
        if r.sent > deadline {
            found.push(format!(
                "store contract: {} was sent at {:.4} s, after its deadline {:.4} s",
                what(),
                secs(r.sent),
                secs(deadline)
            ));
        }
        let Some(returned) = r.returned else { continue };
        let paused = w.contenders[c]
            .pauses
            .iter()
            .any(|(from, to)| *from < returned && *to > r.called);
        if returned > deadline + RETURN_SLACK && !paused {
            found.push(format!(
                "store contract: {} returned at {:.4} s, past its deadline {:.4} s",
                what(),
                secs(returned),
                secs(deadline)
            ));
        }
    }
    w.violations.extend(found);
}
