//! The command's side of a cadence run (`bench --interval`): take the
//! scratch leases, run the open loop until done, stopped or timed out,
//! release them, and print, export and plot what was measured; and
//! `bench --compare A.json B.json`.

use super::report::{self, Run};
use super::{plot, Plan, Stop};
use crate::cli::{exit, lease_error_code, lease_error_summary, Failure, Timeout};
use bucket_lease::{Contender, Lease, LeaseOptions, Store};
use signal_hook::iterator::Signals;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the release of each scratch lease may take at the end.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// A cadence run, as asked for and checked.
#[derive(Debug)]
pub struct Cadence {
    /// The open loop's plan.
    pub plan: Plan,
    /// How many leases renew at once.
    pub leases: u32,
    /// `--csv`.
    pub csv: Option<PathBuf>,
    /// `--plot`.
    pub plot: Option<PathBuf>,
}

/// The scratch prefixes of the run's leases: the bench's scratch prefix
/// itself for one lease, `{scratch}/{i}` for each of several.
#[derive(Debug)]
pub struct Scratch {
    root: String,
    prefixes: Vec<String>,
}

impl Scratch {
    /// `leases` prefixes under `root`.
    pub fn new(root: &str, leases: u32) -> Scratch {
        let prefixes = if leases <= 1 {
            vec![root.to_string()]
        } else {
            (0..leases).map(|i| format!("{root}/{i}")).collect()
        };
        Scratch {
            root: root.to_string(),
            prefixes,
        }
    }

    /// Each lease's prefix.
    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }

    /// The longest prefix, for the check of the store's key room.
    pub fn longest(&self) -> &str {
        self.prefixes
            .iter()
            .max_by_key(|p| p.len())
            .map_or(&self.root, String::as_str)
    }
}

/// Where and how a cadence run goes.
pub struct Target<'a> {
    /// The URL as given.
    pub url: &'a str,
    /// Its store.
    pub store: &'a Arc<dyn Store>,
    /// The scratch prefixes.
    pub scratch: &'a Scratch,
    /// The leases' options.
    pub options: &'a LeaseOptions,
    /// The command's bound.
    pub timeout: &'a Timeout,
    /// `-q`: no progress.
    pub quiet: bool,
    /// `--json`.
    pub json: bool,
}

/// Run the cadence bench; the exit code.
///
/// # Errors
///
/// An acquire that fails, the `--timeout`, or an export that cannot be
/// written.
pub fn run(target: &Target<'_>, cadence: &Cadence, signals: &mut Signals) -> Result<u8, Failure> {
    let mut leases = Vec::new();
    // Every release within one bound, however many leases.
    let released = |leases: &[Arc<Lease>]| {
        let deadline = Instant::now().checked_add(RELEASE_TIMEOUT);
        for lease in leases {
            let _ = lease.release_before(deadline);
        }
    };
    for (i, prefix) in target.scratch.prefixes().iter().enumerate() {
        if let Some(sig) = signals.pending().next() {
            released(&leases);
            let _ = writeln!(
                std::io::stderr(),
                "bucket-lease: bench: interrupted while taking the scratch leases"
            );
            return Ok(crate::cli::signal_exit_code(sig));
        }
        let mut contender =
            Contender::new(Arc::clone(target.store), prefix, target.options.clone());
        match contender.try_acquire_before(target.timeout.call_deadline()) {
            Ok(lease) => leases.push(Arc::new(lease)),
            Err(e) => {
                released(&leases);
                if target.timeout.passed() {
                    return Err(target.timeout.failure("taking the scratch leases"));
                }
                let code = match lease_error_code(&e) {
                    code @ (exit::NO_PERMISSION | exit::CONFIG) => code,
                    _ => exit::STORE,
                };
                return Err(Failure::new(
                    code,
                    format!(
                        "bench: acquire {} of {}: {}{e}",
                        i + 1,
                        target.scratch.prefixes().len(),
                        lease_error_summary(&e)
                    ),
                ));
            }
        }
    }
    let exclusion = leases
        .first()
        .map_or("conditional", |l| l.exclusion().name())
        .to_string();
    let plan = cadence.plan;
    if !target.quiet {
        let _ = writeln!(
            std::io::stderr(),
            "bench: renewing {} lease(s) every {} for {} ({} renewals each), open loop",
            leases.len(),
            crate::cli::human_secs(plan.interval.as_secs_f64()),
            crate::cli::human_secs(plan.duration.as_secs_f64()),
            plan.renewals()
        );
    }
    let stop = Stop::default();
    // Each lease's schedule starts at its own acquire; the report counts
    // from the first.
    let start = leases
        .iter()
        .map(|l| l.confirmed_at())
        .min()
        .unwrap_or_else(Instant::now);
    let mut interrupted = None;
    let samples = std::thread::scope(|scope| {
        let measured = scope.spawn(|| {
            let samples = super::run(&leases, plan, start, &stop);
            stop.stop();
            samples
        });
        // Signals and the timeout, polled: the loop's waits all end at a stop.
        while !measured.is_finished() {
            if let Some(sig) = signals.pending().next() {
                interrupted = Some(sig);
                stop.stop();
            }
            if target.timeout.passed() {
                stop.stop();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        measured.join().unwrap_or_default()
    });
    released(&leases);
    let run = Run {
        url: target.url.to_string(),
        prefix: target.scratch.root.clone(),
        interval: plan.interval,
        duration: plan.duration,
        leases: cadence.leases,
        ttl_s: target.options.ttl_s(),
        exclusion,
        samples,
    };
    // The report first: an export that cannot be written loses nothing
    // else of the run.
    if target.json {
        println!("{}", report::to_json(&run));
    } else {
        for line in report::render_text(&run) {
            println!("{line}");
        }
    }
    let mut failed = None;
    if let Some(path) = &cadence.plot {
        if let Err(e) = std::fs::write(path, plot::svg(&run)) {
            failed = Some(write_failure("--plot", path, &e));
        }
    }
    if let Some(path) = &cadence.csv {
        let written = std::fs::File::create(path).and_then(|file| {
            let mut out = std::io::BufWriter::new(file);
            report::write_csv(&run, &mut out)?;
            std::io::Write::flush(&mut out)
        });
        if let Err(e) = written {
            failed = Some(write_failure("--csv", path, &e));
        }
    }
    if let Some(failure) = failed {
        return Err(failure);
    }
    if interrupted.is_none() && target.timeout.passed() {
        return Err(target.timeout.failure("at the cadence"));
    }
    match interrupted {
        Some(sig) => {
            let _ = writeln!(std::io::stderr(), "bucket-lease: bench: interrupted");
            Ok(crate::cli::signal_exit_code(sig))
        }
        None => Ok(exit::OK),
    }
}

fn write_failure(option: &str, path: &std::path::Path, e: &std::io::Error) -> Failure {
    Failure::new(
        exit::USAGE,
        format!("bench: {option}: cannot write {}: {e}", path.display()),
    )
}

/// `bench --compare A.json B.json`: the table, or one JSON object.
///
/// # Errors
///
/// A file that cannot be read or is not a bench output.
pub fn compare_files(a: &str, b: &str, json: bool) -> Result<u8, Failure> {
    let read = |path: &str| -> Result<serde_json::Value, Failure> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Failure::new(
                exit::USAGE,
                format!("bench: --compare: cannot read {path}: {e}"),
            )
        })?;
        serde_json::from_str(&text).map_err(|e| {
            Failure::new(
                exit::USAGE,
                format!(
                    "bench: --compare: {path} is not JSON ({e}); give two outputs of bench --json"
                ),
            )
        })
    };
    let (va, vb) = (read(a)?, read(b)?);
    let lines = super::compare::compare(&va, &vb, a, b)
        .map_err(|e| Failure::new(exit::USAGE, format!("bench: --compare: {e}")))?;
    if json {
        println!("{}", serde_json::json!({ "a": a, "b": b, "table": lines }));
    } else {
        for line in lines {
            println!("{line}");
        }
    }
    Ok(exit::OK)
}
