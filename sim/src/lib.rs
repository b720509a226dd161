//! Deterministic simulation of several contenders on one lease, under
//! faults, on simulated true time; and the checker of its invariants.
//! A crate of the workspace for tests and CI (`scripts/simulate.sh`), never
//! published: it drives the core's internals (feature `internals`).
//!
//! One seed fixes a whole run: 3 to 5 contenders on one key, each with its
//! own wall-clock skew (within a sixth of the TTL either way, so any two
//! disagree by less than a third), steps of that skew and a rate drift; a
//! store that answers like S3 or has one misbehaviour switch on; and
//! faults on requests (dropped, 5xx, 409, landing up to two TTLs late,
//! answer lost after landing, slow answers), contenders partitioned from
//! the store or paused for up to two TTLs, the holder crashing without
//! releasing, (some runs) a dead holder's suspect record on the key at
//! the start, and (some runs) two contenders configured with one instance
//! id, each a process of its own with its own nonce. Each contender runs
//! the real [`bucket_lease_core::Contender`], keeps its lease with the
//! core's keeper driver (`bucket_lease_core::keeper::driver::keep`, the
//! loop the keeper's thread runs) on a simulated thread (`driven.rs`),
//! writes through the real [`bucket_lease_core::FencedWriter`] while
//! `may_write()` (a create-only data object, then the pointer moved to
//! it), and runs a command whose death `bucket-lease run`'s real
//! `bucket_lease_core::supervision::Plan` decides (both hidden from the
//! core's docs: the feature `internals` makes them public, with no page,
//! so they are named here without a link). In about a third of
//! the runs, one or two more processes each run a random program of public
//! calls over one or two keys, with up to two live `Lease` values per key,
//! taking a key again after `Fenced` while the old value lives
//! (`program.rs`, which says which calls are the real code). Blocking
//! calls take simulated time: see `env.rs` and `sched.rs`.
//!
//! Holders are told apart by `Lease` value, one per acquire call
//! (`values.rs`), so two values of one process are two holders. Checked
//! on every run, on true time and on each key: **safety** (no two values
//! inside a write window at once: a write from `may_write()` at its send
//! to its answer, or a command alive), **fencing tokens** (each new
//! value's windows carry a higher epoch), **fail closed** (no lease on a store that
//! ignores a write condition, sends none, or returns no ETag),
//! **liveness** (after the holder crashes, another contender holds within
//! the bound in `check.rs`; a suspect record is taken over within two
//! TTLs), **no loss** (a live record is replaced or removed only by its
//! holder's process, or once stale on true time; a suspect one not before
//! its watch; and a record whose `Lease` lives and may write never by
//! another value of its own process), **pointers** (every state of the pointer names an existing
//! object written at the pointer's epoch or later, and its epoch never
//! goes back), **deadlines** (no call returns past its deadline unless
//! its contender was paused) and **the store contract** the lease relies
//! on (no request leaves after its caller's deadline; no store call
//! returns later than its deadline plus a small slack). The simulated
//! store keeps that contract except under the mutant `store-sends-late`.

mod actor;
mod answers;
mod check;
mod driven;
mod env;
pub mod explore;
mod mutants;
mod pooled;
mod program;
mod rng;
mod sched;
mod values;
mod world;

use self::rng::Rng;
use self::sched::{Ev, Nanos, Sched, Shared, SEC};
use self::world::{Contender, Injected, Rates, World};
use bucket_lease_core::memory::{MemoryStore, Misbehaviour};
use bucket_lease_core::record::{format_stamp, LeaseRecord, MAX_SANE_TTL_S};
use bucket_lease_core::store::{PutMode, PutOptions, Store};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime};

/// What one run found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The run's seed.
    pub seed: u64,
    /// Each invariant broken, with when and by whom; empty when none was.
    pub violations: Vec<String>,
    /// Faults injected, by kind.
    pub injected: BTreeMap<&'static str, u64>,
    /// What the checker looked at, by kind: write windows, pointer states,
    /// takeovers after a crash and of a suspect record.
    pub checked: BTreeMap<&'static str, u64>,
    /// The run's readable trace, when asked for.
    pub trace: Vec<String>,
    /// A one-line description of the run's set-up.
    pub setup: String,
}

/// The names of the defects that can be reintroduced (feature `mutants`).
pub fn mutant_names() -> Vec<&'static str> {
    mutants::ALL.iter().map(|(_, name)| *name).collect()
}

/// Run the simulation of `seed`, on the mutant named `mutant` if any, with
/// its trace when `trace` is true.
///
/// # Errors
///
/// When `mutant` names no mutant, or this build lacks the feature
/// `mutants`.
pub fn run(seed: u64, mutant: Option<&str>, trace: bool) -> Result<Outcome, String> {
    let chosen = match mutant {
        None => None,
        Some(name) => {
            Some(mutants::named(name).ok_or_else(|| format!("no mutant named {name:?}"))?)
        }
    };
    #[cfg(feature = "mutants")]
    bucket_lease_core::mutant::select(chosen);
    #[cfg(not(feature = "mutants"))]
    if chosen.is_some() {
        return Err("this build has no mutants: build with the feature `mutants`".to_string());
    }
    Ok(simulate(seed, trace))
}

fn simulate(seed: u64, trace: bool) -> Outcome {
    let mut rng = Rng::new(seed);
    let n = usize::try_from(rng.range(3, 6)).unwrap_or(3);
    let ttl_s = [3, 5, 10, 20, 30][usize::try_from(rng.range(0, 5)).unwrap_or(0)];
    let ttl = ttl_s * SEC;
    let run_len = ttl * rng.range(8, 17);
    let switch = if rng.chance(3000) {
        let all = [
            Misbehaviour::IgnoreIfNoneMatch,
            Misbehaviour::IgnoreIfMatch,
            Misbehaviour::CreateOnIfMatchAbsent,
            Misbehaviour::IgnoreIfMatchOnDelete,
            Misbehaviour::IgnoreIfMatchOnDelete,
            Misbehaviour::NoEtags,
            Misbehaviour::NoConditions,
            Misbehaviour::RefuseOwnEtag,
        ];
        Some(all[usize::try_from(rng.range(0, 8)).unwrap_or(0)])
    } else {
        None
    };
    let rates = match rng.range(0, 20) {
        0..=4 => NO_FAULTS,
        5..=11 => Rates {
            drop: 20,
            fail: 20,
            conflict: 20,
            late: 20,
            lost: 20,
            slow: 20,
        },
        _ => Rates {
            drop: 150,
            fail: 150,
            conflict: 200,
            late: 150,
            lost: 150,
            slow: 100,
        },
    };
    let crash_at = rng.chance(3500).then(|| rng.range(ttl, run_len / 2));
    let faults_until = crash_at.unwrap_or(u64::MAX);
    let wall0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_780_000_000);
    let suspect = rng
        .chance(1500)
        .then(|| suspect_record(&mut rng, ttl_s, wall0));
    // A suspect run is quiet until the record's takeover is due.
    let faults_from = if suspect.is_some() { 2 * ttl } else { 0 };
    let clip = |spans: Vec<(u64, u64)>| -> Vec<(u64, u64)> {
        spans
            .into_iter()
            .filter(|(a, b)| *a < faults_until && *b > faults_from)
            .map(|(a, b)| (a.max(faults_from), b.min(faults_until)))
            .collect()
    };
    let skew_limit = i64::try_from(ttl_s * 1000 * 15 / 100).unwrap_or(0);
    let huge_ttl = rng.chance(3000).then(|| rng.range(0, n as u64));
    let mut contenders = Vec::new();
    let mut steps = Vec::new();
    for c in 0..n {
        let skew_ms = rng.range_i(-skew_limit, skew_limit + 1);
        let drift_ppm = rng.range_i(-100, 101);
        for _ in 0..rng.range(0, 3) {
            let at = rng.range(0, run_len);
            steps.push((at, c, rng.range_i(-skew_limit, skew_limit + 1)));
        }
        let mut pauses = Vec::new();
        for _ in 0..rng.range(0, 3) {
            let at = rng.range(0, run_len);
            pauses.push((at, at + rng.range(ttl / 10, ttl * 22 / 10)));
        }
        let mut partitions = Vec::new();
        for _ in 0..rng.range(0, 3) {
            let at = rng.range(0, run_len);
            partitions.push((at, at + rng.range(ttl / 10, 2 * ttl)));
        }
        contenders.push(Contender {
            quiet: false,
            program: false,
            ttl_s: if huge_ttl == Some(c as u64) {
                4000
            } else {
                ttl_s
            },
            skew_ms,
            drift_ppm,
            pauses: clip(pauses),
            partitions: clip(partitions),
            crashed: false,
            threads: Vec::new(),
            command: None,
            writing: None,
        });
    }
    // Some runs add a process that keeps several leases in one pool, one
    // of them black-holed after it is taken and one removed on the way;
    // some of those pools are jammed (`pooled::maybe_jammed`).
    // (On a store that answers like S3 or ignores only DELETE conditions:
    // elsewhere no lease is ever handed out.)
    let strict = matches!(switch, None | Some(Misbehaviour::IgnoreIfMatchOnDelete));
    let pool = (rng.chance(1500) && strict).then(|| {
        let leases = usize::try_from(rng.range(3, 9)).unwrap_or(3);
        contenders.push(Contender {
            quiet: true,
            program: false,
            ttl_s,
            skew_ms: rng.range_i(-skew_limit, skew_limit + 1),
            drift_ppm: rng.range_i(-100, 101),
            pauses: Vec::new(),
            partitions: Vec::new(),
            crashed: false,
            threads: Vec::new(),
            command: None,
            writing: None,
        });
        let run = pooled::PoolRun {
            contender: n,
            leases,
            threads: usize::try_from(rng.range(2, 4)).unwrap_or(2),
            hole: "sim/pool-0/LEASE".to_string(),
            hole_from: rng.range(ttl, 3 * ttl),
            hole_deadline: None,
            removed: Some((
                format!("sim/pool-{}/LEASE", leases - 1),
                rng.range(ttl, run_len / 2),
            )),
            events: Vec::new(),
            ttls: vec![ttl_s; leases],
            jammed: false,
            inline: inline_pool(seed),
            deadlines: vec![None; leases],
            fenced: Vec::new(),
            started: 0,
        };
        pooled::maybe_jammed(run, &mut rng, ttl_s)
    });
    // Some runs add program processes (`program.rs`), drawn from a stream
    // of their own.
    let programs = program::draw(seed, contenders.len(), ttl_s, run_len);
    // Some runs are on R2, one accepted write of a key a second, drawn from
    // a stream of their own (every TTL drawn is at least 3 s, R2's
    // shortest); not with a pool, whose jammed leases take shorter ones.
    let write_limit = (pool.is_none()
        && Rng::new(seed.rotate_left(23) ^ 0x0000_0002_0000_0429).chance(2000))
    .then_some(SEC);
    for plan in &programs {
        contenders.push(Contender {
            quiet: false,
            program: true,
            ttl_s,
            skew_ms: plan.skew_ms,
            drift_ppm: plan.drift_ppm,
            pauses: clip(plan.pauses.clone()),
            partitions: clip(plan.partitions.clone()),
            crashed: false,
            threads: Vec::new(),
            command: None,
            writing: None,
        });
    }
    let end = match crash_at {
        Some(t) => run_len.max(t + 4 * ttl + 3 * SEC),
        None => run_len,
    };
    let store = MemoryStore::new();
    if let Some(rec) = &suspect {
        let _ = store.put(
            world::KEY,
            &rec.to_bytes(),
            &PutOptions::new(PutMode::Overwrite),
        );
    }
    if let Some(s) = switch {
        store.set(s);
    }
    let setup = format!(
        "seed {seed}: {n} contenders, ttl {ttl_s} s{}, store {}, request faults {}, crash {}, {:.0} s",
        huge_ttl.map_or(String::new(), |c| format!(" (c{c}: 4000 s)")),
        switch.map_or("strict".to_string(), |s| format!("{s:?}"))
            + if write_limit.is_some() {
                " with R2's write limit (one a key a second)"
            } else {
                ""
            },
        if rates.drop == 0 {
            "none"
        } else if rates.drop < 100 {
            "low"
        } else {
            "high"
        },
        crash_at.map_or("none".to_string(), |t| format!("at {:.1} s", world::secs(t))),
        world::secs(end)
    ) + &pool.as_ref().map_or(String::new(), |p| {
        format!(
            ", a pool of {} leases on {} renewal threads{} (c{}{})",
            p.leases,
            p.threads,
            if p.inline { ", renewing inline" } else { "" },
            p.contender,
            if p.jammed {
                format!(", jammed: ttls {:?} s", p.ttls)
            } else {
                String::new()
            }
        )
    }) + &if programs.is_empty() {
        String::new()
    } else {
        program::describe(&programs)
    } + &suspect.as_ref().map_or(String::new(), |r| {
        format!(
            ", starts with a suspect record (renewed_at {}, ttl {} s, epoch {})",
            r.renewed_at, r.ttl_s, r.epoch
        )
    });
    let mut w = World {
        rng,
        warm_up_rng: Rng::new(seed ^ 0x5741_524D_5550),
        switch,
        rates,
        faults_from,
        faults_until,
        suspect,
        trace: trace.then(Vec::new),
        pool,
        write_limit,
        ..World::new(wall0, ttl_s, contenders, store)
    };
    w.shared_name = shared_name(seed, n);
    let setup = setup
        + &w.shared_name.map_or(String::new(), |(owner, namesake)| {
            format!(", c{namesake} runs under c{owner}'s instance id")
        });
    if w.shared_name.is_some() {
        w.injected.add("shared instance id");
    }
    w.log(|| setup.clone());
    if let Some(t) = w.trace.as_mut() {
        t.push(
            "            (left: true time in s; every monotonic clock runs at true time; each wall clock is off by its skew, shown as [cN wall ±s] on each request)"
                .to_string(),
        );
    }
    for (c, k) in w.contenders.iter().enumerate() {
        let (skew, drift, ttl_c) = (k.skew_ms, k.drift_ppm, k.ttl_s);
        let (pauses, parts) = (k.pauses.clone(), k.partitions.clone());
        if let Some(t) = w.trace.as_mut() {
            t.push(format!(
                "            c{c}: ttl {ttl_c} s, wall clock {skew:+} ms, drift {drift:+} ppm, pauses \
                 {:?}, partitions {:?}",
                spans(&pauses),
                spans(&parts)
            ));
        }
    }
    for (c, k) in w.contenders.iter().enumerate() {
        for _ in &k.pauses {
            w.injected.add("pause");
        }
        for _ in &k.partitions {
            w.injected.add("partition");
        }
        let _ = c;
    }
    if w.suspect.is_some() {
        w.injected.add("suspect record");
    }
    for (at, c, skew_ms) in steps {
        w.push(at, Ev::Step { c, skew_ms });
    }
    if let Some(t) = crash_at {
        w.push(t, Ev::CrashHolder);
    }
    let pool_contender = w.pool.as_ref().map(|p| p.contender);
    let sh = Shared::new(w);
    for c in 0..n {
        sh.spawn(c, move |sh| actor::contender(sh, c));
    }
    if let Some(c) = pool_contender {
        sh.spawn(c, move |sh| pooled::pool_holder(sh, c));
    }
    let program_count = programs.len() as u64;
    for plan in programs {
        sh.spawn(plan.contender, move |sh| program::process(sh, plan));
    }
    sh.run(end);
    let mut w = sh.lock();
    check::check(&mut w);
    for v in w.violations.clone() {
        if let Some(t) = w.trace.as_mut() {
            t.push(format!("VIOLATION {v}"));
        }
    }
    let mut checked = BTreeMap::new();
    checked.insert("write windows", w.windows.len() as u64);
    checked.insert("pointer states", w.pointer_checks);
    checked.insert("crash takeovers", u64::from(w.crash.is_some()));
    checked.insert("suspect takeovers", u64::from(w.suspect.is_some()));
    checked.insert(
        "pooled leases",
        w.pool.as_ref().map_or(0, |p| p.leases as u64),
    );
    checked.insert("shared instance ids", u64::from(w.shared_name.is_some()));
    checked.insert(
        "inline pools",
        u64::from(w.pool.as_ref().is_some_and(|p| p.inline)),
    );
    checked.insert(
        "jammed pools",
        u64::from(w.pool.as_ref().is_some_and(|p| p.jammed)),
    );
    checked.insert("program processes", program_count);
    checked.extend(w.drawn.counts.iter().map(|(k, v)| (*k, *v)));
    Outcome {
        seed,
        checked,
        violations: std::mem::take(&mut w.violations),
        injected: w.injected.counts.clone(),
        trace: w.trace.take().unwrap_or_default(),
        setup,
    }
}

/// No fault injected.
const NO_FAULTS: Rates = Rates {
    drop: 0,
    fail: 0,
    conflict: 0,
    late: 0,
    lost: 0,
    slow: 0,
};

impl World {
    /// A world of `contenders` (of TTL `ttl_s` by default) on `store`,
    /// wall clocks starting at `wall0`: no fault injected (nor a store
    /// switch, a suspect record, a pool, a shared instance id, a write
    /// limit or a trace), generators seeded with 0, and nothing sent,
    /// landed or checked yet. A run sets what it draws or is given over it
    /// (the seeded runs in [`simulate`], the explorer in `world_of`).
    pub(crate) fn new(
        wall0: SystemTime,
        ttl_s: u64,
        contenders: Vec<Contender>,
        store: MemoryStore,
    ) -> World {
        World {
            sched: Sched::default(),
            rng: Rng::new(0),
            warm_up_rng: Rng::new(0),
            base: Instant::now(),
            wall0,
            ttl_s,
            contenders,
            store,
            switch: None,
            rates: NO_FAULTS,
            faults_from: 0,
            faults_until: Nanos::MAX,
            suspect: None,
            pointer_epochs: HashMap::new(),
            pointer_checks: 0,
            requests: Vec::new(),
            windows: Vec::new(),
            grants: Vec::new(),
            crash: None,
            first_sent: HashMap::new(),
            last_landing_before_crash: 0,
            violations: Vec::new(),
            injected: Injected::default(),
            trace: None,
            put_answer: HashMap::new(),
            black_hole: None,
            pool: None,
            events: HashMap::new(),
            shared_name: None,
            values: Vec::new(),
            acting: HashMap::new(),
            record_writer: HashMap::new(),
            drawn: Injected::default(),
            write_limit: None,
            last_write: HashMap::new(),
        }
    }
}

/// Whether a pool run renews inline (`renewal_threads(0)`): one pool run
/// in three. From a stream of its own, so the rest of each seed's run is
/// what it was before this workload existed.
fn inline_pool(seed: u64) -> bool {
    Rng::new(seed.rotate_left(17) ^ 0x1A11_4E00_0000_0029).chance(3333)
}

/// In about one run in four, two of the `n` contenders configured with one
/// instance id (owner, namesake): two processes given one name, each with
/// its own nonce. Drawn from a stream of its own, so the rest of each
/// seed's run is what it was before this workload existed.
fn shared_name(seed: u64, n: usize) -> Option<(usize, usize)> {
    let mut rng = Rng::new(seed.rotate_left(29) ^ 0x0051_A3ED_0000_0019);
    if n < 2 || !rng.chance(2500) {
        return None;
    }
    let n = n as u64;
    let owner = rng.range(0, n);
    let namesake = (owner + rng.range(1, n)) % n;
    Some((owner as usize, namesake as usize))
}

/// The record of a dead holder that no contender can trust to expire on
/// time: stamped at least four TTLs ahead of true time, or with a TTL above
/// the sane maximum, or both.
fn suspect_record(rng: &mut Rng, ttl_s: u64, wall0: SystemTime) -> LeaseRecord {
    let ahead = match rng.range(0, 3) {
        0 => 0,
        _ => ttl_s * rng.range(4, 10_000),
    };
    let absurd = [MAX_SANE_TTL_S + 1, 86_400, 1_000_000_000, u64::MAX];
    let record_ttl = if ahead == 0 || rng.chance(5000) {
        absurd[usize::try_from(rng.range(0, 4)).unwrap_or(0)]
    } else {
        ttl_s
    };
    let stamp = format_stamp(wall0 + Duration::from_secs(ahead));
    LeaseRecord::new(
        world::GHOST,
        stamp.clone(),
        stamp,
        record_ttl,
        rng.range(1, 1000),
    )
}

fn spans(s: &[(u64, u64)]) -> Vec<String> {
    s.iter()
        .map(|(a, b)| format!("{:.2}-{:.2} s", world::secs(*a), world::secs(*b)))
        .collect()
}
