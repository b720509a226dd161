//! Exhaustive exploration of small scopes: every schedule of a bounded
//! scope, run on the real code (`bash scripts/simulate.sh --exhaustive`).
//! Where the seeded runs sample big worlds, this search leaves out no
//! schedule of a small one.
//!
//! # The scope
//!
//! Two processes on one key, each running a short program of calls on the
//! real [`Contender`], [`Lease`] and [`FencedWriter`] (`programs.rs`), on
//! a store that wraps the real `MemoryStore`, with a TTL of 3 s and clocks
//! that agree at the start:
//!
//! - `hold`: try to acquire, write, renew, write, release;
//! - `wait`: wait for the lease (`acquire_with`, up to two TTLs), write,
//!   release;
//! - `outlive`: acquire, write, stall past the fence but not the TTL,
//!   write, release;
//! - `reacquire`: acquire, stall past the fence, wait for the lease again
//!   while the old value lives, drop the old value, write, release: two
//!   `Lease` values of one process, the retry loop after `Fenced`;
//! - `long-ttl`: acquire with a TTL over the sane maximum (refused),
//!   write, stall past the others' TTL, write, release.
//!
//! A write is a create-only data object, then the pointer moved to it,
//! each while `may_write()`. The cases (`programs::cases`), two programs
//! each: hold and wait; wait and wait from a dead holder's suspect record;
//! long-ttl and wait; hold and hold on a store that returns no ETags, and
//! on one that refuses its own ETag; hold and wait with both processes
//! under one instance id; reacquire and wait; outlive and wait; hold and
//! hold; and hold and hold on each other store misbehaviour the seeded
//! runs use.
//!
//! # The choice points
//!
//! Everything that could go more than one way goes through one chooser
//! (`dfs.rs`), and nothing else varies (the clocks' jitter is the base
//! pause, as is):
//!
//! - **which event comes next** (`baton.rs`): a process's request, the end
//!   of its timeout or sleep, or the landing of a request in flight. Every
//!   schedule keeps time: no event starts past another process's
//!   deadline, a request is answered by its deadline, and one is answered
//!   after other events (a slow answer) only where faults are allowed;
//! - **each request's fate**: it lands; it lands and its answer is lost;
//!   it never lands (both: the caller times out at its deadline); it lands
//!   late, at any later event the search picks (the caller times out); or
//!   a 5xx comes back at once (nothing landed: the lease reads again after
//!   it, where a timeout at the deadline leaves no room to). A read has
//!   three: answered, timed out, 5xx;
//! - **clock steps**: before each call of a program, the process's wall
//!   clock may step a sixth of the TTL forward or back.
//!
//! # The bounds
//!
//! The space is bounded per schedule ([`Bounds`]): at most P preemptions
//! (an event other than the natural next one, which is the earliest, and
//! on a tie the process that ran last: CHESS's preemption bounding), at
//! most F faults (fates other than "lands"; none before a suspect
//! record's takeover is due, as in the seeded runs), at most C clock steps.
//! CI runs P = 1, F = 1, C = 1 (`cli::CI_BOUNDS`); docs/ARCHITECTURE.md
//! gives the counts of schedules for other bounds and how far a larger
//! scope was run.
//!
//! # What the search promises
//!
//! Every schedule within the bounds runs once, depth first over the trie
//! of choices, each from nothing (a stateless search: the real code's
//! state cannot be saved, so each execution replays its prefix of
//! choices, and one that does not follow them is a violation: the code
//! must be deterministic in them). Each execution is checked as a seeded
//! run is, by the same checkers (`check.rs`, `world.rs`, `values.rs`):
//! safety and fencing tokens by `Lease` value, two values of one process
//! included; failing closed; no loss between processes, and between values
//! of one process (a record whose `Lease` lives and may write is never
//! replaced, released or removed by another value); pointers; calls back
//! by their deadlines; the store contract; the suspect record taken over.
//! Each acquire call draws its value, and each request is tagged with the
//! value its process acts for. The search promises nothing beyond the
//! bounds, for more than two processes, or for the keeper, `run`'s plan
//! and the pool, which the programs do not use ([`out_of_scope`]).
//!
//! [`Contender`]: bucket_lease_core::Contender
//! [`Lease`]: bucket_lease_core::Lease
//! [`FencedWriter`]: bucket_lease_core::FencedWriter

mod baton;
mod cli;
mod dfs;
mod io;
mod pool;
mod programs;

pub use cli::command;

use self::baton::{Abandoned, Exec};
use self::dfs::Chooser;
use self::programs::{Case, Program, TTL_S};
use crate::sched::SEC;
use crate::world::{self, World, GHOST, KEY};
use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::mutant::Mutant;
use bucket_lease_core::record::{format_stamp, LeaseRecord};
use bucket_lease_core::store::{PutMode, PutOptions, Store};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

/// How far from the first schedule the search goes: at most this many
/// preemptions, faults and clock steps in one execution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bounds {
    /// Events taken out of the natural order: another process than the
    /// one that would go on (the earliest, the one that ran last on a tie).
    pub preemptions: u32,
    /// Requests with a fate other than "lands".
    pub faults: u32,
    /// Wall-clock steps of a sixth of the TTL.
    pub clock_steps: u32,
}

/// One violating schedule.
#[derive(Debug, Clone)]
pub struct Found {
    /// The case's index.
    pub case: usize,
    /// The case's name.
    pub name: String,
    /// The schedule's choices, one character each.
    pub choices: String,
    /// The first violation.
    pub violation: String,
}

/// What a search found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Schedules run.
    pub schedules: u64,
    /// The most steps one schedule took.
    pub depth: u64,
    /// Schedules that broke an invariant.
    pub violating: u64,
    /// The first few of them in each case.
    pub found: Vec<Found>,
    /// Schedules run up to the first violating one, in the scope's order.
    pub first: Option<u64>,
    /// Under a mutant: schedules that broke an invariant on the real code
    /// too, passed over.
    pub shared: u64,
    /// Each case's name and schedules.
    pub cases: Vec<(String, u64)>,
}

/// How many violating schedules of one case a report keeps.
const KEPT: usize = 3;

/// Mutants of the catalogue that no scope of two processes calling the
/// API can show, and why; and every keeper pool's mutant (`pool-…`),
/// pool driver's (`driver-pool-…`) and keeper driver's (`driver-…`).
const OUT_OF_SCOPE: [(&str, &str); 3] = [
    (
        "keeper-never-fences",
        "the keeper's renewal loop and `run`'s plan: the scope calls the API, with no keeper \
         or command",
    ),
    (
        "kill-at-full-ttl",
        "`run`'s plan of signals to a command: the scope runs no command",
    ),
    (
        "spaced-probe-record-last",
        "a store with a write interval (R2's limit): the scope's store has none",
    ),
];

/// Why the mutant called `name` is out of the scope, when it is.
pub fn out_of_scope(name: &str) -> Option<&'static str> {
    if name.starts_with("pool-") {
        return Some("a keeper pool's threads and scheduler: the scope keeps no pool");
    }
    if name.starts_with("driver-pool-") {
        return Some(
            "the pool driver (`pool/driver.rs`): the scope calls the API, with no keeper pool",
        );
    }
    if name.starts_with("driver-") {
        return Some(
            "the keeper driver (`keeper/driver.rs`): the scope calls the API, with no keeper",
        );
    }
    OUT_OF_SCOPE
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, why)| *why)
}

/// The names of the scope's cases, in order.
pub fn case_names() -> Vec<String> {
    programs::cases().iter().map(Case::name).collect()
}

/// Search every schedule of the scope within `bounds`, on the mutant
/// named `mutant` if any; with `stop_at_first`, only until the first
/// violating schedule in the scope's order.
///
/// # Errors
///
/// When `mutant` names no mutant, or this build lacks the feature
/// `mutants`.
pub fn search(bounds: Bounds, mutant: Option<&str>, stop_at_first: bool) -> Result<Report, String> {
    let mutant = select(mutant)?;
    let cases = programs::cases();
    let next = AtomicUsize::new(0);
    let stop_below = AtomicUsize::new(usize::MAX);
    let results = Mutex::new(vec![None; cases.len()]);
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers.min(cases.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= cases.len() || (stop_at_first && i > stop_below.load(Ordering::SeqCst)) {
                    return;
                }
                let stop = stop_at_first.then_some(&stop_below);
                let done = explore(&cases, i, bounds, stop, mutant);
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(done);
            });
        }
    });
    let mut report = Report::default();
    for (i, done) in results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .enumerate()
    {
        let Some(done) = done else { break };
        if report.first.is_none() {
            report.first = done.first.map(|n| report.schedules + n);
        }
        report.schedules += done.schedules;
        report.depth = report.depth.max(done.depth);
        report.violating += done.violating;
        report.shared += done.shared;
        report.found.extend(done.found);
        report.cases.push((cases[i].name(), done.schedules));
        if stop_at_first && report.first.is_some() {
            break;
        }
    }
    Ok(report)
}

/// The trace of one schedule of case `case`, replayed from its `choices`
/// within `bounds`, on the mutant named `mutant` if any; and its
/// violations.
///
/// # Errors
///
/// As [`search`]; or when `case` or `choices` name no schedule.
pub fn replay(
    case: usize,
    choices: &str,
    bounds: Bounds,
    mutant: Option<&str>,
) -> Result<(Vec<String>, Vec<String>), String> {
    select(mutant)?;
    let cases = programs::cases();
    let case = cases.get(case).ok_or_else(|| format!("no case {case}"))?;
    let replay = decode(choices).ok_or_else(|| format!("not a schedule: {choices:?}"))?;
    let done = execute(case, bounds, replay, true);
    let mut trace = vec![
        format!(
            "{}: schedule {choices} within {} preemptions, {} faults, {} clock steps",
            case.name(),
            bounds.preemptions,
            bounds.faults,
            bounds.clock_steps
        ),
        "            (left: true time in s; every monotonic clock runs at true time)".to_string(),
    ];
    trace.extend(done.trace);
    Ok((trace, done.violations))
}

/// Turn the mutant named `mutant` on (or none); which it is.
fn select(mutant: Option<&str>) -> Result<Option<Mutant>, String> {
    let chosen = match mutant {
        None => None,
        Some(name) => {
            Some(crate::mutants::named(name).ok_or_else(|| format!("no mutant named {name:?}"))?)
        }
    };
    switch(chosen)?;
    Ok(chosen)
}

/// Switch `mutant` on for the whole process (or none).
fn switch(mutant: Option<Mutant>) -> Result<(), String> {
    #[cfg(feature = "mutants")]
    bucket_lease_core::mutant::select(mutant);
    #[cfg(not(feature = "mutants"))]
    if mutant.is_some() {
        return Err("this build has no mutants: build with the feature `mutants`".to_string());
    }
    Ok(())
}

/// Schedules run under the read lock; the check of a mutant's violating
/// schedule on the real code switches the mutant off under the write lock.
static SWITCH: RwLock<()> = RwLock::new(());

/// Whether the real code passes case `case`'s schedule `choices`, which
/// broke an invariant under `mutant`: only then is the mutant found there.
/// (A schedule that takes another path on the real code passes when that
/// path breaks nothing.)
fn real_code_passes(case: &Case, bounds: Bounds, choices: &[u8], mutant: Option<Mutant>) -> bool {
    let _alone = SWITCH.write().unwrap_or_else(|e| e.into_inner());
    let _ = switch(None);
    let real = execute(case, bounds, choices.to_vec(), false);
    let _ = switch(mutant);
    real.violations.len() == usize::from(real.diverged)
}

/// The digits of a schedule's choices; `-` is the schedule of first
/// options only.
const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";

fn encode(choices: &[u8]) -> String {
    if choices.is_empty() {
        return "-".to_string();
    }
    choices
        .iter()
        .map(|&c| char::from(DIGITS[usize::from(c).min(DIGITS.len() - 1)]))
        .collect()
}

fn decode(text: &str) -> Option<Vec<u8>> {
    if text == "-" {
        return Some(Vec::new());
    }
    text.bytes()
        .map(|b| {
            DIGITS
                .iter()
                .position(|&d| d == b)
                .and_then(|i| u8::try_from(i).ok())
        })
        .collect()
}

/// What exploring one case found.
#[derive(Debug, Clone, Default)]
struct Explored {
    schedules: u64,
    depth: u64,
    violating: u64,
    found: Vec<Found>,
    /// Schedules run up to the first violating one.
    first: Option<u64>,
    /// Under a mutant: violating schedules the real code breaks too.
    shared: u64,
}

/// Every schedule of case `i` within `bounds`, depth first; when `stop`
/// is given, only until this case or an earlier one (its index there)
/// finds a violation. Under `mutant`, a violation counts only where the
/// real code passes the same schedule.
fn explore(
    cases: &[Case],
    i: usize,
    bounds: Bounds,
    stop: Option<&AtomicUsize>,
    mutant: Option<Mutant>,
) -> Explored {
    let case = &cases[i];
    let mut done = Explored::default();
    let mut prefix = Some(Vec::new());
    while let Some(replay) = prefix {
        if stop.is_some_and(|s| s.load(Ordering::SeqCst) < i) {
            break;
        }
        let run = {
            let _shared = SWITCH.read().unwrap_or_else(|e| e.into_inner());
            execute(case, bounds, replay, false)
        };
        done.schedules += 1;
        done.depth = done.depth.max(run.steps);
        prefix = run.next;
        let Some(first) = run.violations.first() else {
            continue;
        };
        if mutant.is_some() && !real_code_passes(case, bounds, &run.choices, mutant) {
            done.shared += 1;
            continue;
        }
        done.violating += 1;
        done.first.get_or_insert(done.schedules);
        if done.found.len() < KEPT {
            done.found.push(Found {
                case: i,
                name: case.name(),
                choices: encode(&run.choices),
                violation: first.clone(),
            });
        }
        if let Some(stop) = stop {
            stop.fetch_min(i, Ordering::SeqCst);
            break;
        }
    }
    done
}

/// One execution.
struct Execution {
    choices: Vec<u8>,
    /// The next execution's prefix in depth-first order, if any.
    next: Option<Vec<u8>>,
    violations: Vec<String>,
    /// Whether it did not follow its choices (one of its violations).
    diverged: bool,
    steps: u64,
    trace: Vec<String>,
}

/// Run `case` once, replaying `replay` then taking first options.
fn execute(case: &Case, bounds: Bounds, replay: Vec<u8>, trace: bool) -> Execution {
    let exec = Arc::new(Exec::new(
        world_of(case, trace),
        Chooser::new(replay),
        bounds,
        case.programs.len(),
    ));
    let threads: Vec<_> = case
        .programs
        .iter()
        .enumerate()
        .map(|(p, &program)| {
            let exec = Arc::clone(&exec);
            pool::run(move || process(&exec, p, program))
        })
        .collect();
    exec.drive();
    for finished in threads {
        let _ = finished.recv();
    }
    let mut s = exec.lock();
    s.w.finish();
    crate::check::check(&mut s.w);
    let diverged = s.chooser.diverged();
    if diverged {
        s.w.violations.push(
            "replay: the execution did not follow its choices (the code under test is not \
             deterministic in them)"
                .to_string(),
        );
    }
    Execution {
        choices: s.chooser.choices(),
        next: s.chooser.next(0),
        violations: std::mem::take(&mut s.w.violations),
        diverged,
        steps: s.steps,
        trace: s.w.trace.take().unwrap_or_default(),
    }
}

/// Process `p`'s thread: its program on the real code, when its turn
/// comes.
fn process(exec: &Arc<Exec>, p: usize, program: &Program) {
    crate::sched::set_current(p);
    if !exec.begin(p) {
        return;
    }
    match catch_unwind(AssertUnwindSafe(|| programs::run(exec, p, program))) {
        Ok(()) => exec.end(p),
        Err(panic) if panic.is::<Abandoned>() => {}
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            exec.lock()
                .w
                .violation(format!("process c{p} panicked: {message}"));
            exec.end(p);
        }
    }
}

/// The world of one execution of `case`: the processes' clocks agree at
/// the start, the store is strict or has the case's one misbehaviour,
/// and no seeded fault is ever drawn.
fn world_of(case: &Case, trace: bool) -> World {
    let wall0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_780_000_000);
    let store = MemoryStore::new();
    let suspect = case.suspect.then(|| {
        // A dead holder's record stamped four TTLs ahead.
        let stamp = format_stamp(wall0 + Duration::from_secs(4 * TTL_S));
        LeaseRecord::new(GHOST, stamp.clone(), stamp, TTL_S, 7)
    });
    if let Some(rec) = &suspect {
        let _ = store.put(KEY, &rec.to_bytes(), &PutOptions::new(PutMode::Overwrite));
    }
    if let Some(switch) = case.switch {
        store.set(switch);
    }
    let contenders = case
        .programs
        .iter()
        .map(|program| world::Contender {
            ttl_s: program.ttl_s,
            program: true,
            skew_ms: 0,
            drift_ppm: 0,
            pauses: Vec::new(),
            partitions: Vec::new(),
            crashed: false,
            threads: Vec::new(),
            quiet: false,
            command: None,
            writing: None,
        })
        .collect();
    World {
        switch: case.switch,
        // As in the seeded runs: a suspect record's takeover is due
        // before any fault.
        faults_from: if case.suspect { 2 * TTL_S * SEC } else { 0 },
        suspect,
        trace: trace.then(Vec::new),
        shared_name: case.one_name.then_some((0, 1)),
        ..World::new(wall0, TTL_S, contenders, store)
    }
}
