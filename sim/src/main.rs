//! `bucket-lease-sim`: seeded runs of the deterministic simulation.
//!
//! ```text
//! bucket-lease-sim RUNS [MUTANT]        RUNS seeded runs (seeds FIRST.., FIRST from SIM_FIRST_SEED, default 1)
//! bucket-lease-sim --mutants            the mutant names, one a line
//! bucket-lease-sim --replay SEED [MUTANT]  the trace of one run
//! bucket-lease-sim --check-mutants [RUNS]  each mutant must be found within RUNS (2000),
//!                                          by a seed the real code passes
//! bucket-lease-sim --exhaustive [BOUNDS] [--by-case | --check-mutants | --replay CASE CHOICES [MUTANT]]
//!                                       every schedule of a small scope (see `explore.rs`)
//! ```
//! Prefer `bash scripts/simulate.sh`, which builds the right features.

use bucket_lease_sim as sim;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

fn usage() -> ExitCode {
    eprintln!(
        "usage: simulate.sh RUNS [MUTANT] | --mutants | --replay SEED [MUTANT] | --check-mutants [RUNS] | --exhaustive [--preemptions N] [--faults N] [--clock-steps N] [--by-case | --check-mutants | --replay CASE CHOICES [MUTANT]]"
    );
    ExitCode::from(2)
}

fn replay_command(seed: u64, mutant: Option<&str>) -> String {
    match mutant {
        Some(m) => format!("bash scripts/simulate.sh --replay {seed} {m}"),
        None => format!("bash scripts/simulate.sh --replay {seed}"),
    }
}

/// What a batch of runs found.
struct Batch {
    runs: u64,
    failing: Vec<sim::Outcome>,
    injected: BTreeMap<&'static str, u64>,
    checked: BTreeMap<&'static str, u64>,
}

/// Run seeds `first..first + runs` on every core; with `stop_at_first`,
/// stop once the smallest failing seed is known.
fn batch(
    first: u64,
    runs: u64,
    mutant: Option<&str>,
    stop_at_first: bool,
) -> Result<Batch, String> {
    sim::run(first, mutant, false)?;
    let next = AtomicU64::new(first);
    let lowest_failure = AtomicU64::new(u64::MAX);
    let done = AtomicU64::new(0);
    let failing = Mutex::new(Vec::new());
    let injected = Mutex::new(BTreeMap::new());
    let checked = Mutex::new(BTreeMap::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::SeqCst);
                if seed >= first + runs
                    || (stop_at_first && seed > lowest_failure.load(Ordering::SeqCst))
                {
                    return;
                }
                let Ok(outcome) = sim::run(seed, mutant, false) else {
                    return;
                };
                done.fetch_add(1, Ordering::SeqCst);
                add(&injected, &outcome.injected);
                add(&checked, &outcome.checked);
                if !outcome.violations.is_empty() {
                    lowest_failure.fetch_min(seed, Ordering::SeqCst);
                    if !stop_at_first {
                        println!(
                            "violation in seed {seed}: {}\n  ({})\n  replay: {}",
                            outcome.violations[0],
                            outcome.setup,
                            replay_command(seed, mutant)
                        );
                    }
                    failing
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(outcome);
                }
            });
        }
    });
    let mut failing = failing.into_inner().unwrap_or_else(|e| e.into_inner());
    failing.sort_by_key(|o| o.seed);
    Ok(Batch {
        runs: done.load(Ordering::SeqCst),
        failing,
        injected: injected.into_inner().unwrap_or_else(|e| e.into_inner()),
        checked: checked.into_inner().unwrap_or_else(|e| e.into_inner()),
    })
}

/// The lowest seed up to `limit` on which mutant `name` breaks an invariant
/// that the real code keeps on the same seed (a seed the real code fails
/// too shows nothing about the mutant), with how many seeds were passed
/// over because the real code failed them as well.
fn found_by(name: &str, limit: u64) -> Result<(Option<sim::Outcome>, u64), String> {
    let (mut first, mut also_real) = (1, 0);
    while first <= limit {
        let b = batch(first, limit - first + 1, Some(name), true)?;
        let Some(o) = b.failing.into_iter().next() else {
            break;
        };
        if sim::run(o.seed, None, false)?.violations.is_empty() {
            return Ok((Some(o), also_real));
        }
        also_real += 1;
        first = o.seed + 1;
    }
    Ok((None, also_real))
}

/// Add one run's counts to a batch's.
fn add(all: &Mutex<BTreeMap<&'static str, u64>>, counts: &BTreeMap<&'static str, u64>) {
    let mut all = all.lock().unwrap_or_else(|e| e.into_inner());
    for (k, v) in counts {
        *all.entry(*k).or_insert(0) += v;
    }
}

/// `counts` as `name N, name N`.
fn listed(counts: &BTreeMap<&'static str, u64>) -> String {
    let items: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    items.join(", ")
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["--exhaustive", rest @ ..] => sim::explore::command(rest),
        ["--mutants"] => {
            for name in sim::mutant_names() {
                println!("{name}");
            }
            ExitCode::SUCCESS
        }
        ["--replay", seed, rest @ ..] if rest.len() <= 1 => {
            let Ok(seed) = seed.parse::<u64>() else {
                return usage();
            };
            match sim::run(seed, rest.first().copied(), true) {
                Ok(outcome) => {
                    for line in &outcome.trace {
                        println!("{line}");
                    }
                    verdict(1, usize::from(!outcome.violations.is_empty()))
                }
                Err(e) => {
                    eprintln!("simulate: {e}");
                    ExitCode::from(2)
                }
            }
        }
        ["--check-mutants", rest @ ..] if rest.len() <= 1 => {
            let limit = match rest.first().map(|r| r.parse::<u64>()) {
                None => 2000,
                Some(Ok(n)) => n,
                Some(Err(_)) => return usage(),
            };
            let mut missed = 0;
            for name in sim::mutant_names() {
                let started = Instant::now();
                match found_by(name, limit) {
                    Ok((found, also_real)) => match found.as_ref() {
                        Some(o) => println!(
                            "mutant {name}: found by seed {} after {} runs ({:.1} s): {}\n  replay: {}",
                            o.seed,
                            o.seed,
                            started.elapsed().as_secs_f64(),
                            o.violations[0],
                            replay_command(o.seed, Some(name))
                        ),
                        None => {
                            missed += 1;
                            println!(
                                "mutant {name}: NOT FOUND in {limit} runs ({also_real} seeds broke \
                                 an invariant with it, but without it too)"
                            );
                        }
                    },
                    Err(e) => {
                        eprintln!("simulate: {e}");
                        return ExitCode::from(2);
                    }
                }
            }
            println!(
                "mutants: {} found, {missed} missed",
                sim::mutant_names().len() - missed
            );
            if missed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        [runs, rest @ ..] if rest.len() <= 1 => {
            let Ok(runs) = runs.parse::<u64>() else {
                return usage();
            };
            let first = std::env::var("SIM_FIRST_SEED")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(1);
            let started = Instant::now();
            match batch(first, runs, rest.first().copied(), false) {
                Ok(b) => {
                    let secs = started.elapsed().as_secs_f64();
                    println!("faults injected: {}", listed(&b.injected));
                    println!("checked: {}", listed(&b.checked));
                    println!(
                        "seeds {first}..{}: {:.1} s, {:.0} runs/s",
                        first + runs - 1,
                        secs,
                        b.runs as f64 / secs.max(1e-9)
                    );
                    verdict(b.runs, b.failing.len())
                }
                Err(e) => {
                    eprintln!("simulate: {e}");
                    ExitCode::from(2)
                }
            }
        }
        _ => usage(),
    }
}

/// Print the closing line `simulation: R runs, V violations`; failure when
/// V > 0.
fn verdict(runs: impl std::fmt::Display, violations: usize) -> ExitCode {
    println!("simulation: {runs} runs, {violations} violations");
    if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
