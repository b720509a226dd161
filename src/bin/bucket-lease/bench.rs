//! `bucket-lease bench ARGS`: the measuring is the program
//! `bucket-lease-bench`, kept out of this one so that the job command stays
//! small (docs/BENCHMARKS.md, "Cost of the stack"); `cargo install
//! bucket-lease --features cli` installs both, side by side.
//!
//! What it promises:
//!
//! - `bucket-lease [-v|-q] bench ARGS` runs `bucket-lease-bench [-v|-q]
//!   ARGS`, the one beside this program's executable (symbolic links
//!   resolved), by replacing this process (`exec`): the bench's output,
//!   signals and exit code are exactly its own. `PATH` is not searched, so
//!   the bench is always the one built with this command.
//! - When it is not there, or cannot be executed, nothing runs: the exit
//!   code is the shell's, 127 (not found) or 126 (cannot be executed), and
//!   the message names the path and how to install it.
//! - `bucket-lease help bench` needs no second program: the help comes from
//!   the table both programs read (`bench_options.rs`).

use crate::args::Args;
use crate::cli::{exit, Failure};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

/// The program that measures, beside this one.
pub const PROGRAM: &str = "bucket-lease-bench";

/// How to get [`PROGRAM`], in every message that says it is missing.
const INSTALL: &str = "`cargo install bucket-lease --features cli` installs it beside bucket-lease";

/// Replace this process with [`PROGRAM`] given the rest of the command line
/// (and the `-v` and `-q` given before `bench`).
///
/// # Errors
///
/// [`exit::NOT_FOUND`] when there is no such program beside this one (or
/// this one's path is unknown), [`exit::CANNOT_EXECUTE`] when it cannot be
/// run; each naming the path and how to install it.
pub fn main(mut args: Args) -> Result<u8, Failure> {
    let path = beside_this_program()?;
    let mut forwarded: Vec<std::ffi::OsString> = Vec::new();
    forwarded.extend((0..args.shared.verbose).map(|_| "-v".into()));
    if args.shared.quiet {
        forwarded.push("-q".into());
    }
    forwarded.extend(args.rest());
    // Returns only on failure.
    let error = std::process::Command::new(&path)
        .arg0(PROGRAM)
        .args(forwarded)
        .exec();
    let code = match error.kind() {
        std::io::ErrorKind::NotFound => exit::NOT_FOUND,
        _ => exit::CANNOT_EXECUTE,
    };
    Err(Failure::new(
        code,
        format!(
            "bench: cannot run {} ({error}): `bench` is the program {PROGRAM}, which must be \
             beside bucket-lease; {INSTALL}",
            path.display()
        ),
    ))
}

/// Where [`PROGRAM`] is: in the folder of this program's executable.
fn beside_this_program() -> Result<PathBuf, Failure> {
    let this = std::env::current_exe().map_err(|e| {
        Failure::new(
            exit::NOT_FOUND,
            format!(
                "bench: cannot tell where bucket-lease is ({e}), to run {PROGRAM} beside it: run \
                 {PROGRAM} itself; {INSTALL}"
            ),
        )
    })?;
    Ok(this.with_file_name(PROGRAM))
}
