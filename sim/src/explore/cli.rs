//! `bucket-lease-sim --exhaustive`: the search's command line.
//!
//! ```text
//! --exhaustive [BOUNDS] [--by-case]                   every schedule of the scope (and each case's count)
//! --exhaustive [BOUNDS] --check-mutants               each mutant found, and after how many schedules
//! --exhaustive [BOUNDS] --replay CASE CHOICES [MUTANT]  the trace of one schedule
//! BOUNDS: --preemptions N --faults N --clock-steps N  (default: the CI scope, 1 1 1)
//! ```

use super::{case_names, out_of_scope, replay, search, Bounds, Found};
use std::process::ExitCode;
use std::time::Instant;

/// The CI scope's bounds.
pub const CI_BOUNDS: Bounds = Bounds {
    preemptions: 1,
    faults: 1,
    clock_steps: 1,
};

fn usage() -> ExitCode {
    eprintln!(
        "usage: simulate.sh --exhaustive [--preemptions N] [--faults N] [--clock-steps N] \
         [--by-case | --check-mutants | --replay CASE CHOICES [MUTANT]]"
    );
    ExitCode::from(2)
}

/// Run the command line after `--exhaustive`.
pub fn command(args: &[&str]) -> ExitCode {
    let mut bounds = CI_BOUNDS;
    let mut rest = args;
    while let [flag, value, tail @ ..] = rest {
        let slot = match *flag {
            "--preemptions" => &mut bounds.preemptions,
            "--faults" => &mut bounds.faults,
            "--clock-steps" => &mut bounds.clock_steps,
            _ => break,
        };
        let Ok(n) = value.parse() else {
            return usage();
        };
        *slot = n;
        rest = tail;
    }
    match rest {
        [] => all(bounds, false),
        ["--by-case"] => all(bounds, true),
        ["--check-mutants"] => mutants(bounds),
        ["--replay", case, choices, mutant @ ..] if mutant.len() <= 1 => {
            let Ok(case) = case.parse() else {
                return usage();
            };
            match replay(case, choices, bounds, mutant.first().copied()) {
                Ok((trace, violations)) => {
                    for line in trace {
                        println!("{line}");
                    }
                    println!("replay: {} violations", violations.len());
                    if violations.is_empty() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
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

fn describe(bounds: Bounds) -> String {
    format!(
        "--preemptions {} --faults {} --clock-steps {}",
        bounds.preemptions, bounds.faults, bounds.clock_steps
    )
}

fn replay_command(bounds: Bounds, found: &Found, mutant: Option<&str>) -> String {
    format!(
        "bash scripts/simulate.sh --exhaustive {} --replay {} {}{}",
        describe(bounds),
        found.case,
        found.choices,
        mutant.map_or(String::new(), |m| format!(" {m}"))
    )
}

/// Every schedule of the scope: the bounds, each violation with its
/// replay, and the closing line.
fn all(bounds: Bounds, by_case: bool) -> ExitCode {
    println!(
        "exhaustive scope: {} cases of two processes; at most {} preemptions, {} faults, {} \
         clock steps per schedule",
        case_names().len(),
        bounds.preemptions,
        bounds.faults,
        bounds.clock_steps
    );
    let started = Instant::now();
    let report = match search(bounds, None, false) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("simulate: {e}");
            return ExitCode::from(2);
        }
    };
    if by_case {
        for (name, schedules) in &report.cases {
            println!("  {name}: {schedules} schedules");
        }
    }
    for found in &report.found {
        println!(
            "violation in {}: {}\n  replay: {}",
            found.name,
            found.violation,
            replay_command(bounds, found, None)
        );
    }
    println!(
        "exhaustive: {} schedules, depth {}, {} violations, {:.0} s",
        report.schedules,
        report.depth,
        report.violating,
        started.elapsed().as_secs_f64()
    );
    if report.violating == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Each mutant of the catalogue in scope must be found, by a schedule the
/// real code passes: after how many schedules, in the scope's order.
fn mutants(bounds: Bounds) -> ExitCode {
    let (mut found, mut missed, mut skipped) = (0, 0, 0);
    for name in crate::mutant_names() {
        if let Some(why) = out_of_scope(name) {
            skipped += 1;
            println!("mutant {name}: out of scope: {why}");
            continue;
        }
        let started = Instant::now();
        let report = match search(bounds, Some(name), true) {
            Ok(report) => report,
            Err(e) => {
                eprintln!("simulate: {e}");
                return ExitCode::from(2);
            }
        };
        match (report.first, report.found.first()) {
            (Some(n), Some(f)) => {
                found += 1;
                let passed_over = match report.shared {
                    0 => String::new(),
                    k => format!("; {k} failing on the real code too passed over"),
                };
                println!(
                    "mutant {name}: found after {n} schedules ({}, {:.1} s{passed_over}): {}\n  \
                     replay: {}",
                    f.name,
                    started.elapsed().as_secs_f64(),
                    f.violation,
                    replay_command(bounds, f, Some(name))
                );
            }
            _ => {
                missed += 1;
                println!("mutant {name}: NOT FOUND in {} schedules", report.schedules);
            }
        }
    }
    println!("mutants: {found} found, {skipped} out of scope, {missed} missed");
    if missed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
