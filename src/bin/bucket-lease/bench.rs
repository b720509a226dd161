//! `bucket-lease bench URL [--iters N] [--renewals K] [--ttl S] [--json]`:
//! how long taking, renewing and releasing a lease takes against the user's
//! own bucket, and what each costs the process in CPU.
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

use crate::measure::{self, Row};
use crate::{
    exit, lease_error_code, lease_error_summary, open_store, parse_ttl, require_url, set_url,
    Failure, Parser, Token,
};
use bucket_lease::record::{lease_key, longest_key_bytes, max_prefix_bytes, new_instance_id};
use bucket_lease::{DeleteMode, Exclusion, Lease, LeaseOptions, Store};
use serde_json::{json, Value};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `bucket-lease bench --help`.
pub const HELP: &str = "\
bucket-lease bench: measure acquire, renew and release against URL's bucket.

Usage: bucket-lease bench [OPTIONS] URL

Takes, renews and releases a lease N times on a scratch prefix under URL's
({prefix}/bench-XXXXXXXX), never on the real lease, and prints per operation
the latency (p50, the range of p50 across rounds, p99, max), the CPU the
whole process spent (median over rounds, and its range) and a histogram. An
acquire is six requests (a read, the write, and the probe's four: three
refused writes that check the service honours conditions, one accepted on
the record's own ETag, the write a renewal is); a renewal one; a
release one. The table is the one `cargo bench --bench renewal` prints
(docs/BENCHMARKS.md).

Options:
  --iters N       how many acquire/renew/release rounds (default 20)
  --renewals K    renewals per round (default 10)
  --ttl S         the TTL of the scratch leases in whole seconds, 1 to 3600 (default 30)
  --best-effort   measure a best-effort lease (also BUCKET_LEASE_CONDITIONAL=off)
  --json          one JSON object on stdout
  -v, -q          more or less on stderr (-q: no progress)
  -h, --help      this help

System calls per renewal (not counted in-process): run it twice under
strace with different --renewals and divide the difference:
  strace -f -c -o a.txt bucket-lease bench -q --iters 1 --renewals 100 URL
  strace -f -c -o b.txt bucket-lease bench -q --iters 1 --renewals 600 URL
  (total calls in b.txt - total calls in a.txt) / 500
";

const DEFAULT_ITERS: u64 = 20;
const DEFAULT_RENEWALS: u32 = 10;

fn whole(cmd: &'static str, flag: &str, value: &str) -> Result<u64, Failure> {
    match value.parse::<u64>() {
        Ok(n) if (1..=1_000_000).contains(&n) => Ok(n),
        _ => Err(Failure::usage(
            cmd,
            format!("{flag}: expected a whole number from 1 to 1000000, got {value:?}"),
        )),
    }
}

/// Parse and run `bench`.
///
/// # Errors
///
/// A usage, configuration or store failure.
pub fn main(mut p: Parser) -> Result<u8, Failure> {
    let cmd = p.command;
    let (mut url, mut iters, mut renewals, mut ttl_s, mut json, mut best_effort) =
        (None, DEFAULT_ITERS, DEFAULT_RENEWALS, 30, false, false);
    while let Some(tok) = p.option()? {
        match tok {
            Token::Help => return Ok(crate::print_help(HELP)),
            Token::Long(ref name, _) if name == "iters" => {
                iters = whole(cmd, "--iters", &p.value(&tok)?)?;
            }
            Token::Long(ref name, _) if name == "renewals" => {
                renewals = whole(cmd, "--renewals", &p.value(&tok)?)? as u32;
            }
            Token::Long(ref name, _) if name == "ttl" => {
                ttl_s = parse_ttl(cmd, "--ttl", &p.value(&tok)?)?;
            }
            Token::Long(ref name, _) if name == "json" => {
                p.flag(&tok)?;
                json = true;
            }
            Token::Long(ref name, _) if name == "best-effort" => {
                p.flag(&tok)?;
                best_effort = true;
            }
            Token::Word(word) => set_url(cmd, &mut url, word)?,
            other => return Err(p.unexpected(&other)),
        }
    }
    let url = require_url(cmd, url)?;
    p.init_logging();
    let (store, prefix) = open_store(&url)?;
    let mut signals = Signals::new([SIGINT, SIGTERM])
        .map_err(|e| Failure::new(exit::STORE, format!("bench: cannot handle signals: {e}")))?;
    let scratch = match prefix.trim_end_matches('/') {
        "" => format!("bench-{}", &new_instance_id()[..8]),
        p => format!("{p}/bench-{}", &new_instance_id()[..8]),
    };
    let mut options = LeaseOptions::from_env(ttl_s);
    if best_effort {
        options = options.best_effort(true);
    }
    check_scratch_room(&*store, &prefix, &scratch, !best_effort)?;
    let _cleanup = ScratchLease {
        store: store.clone(),
        key: lease_key(&scratch),
    };
    let progress = Progress::new(iters, p.quiet);
    let (mut acquire, mut renew, mut release) =
        (Row::new("acquire"), Row::new("renew"), Row::new("release"));
    let mut exclusion = None;
    let mut interrupted = None;
    for i in 0..iters {
        if let Some(sig) = signals.pending().next() {
            interrupted = Some(sig);
            break;
        }
        let mut lease = None;
        acquire
            .batch(1, || {
                lease = Some(Lease::acquire(store.clone(), &scratch, options.clone())?);
                Ok(())
            })
            .map_err(|e| {
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
        if let Err(e) = renew.batch(renewals, || lease.renew()) {
            let _ = lease.release();
            return Err(Failure::new(
                exit::STORE,
                format!("bench: renewal in round {}: {e}", i + 1),
            ));
        }
        release
            .batch(1, || lease.release().map(drop))
            .map_err(|e| Failure::new(exit::STORE, format!("bench: release {}: {e}", i + 1)))?;
        progress.update(i + 1);
    }
    progress.done();
    let rows = [acquire, renew, release];
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
            for row in &rows {
                map.insert(row.name.clone(), measure::row_json(row));
            }
        }
        println!("{out}");
    } else {
        println!(
            "bench {url}: {rounds} rounds of acquire, {renewals} renewals, release \
             on scratch prefix {scratch} ({exclusion} lease)"
        );
        for line in measure::render_text(&measure::table(&rows, None, None)) {
            println!("{line}");
        }
        for row in &rows {
            println!("\n{} latency", row.name);
            for line in measure::histogram(&row.latencies) {
                println!("{line}");
            }
        }
        println!("\nCPU is the whole process's (CLOCK_PROCESS_CPUTIME_ID) per operation; system calls: see --help.");
    }
    match interrupted {
        Some(sig) => {
            eprintln!("bucket-lease: bench: interrupted after {rounds} rounds");
            Ok(crate::signal_exit_code(sig))
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
            eprintln!();
        }
    }
}

/// The scratch `LEASE` object, deleted when the bench ends however it
/// ends: it is the bench's own key, named at random, and never a real
/// lease.
struct ScratchLease {
    store: Arc<dyn Store>,
    key: String,
}

impl Drop for ScratchLease {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        match self
            .store
            .delete(&self.key, &DeleteMode::Unconditional, Some(deadline))
        {
            Ok(()) => log::debug!("removed the scratch lease {}", self.key),
            Err(e) => log::warn!(
                "could not remove the scratch lease {} (remove it by hand): {e}",
                self.key
            ),
        }
    }
}
