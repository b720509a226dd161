//! `bucket-lease-bench URL [--iters N] [--renewals K] [--ttl S] [--json]` (also
//! `bucket-lease bench …`): how long taking, renewing and releasing a lease
//! takes against the user's own bucket, and what each costs the process in CPU.
//!
//! What it promises:
//!
//! - It never touches a real lease: every lease it takes is on a scratch
//!   prefix under the URL's, `{prefix}/bench-{8 random hex digits}`, and
//!   each is released before the next is taken. When it ends, however it
//!   ends (done, interrupted, or a failed request), it deletes the scratch
//!   `LEASE` object it created; if that delete fails it says which key is
//!   left.
//! - Each round is one acquire (a read, a conditional write and the probe's
//!   three refused writes), K renewals (one conditional write each) and one
//!   release (one conditional write of the released record).
//! - It measures with the code of the cargo bench (`measure.rs`, shared with
//!   `benches/renewal.rs`), so its table means what the bench's means:
//!   latency percentiles (nearest rank) and the spread of p50 across
//!   rounds, whole-process CPU per operation (median over rounds and its
//!   range), and a text histogram per operation; `--json` prints one object
//!   instead. Progress goes to stderr (not with `-q`).
//! - SIGINT or SIGTERM stops it after the current round, releasing the
//!   lease, and reports what was measured (exit 130 or 143). A failed
//!   request exits 69.
//! - It is bounded by `--timeout` (default 10 min): every request has that
//!   deadline (and at most the library's 30 s per call), opening the store
//!   is cut off at it, and once it passes `bench` releases its scratch
//!   leases within 2 s, removes them within 2 s more, and exits 69, saying
//!   so.
//! - `--interval` / `--duration` run at the cadence instead (`cadence/`):
//!   the same scratch prefix (one sub-prefix per lease with `--leases`),
//!   the same bounds, SIGINT and SIGTERM end it at once (while the leases
//!   are taken too), and the report is printed before `--csv` and `--plot`
//!   are written, so an export that fails loses nothing else.

use crate::args::{given, print_help, require_url, set_url, Arg, Args};
use crate::bench_options::{spec, Key, OPTIONS};
use crate::cli::{
    exit, lease_error_code, lease_error_summary, open_store, parse_count, parse_duration,
    parse_ttl, Failure, Timeout, WATCHDOG_SLACK,
};
use crate::measure::{self, Row};
use bucket_lease::record::{lease_key, longest_key_bytes, max_prefix_bytes, new_instance_id};
use bucket_lease::{lease::Exclusion, store::DeleteMode, Contender, LeaseOptions, Store};
use serde_json::{json, Value};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long `bench` may take by default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// How long the release and the removal of the scratch lease may take
/// after a failure or the `--timeout`.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(2);

const DEFAULT_ITERS: u64 = 20;
const DEFAULT_RENEWALS: u32 = 10;

/// Parse and run `bench`.
///
/// # Errors
///
/// A usage, configuration or store failure.
pub fn main(mut p: Args) -> Result<u8, Failure> {
    let cmd = p.command;
    let (mut url, mut iters, mut renewals, mut ttl_s, mut json, mut best_effort) =
        (None, DEFAULT_ITERS, DEFAULT_RENEWALS, 30, false, false);
    let mut limit = None;
    let mut cadence = CadenceArgs::default();
    let mut compare = None;
    while let Some(arg) = p.next(OPTIONS, true)? {
        match arg {
            Arg::Help => return Ok(print_help(&spec())),
            Arg::Opt(key, value) => {
                let value = given(value);
                match key {
                    Key::Iters => iters = parse_count(cmd, "--iters", &value)?,
                    // At most 10^6: the cast is exact.
                    Key::Renewals => renewals = parse_count(cmd, "--renewals", &value)? as u32,
                    Key::Ttl => ttl_s = parse_ttl(cmd, "--ttl", &value)?,
                    Key::Json => json = true,
                    Key::BestEffort => best_effort = true,
                    Key::Timeout => limit = Some(parse_duration(cmd, "--timeout", &value)?),
                    Key::Interval => {
                        cadence.interval = Some(parse_duration(cmd, "--interval", &value)?);
                    }
                    Key::Duration => {
                        cadence.duration = Some(parse_duration(cmd, "--duration", &value)?);
                    }
                    Key::Leases => cadence.leases = Some(parse_count(cmd, "--leases", &value)?),
                    Key::Csv => cadence.csv = Some(value.into()),
                    Key::Plot => cadence.plot = Some(value.into()),
                    Key::Compare => compare = Some(value),
                }
            }
            Arg::Word(word) => set_url(cmd, &mut url, word)?,
        }
    }
    if let Some(a) = compare {
        let b = require_url(cmd, url)?;
        return crate::cadence::command::compare_files(&a, &b, json);
    }
    let url = require_url(cmd, url)?;
    let cadence = cadence.plan(cmd, ttl_s)?;
    p.init_logging();
    let limit = limit.unwrap_or_else(|| match &cadence {
        Some(c) => DEFAULT_TIMEOUT.max(c.plan.duration + Duration::from_secs(120)),
        None => DEFAULT_TIMEOUT,
    });
    let timeout = Timeout::start(cmd, limit);
    // Opening the store takes no deadline; once it is open, every request
    // has one, and the scratch lease is cleaned up after a timeout.
    let watchdog = timeout.watchdog("opening the store", WATCHDOG_SLACK);
    let (store, prefix) = open_store(&url, &p.shared.store)?;
    drop(watchdog);
    let timed_out = |round: u64| timeout.failure(&format!("in round {round} of {iters}"));
    let mut signals = Signals::new([SIGINT, SIGTERM])
        .map_err(|e| Failure::new(exit::STORE, format!("bench: cannot handle signals: {e}")))?;
    let scratch = match prefix.trim_end_matches('/') {
        "" => format!("bench-{}", &new_instance_id()[..8]),
        p => format!("{p}/bench-{}", &new_instance_id()[..8]),
    };
    let mut options = LeaseOptions::new(ttl_s).best_effort_from_env();
    if best_effort {
        options = options.best_effort(true);
    }
    if let Some(cadence) = cadence {
        let scratch = crate::cadence::command::Scratch::new(&scratch, cadence.leases);
        check_scratch_room(&*store, &prefix, scratch.longest(), !best_effort)?;
        let _cleanup = ScratchLease {
            store: store.clone(),
            keys: scratch.prefixes().iter().map(|p| lease_key(p)).collect(),
        };
        let target = crate::cadence::command::Target {
            url: &url,
            store: &store,
            scratch: &scratch,
            options: &options,
            timeout: &timeout,
            quiet: p.shared.quiet,
            json,
        };
        return crate::cadence::command::run(&target, &cadence, &mut signals);
    }
    check_scratch_room(&*store, &prefix, &scratch, !best_effort)?;
    let _cleanup = ScratchLease {
        store: store.clone(),
        keys: vec![lease_key(&scratch)],
    };
    let progress = Progress::new(iters, p.shared.quiet);
    let (mut acquire, mut renew, mut release) =
        (Row::new("acquire"), Row::new("renew"), Row::new("release"));
    let mut exclusion = None;
    let mut interrupted = None;
    for i in 0..iters {
        if let Some(sig) = signals.pending().next() {
            interrupted = Some(sig);
            break;
        }
        if timeout.passed() {
            return Err(timed_out(i + 1));
        }
        let mut lease = None;
        acquire
            .batch(1, || {
                let mut contender = Contender::new(store.clone(), &scratch, options.clone());
                lease = Some(contender.try_acquire_before(timeout.call_deadline())?);
                Ok(())
            })
            .map_err(|e| {
                if timeout.passed() {
                    return timed_out(i + 1);
                }
                let code = match lease_error_code(&e) {
                    code @ (exit::NO_PERMISSION | exit::CONFIG) => code,
                    _ => exit::STORE,
                };
                let summary = lease_error_summary(&e);
                Failure::new(code, format!("bench: acquire {}: {summary}{e}", i + 1))
            })?;
        let Some(lease) = lease else {
            unreachable!("a successful acquire leaves its lease")
        };
        exclusion = Some(lease.exclusion());
        if let Err(e) = renew.batch(renewals, || lease.renew_before(timeout.call_deadline())) {
            let _ = lease.release_before(Instant::now().checked_add(CLEANUP_TIMEOUT));
            if timeout.passed() {
                return Err(timed_out(i + 1));
            }
            return Err(Failure::new(
                exit::STORE,
                format!("bench: renewal in round {}: {e}", i + 1),
            ));
        }
        release
            .batch(1, || {
                lease.release_before(timeout.call_deadline()).map(drop)
            })
            .map_err(|e| {
                if timeout.passed() {
                    return timed_out(i + 1);
                }
                Failure::new(exit::STORE, format!("bench: release {}: {e}", i + 1))
            })?;
        progress.update(i + 1);
    }
    progress.done();
    let rows = [acquire, renew, release];
    let write_interval = store.write_interval();
    let exclusion = match exclusion {
        Some(Exclusion::BestEffort) => "best-effort",
        _ => "conditional",
    };
    let rounds = rows[0].latencies.len();
    if json {
        let mut out = json!({
            "url": url,
            "prefix": scratch,
            "iterations": rounds,
            "renewals_per_round": renewals,
            "exclusion": exclusion,
        });
        if let Value::Object(map) = &mut out {
            if let Some(interval) = write_interval {
                map.insert("write_interval_s".into(), json!(interval.as_secs_f64()));
            }
            for row in &rows {
                let mut out = measure::row_json(row);
                if let Value::Object(fields) = &mut out {
                    // Every sample, in the order measured (issue 32).
                    let samples: Vec<Value> = row
                        .latencies
                        .iter()
                        .map(|d| json!((d.as_secs_f64() * 1e6).round() / 1e3))
                        .collect();
                    fields.insert("samples_ms".into(), Value::Array(samples));
                }
                map.insert(row.name.clone(), out);
            }
        }
        println!("{out}");
    } else {
        println!(
            "bench {url}: {rounds} rounds of acquire, {renewals} renewals, release \
             on scratch prefix {scratch} ({exclusion} lease)"
        );
        for line in measure::render_text(&measure::without_empty_columns(&measure::table(
            &rows, None, None,
        ))) {
            println!("{line}");
        }
        for row in &rows {
            println!("\n{} latency", row.name);
            for line in measure::histogram(&row.latencies) {
                println!("{line}");
            }
        }
        println!("\nCPU is the whole process's (CLOCK_PROCESS_CPUTIME_ID) per operation; system calls: see --help.");
        if let Some(interval) = write_interval {
            println!(
                "This store takes one write of a key every {interval:?}: each renewal and release \
                 here waited for its turn after the write before it, and each acquire writes its \
                 record twice, an interval apart; the latencies include those waits."
            );
        }
    }
    match interrupted {
        Some(sig) => {
            let _ = writeln!(
                std::io::stderr(),
                "bucket-lease: bench: interrupted after {rounds} rounds"
            );
            Ok(crate::cli::signal_exit_code(sig))
        }
        None => Ok(exit::OK),
    }
}

/// A configuration failure, before anything is created, when the scratch
/// lease's probe key would be longer than the store's keys may be: the
/// scratch prefix is longer than the URL's, so a prefix that holds a lease
/// may still be too long to bench. A best-effort lease (`probe` false)
/// needs room for its own key only.
fn check_scratch_room(
    store: &dyn Store,
    prefix: &str,
    scratch: &str,
    probe: bool,
) -> Result<(), Failure> {
    let Some(limit) = store.max_key_bytes() else {
        return Ok(());
    };
    let needed = longest_key_bytes(&lease_key(scratch), probe);
    if needed <= limit {
        return Ok(());
    }
    let extra = scratch.len() - prefix.trim_end_matches('/').len();
    let longest = max_prefix_bytes(limit, probe);
    Err(Failure::new(
        exit::CONFIG,
        format!(
            "bench: the prefix is {} bytes, and bench works under a scratch prefix {extra} bytes \
             longer (PREFIX/bench-XXXXXXXX), where its keys would be up to {needed} bytes, over the \
             store's limit of {limit} bytes per key; nothing was created. Bench a prefix of at \
             most {} bytes (a lease itself fits a prefix of up to {longest} bytes)",
            prefix.len(),
            longest.saturating_sub(extra),
        ),
    ))
}

/// Progress on stderr: a line rewritten in place on a terminal, else a line
/// every tenth of the rounds.
struct Progress {
    total: u64,
    quiet: bool,
    terminal: bool,
}

impl Progress {
    fn new(total: u64, quiet: bool) -> Self {
        Progress {
            total,
            quiet,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    fn update(&self, done: u64) {
        if self.quiet {
            return;
        }
        let mut err = std::io::stderr().lock();
        if self.terminal {
            let _ = write!(err, "\rbench: {done}/{} rounds", self.total);
            let _ = err.flush();
        } else if done == self.total || done.is_multiple_of((self.total / 10).max(1)) {
            let _ = writeln!(err, "bench: {done}/{} rounds", self.total);
        }
    }

    fn done(&self) {
        if !self.quiet && self.terminal {
            let _ = writeln!(std::io::stderr());
        }
    }
}

/// The scratch `LEASE` objects, deleted when the bench ends however it
/// ends: they are the bench's own keys, named at random, and never a real
/// lease. All of them within [`CLEANUP_TIMEOUT`].
pub struct ScratchLease {
    pub store: Arc<dyn Store>,
    pub keys: Vec<String>,
}

impl Drop for ScratchLease {
    fn drop(&mut self) {
        let deadline = Instant::now() + CLEANUP_TIMEOUT;
        for key in &self.keys {
            match self
                .store
                .delete(key, &DeleteMode::Unconditional, Some(deadline))
            {
                Ok(()) => log::debug!("removed the scratch lease {key}"),
                Err(e) => {
                    log::warn!("could not remove the scratch lease {key} (remove it by hand): {e}")
                }
            }
        }
    }
}

/// The cadence options as given, before they are checked.
#[derive(Debug, Default)]
struct CadenceArgs {
    interval: Option<Duration>,
    duration: Option<Duration>,
    leases: Option<u64>,
    csv: Option<std::path::PathBuf>,
    plot: Option<std::path::PathBuf>,
}

impl CadenceArgs {
    /// The cadence run asked for (`None`: back to back), checked against
    /// the TTL.
    fn plan(
        self,
        cmd: &'static str,
        ttl_s: u64,
    ) -> Result<Option<crate::cadence::command::Cadence>, Failure> {
        use crate::cadence::command::Cadence;
        use crate::cadence::Plan;
        if self.interval.is_none() && self.duration.is_none() {
            for (given, name) in [
                (self.leases.is_some(), "--leases"),
                (self.csv.is_some(), "--csv"),
                (self.plot.is_some(), "--plot"),
            ] {
                if given {
                    return Err(Failure::usage(
                        cmd,
                        format!(
                            "{name} belongs to a cadence run: give --interval or --duration too"
                        ),
                    ));
                }
            }
            return Ok(None);
        }
        let third = Duration::from_millis(ttl_s * 1000 / 3);
        let fence = Duration::from_millis(ttl_s * 2000 / 3);
        let interval = self.interval.unwrap_or(third);
        if interval.is_zero() || interval >= fence {
            return Err(Failure::usage(
                cmd,
                format!(
                    "--interval {}: a renewal every interval must come before the fence, two \
                     thirds of the TTL ({} at --ttl {ttl_s}); give a shorter --interval or a \
                     longer --ttl",
                    crate::cli::human_secs(interval.as_secs_f64()),
                    crate::cli::human_secs(fence.as_secs_f64()),
                ),
            ));
        }
        let plan = Plan {
            interval,
            duration: self.duration.unwrap_or(Duration::from_secs(60)),
        };
        if plan.renewals() == 0 {
            return Err(Failure::usage(
                cmd,
                "--duration is shorter than one --interval: no renewal would be due",
            ));
        }
        let leases = self.leases.unwrap_or(1);
        if leases > 1000 {
            return Err(Failure::usage(cmd, "--leases: at most 1000"));
        }
        Ok(Some(Cadence {
            plan,
            // At most 1000: exact.
            leases: leases as u32,
            csv: self.csv,
            plot: self.plot,
        }))
    }
}
