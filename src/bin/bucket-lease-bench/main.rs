//! `bucket-lease-bench`: measure taking, renewing and releasing a lease
//! against the user's own bucket ([`bench`]), and the cadence runs with
//! their report, CSV and plot ([`cadence`]).
//!
//! It is `bucket-lease bench` as a program of its own, so that the job
//! command (`bucket-lease`: `run`, `inspect`, `break`, `migrate-dir`) does
//! not carry the measuring, the report and the plot: `cargo install
//! bucket-lease --features cli` installs both, and `bucket-lease bench ARGS`
//! runs this program with ARGS. It reads the same command line as
//! `bucket-lease bench`, through the same option table
//! (`bench_options.rs`), and speaks as it: its messages start with
//! `bucket-lease: bench:` and point at `bucket-lease bench --help`. One
//! command, whichever name started it.
//!
//! The modules of `bucket-lease` it shares are compiled in from that
//! program's folder (`#[path]`), never copied: the option parsing and the
//! help ([`args`]), the exit codes, option values and opening a store
//! ([`cli`]), the logger ([`log`]) and the escaping of text from the bucket
//! ([`text`]). Its exit codes are `bucket-lease`'s (its help prints the
//! table).
#![forbid(unsafe_code)]

// Shared with bucket-lease, which uses what bench does not: four of these
// are allowed dead code here, as `measure` is in benches/renewal.rs.
#[allow(dead_code)]
#[path = "../bucket-lease/args.rs"]
mod args;
#[path = "../bucket-lease/bench_options.rs"]
mod bench_options;
#[allow(dead_code)]
#[path = "../bucket-lease/cli.rs"]
mod cli;
#[allow(dead_code)]
#[path = "../bucket-lease/log.rs"]
mod log;
#[allow(dead_code)]
#[path = "../bucket-lease/text.rs"]
mod text;

mod bench;
mod cadence;
// Shared with benches/renewal.rs, which uses what `bench` does not.
#[allow(dead_code)]
mod measure;

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = args::Args::new(std::env::args_os().skip(1));
    args.command = "bench";
    ExitCode::from(cli::finish(bench::main(args)))
}
