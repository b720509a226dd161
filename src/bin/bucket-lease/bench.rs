//! `bucket-lease bench URL [--iters N] [--ttl S] [--json]`: how long taking,
//! renewing and releasing a lease takes against the user's own bucket.
//!
//! What it promises:
//!
//! - It never touches a real lease: every lease it takes is on a scratch
//!   prefix under the URL's, `{prefix}/bench-{8 random hex digits}`, and
//!   each is released before the next is taken. When it ends, however it
//!   ends (done, interrupted, or a failed request), it deletes the scratch
//!   `LEASE` object it created; if that delete fails it says which key is
//!   left.
//! - Each iteration is one acquire (a read, a conditional write and the
//!   probe's three refused writes), one renewal (one conditional write) and
//!   one release (one conditional write of the released record), timed on
//!   the monotonic clock.
//! - It reports p50, p90, p99 and max per operation (nearest rank) and a
//!   text histogram; `--json` prints one object instead. Progress goes to
//!   stderr (not with `-q`).
//! - SIGINT or SIGTERM stops it after the current iteration, releasing the
//!   lease, and reports what was measured (exit 130 or 143). A failed
//!   request exits 69.

use crate::{
    exit, human_secs, lease_error_code, lease_error_summary, open_store, parse_ttl, require_url,
    set_url, Failure, Parser, Token,
};
use bucket_lease::record::{lease_key, new_instance_id};
use bucket_lease::{DeleteMode, Exclusion, Lease, LeaseOptions, Store};
use serde_json::{json, Value};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `bucket-lease bench --help`.
pub const HELP: &str = "\
bucket-lease bench: measure acquire, renew and release latency against URL's bucket.

Usage: bucket-lease bench [OPTIONS] URL

Takes, renews and releases a lease N times on a scratch prefix under URL's
({prefix}/bench-XXXXXXXX), never on the real lease, and prints p50, p90,
p99 and max latency per operation with a histogram. An acquire is five
requests (a read, the write, and the three refused writes of the probe that
checks the service honours conditions); a renewal one; a release one.

Options:
  --iters N       how many acquire/renew/release rounds (default 20)
  --ttl S         the TTL of the scratch leases in whole seconds, 1 to 3600 (default 30)
  --best-effort   measure a best-effort lease (also BUCKET_LEASE_CONDITIONAL=off)
  --json          one JSON object on stdout
  -v, -q          more or less on stderr (-q: no progress)
  -h, --help      this help
";

const DEFAULT_ITERS: u64 = 20;

/// Histogram bucket upper bounds, in milliseconds.
const EDGES_MS: [f64; 17] = [
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    20.0,
    50.0,
    100.0,
    200.0,
    500.0,
    1000.0,
    2000.0,
    5000.0,
    10000.0,
    f64::INFINITY,
];

/// Parse and run `bench`.
///
/// # Errors
///
/// A usage, configuration or store failure.
pub fn main(mut p: Parser) -> Result<u8, Failure> {
    let cmd = p.command;
    let (mut url, mut iters, mut ttl_s, mut json, mut best_effort) =
        (None, DEFAULT_ITERS, 30, false, false);
    while let Some(tok) = p.option()? {
        match tok {
            Token::Help => return Ok(crate::print_help(HELP)),
            Token::Long(ref name, _) if name == "iters" => {
                let value = p.value(&tok)?;
                iters = match value.parse::<u64>() {
                    Ok(n) if n > 0 => n,
                    _ => {
                        return Err(Failure::usage(
                            cmd,
                            format!("--iters: expected a whole number above 0, got {value:?}"),
                        ))
                    }
                };
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
    let _cleanup = ScratchLease {
        store: store.clone(),
        key: lease_key(&scratch),
    };
    let progress = Progress::new(iters, p.quiet);
    let (mut acquire, mut renew, mut release) = (Vec::new(), Vec::new(), Vec::new());
    let mut exclusion = None;
    let mut interrupted = None;
    for i in 0..iters {
        if let Some(sig) = signals.pending().next() {
            interrupted = Some(sig);
            break;
        }
        let started = Instant::now();
        let lease = Lease::acquire(store.clone(), &scratch, options.clone()).map_err(|e| {
            let code = match lease_error_code(&e) {
                code @ (exit::NO_PERMISSION | exit::CONFIG) => code,
                _ => exit::STORE,
            };
            let summary = lease_error_summary(&e);
            Failure::new(code, format!("bench: acquire {}: {summary}{e}", i + 1))
        })?;
        acquire.push(started.elapsed());
        exclusion = Some(lease.exclusion());
        let started = Instant::now();
        let renewed = lease.renew();
        renew.push(started.elapsed());
        if let Err(e) = renewed {
            let _ = lease.release();
            return Err(Failure::new(
                exit::STORE,
                format!("bench: renewal {}: {e}", i + 1),
            ));
        }
        let started = Instant::now();
        lease
            .release()
            .map_err(|e| Failure::new(exit::STORE, format!("bench: release {}: {e}", i + 1)))?;
        release.push(started.elapsed());
        progress.update(i + 1);
    }
    progress.done();
    let ops = [
        ("acquire", &acquire),
        ("renew", &renew),
        ("release", &release),
    ];
    let exclusion = match exclusion {
        Some(Exclusion::BestEffort) => "best-effort",
        _ => "conditional",
    };
    if json {
        let mut out = json!({
            "url": url,
            "prefix": scratch,
            "iterations": acquire.len(),
            "exclusion": exclusion,
        });
        if let Value::Object(map) = &mut out {
            for (name, samples) in ops {
                map.insert(name.to_string(), stats_json(samples));
            }
        }
        println!("{out}");
    } else {
        println!(
            "bench {url}: {} rounds on scratch prefix {scratch} ({exclusion} lease)",
            acquire.len()
        );
        println!(
            "{:<9}{:>11}{:>11}{:>11}{:>11}",
            "", "p50", "p90", "p99", "max"
        );
        for (name, samples) in ops {
            let q = |p: f64| percentile(samples, p).map_or("-".to_string(), ms);
            println!(
                "{name:<9}{:>11}{:>11}{:>11}{:>11}",
                q(50.0),
                q(90.0),
                q(99.0),
                q(100.0)
            );
        }
        for (name, samples) in ops {
            println!("\n{name}");
            for line in histogram(samples) {
                println!("{line}");
            }
        }
    }
    match interrupted {
        Some(sig) => {
            eprintln!(
                "bucket-lease: bench: interrupted after {} rounds",
                acquire.len()
            );
            Ok(crate::signal_exit_code(sig))
        }
        None => Ok(exit::OK),
    }
}

/// The nearest-rank `p`th percentile of `samples`.
fn percentile(samples: &[Duration], p: f64) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 1000.0 {
        format!("{ms:.1} ms")
    } else {
        human_secs(d.as_secs_f64())
    }
}

fn stats_json(samples: &[Duration]) -> Value {
    let q = |p: f64| percentile(samples, p).map(|d| round3(d.as_secs_f64() * 1000.0));
    let buckets: Vec<Value> = bucket_counts(samples)
        .iter()
        .zip(EDGES_MS)
        .map(|(count, le)| json!({ "le_ms": if le.is_finite() { json!(le) } else { json!("inf") }, "count": count }))
        .collect();
    json!({
        "samples": samples.len(),
        "p50_ms": q(50.0),
        "p90_ms": q(90.0),
        "p99_ms": q(99.0),
        "max_ms": q(100.0),
        "histogram": buckets,
    })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn bucket_counts(samples: &[Duration]) -> Vec<usize> {
    let mut counts = vec![0; EDGES_MS.len()];
    for s in samples {
        let ms = s.as_secs_f64() * 1000.0;
        let i = EDGES_MS
            .iter()
            .position(|le| ms < *le)
            .unwrap_or(EDGES_MS.len() - 1);
        counts[i] += 1;
    }
    counts
}

/// One line per bucket from the first to the last non-empty one, with a
/// bar scaled to 40 characters.
fn histogram(samples: &[Duration]) -> Vec<String> {
    let counts = bucket_counts(samples);
    let (Some(first), Some(last)) = (
        counts.iter().position(|c| *c > 0),
        counts.iter().rposition(|c| *c > 0),
    ) else {
        return vec!["  (no samples)".to_string()];
    };
    let most = counts.iter().copied().max().unwrap_or(1).max(1);
    (first..=last)
        .map(|i| {
            let label = if EDGES_MS[i].is_finite() {
                format!("< {} ms", EDGES_MS[i])
            } else {
                format!(">= {} ms", EDGES_MS[i - 1])
            };
            let width = counts[i].saturating_mul(40).div_ceil(most);
            format!("  {label:>11} |{:<40} {}", "#".repeat(width), counts[i])
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        assert_eq!(percentile(&samples, 50.0), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&samples, 99.0), Some(Duration::from_millis(99)));
        assert_eq!(
            percentile(&samples, 100.0),
            Some(Duration::from_millis(100))
        );
        assert_eq!(percentile(&[], 50.0), None);
        let one = [Duration::from_millis(7)];
        assert_eq!(percentile(&one, 1.0), Some(one[0]));
    }

    #[test]
    fn the_histogram_spans_the_non_empty_buckets() {
        let samples = [3, 4, 30, 31, 32].map(Duration::from_millis);
        let lines = histogram(&samples);
        assert_eq!(lines.len(), 4, "{lines:#?}"); // < 5, 10, 20 and 50 ms
        assert!(lines[0].contains("< 5 ms") && lines[0].ends_with(" 2"));
        assert!(lines[3].contains("< 50 ms") && lines[3].ends_with(" 3"));
        assert!(lines[1].ends_with(" 0"));
        let slow = [Duration::from_secs(20)];
        assert!(histogram(&slow)[0].contains(">= 10000 ms"));
    }
}
