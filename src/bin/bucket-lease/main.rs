//! `bucket-lease`: take, look at, break and measure a lease on a prefix of
//! an S3-compatible bucket from the shell.
//!
//! This file only dispatches: it reads the options before the command
//! (through the table [`MAIN`]), prints the help, the version and the
//! generated completions and man page ([`generate`]), and hands the rest of
//! the command line to one module per command: [`run`], [`inspect`],
//! [`brk`] (`break`) and [`migrate_dir`]; [`bench`] hands `bench` to the
//! program `bucket-lease-bench` beside this one, which measures (its
//! option table, [`bench_options`], is here too, for the help, the
//! completions and the man page). What they share lives below them:
//! [`cli`] (exit codes, [`Failure`](cli::Failure), option values, opening
//! a store) and [`args`] (the option tables and the parsing, help and
//! generators they drive). [`log`] prints the library's warnings on
//! stderr. `bucket-lease-bench` compiles in `args`, `cli`, `log`, `text`
//! and `bench_options` as modules of its own.
//!
//! # Exit codes
//!
//! One table, [`cli::EXIT_CODES`]: what each code means. `--help` and the
//! man page print theirs from it, a test holds README's to it word for
//! word, and the commands exit with the codes [`cli::exit`] names, each
//! in a row of it.
//!
//! Text that came from the bucket or the service is escaped before it
//! reaches the terminal ([`text::printable`]).
#![forbid(unsafe_code)]

mod args;
mod bench;
mod bench_options;
mod brk;
mod child;
mod cli;
mod generate;
mod ids;
mod inspect;
mod log;
mod migrate_dir;
#[cfg(target_os = "linux")]
mod procs;
mod run;
mod status_files;
#[cfg(target_os = "linux")]
mod supervise;
mod text;
mod tty;

use args::{given, Arg, Args, Opt, Spec};
use cli::{exit, Failure};
use std::ffi::OsString;
use std::process::ExitCode;

/// The options of `bucket-lease` itself, before the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MainKey {
    Version,
    Generate,
}

const MAIN: &[Opt<MainKey>] = &[
    Opt {
        key: MainKey::Version,
        long: "version",
        short: Some('V'),
        value: None,
        help: "the version and the stores built in",
    },
    Opt::valued(
        MainKey::Generate,
        "generate",
        "KIND",
        "print shell completions or the man page, made from the tables this help is \
               printed from: complete-bash, complete-zsh, complete-fish or man (the README \
               says where to put them)",
    ),
];

/// The commands, in the order help lists them.
const COMMANDS: &str = "run, inspect, break, bench or migrate-dir";

fn main_spec() -> Spec {
    Spec::new(
        "",
        "one process at a time holds a lease on a prefix of an S3-compatible bucket.",
        "bucket-lease [OPTIONS] COMMAND [ARGS]\n       bucket-lease help [COMMAND]",
        "\
Commands:
  run       take the lease, run COMMAND while keeping it, release it when COMMAND exits
  inspect   show who holds the lease, how old it is and whether it is fresh
  break     take the lease away from a named (dead) holder, with a conditional write
  bench     measure acquire, renew and release latency against a scratch prefix (the
            program bucket-lease-bench, installed beside this one)
  migrate-dir  move a directory bucket of the first layout to plain files
  help      this help, or a command's (as `bucket-lease COMMAND --help`)",
        "",
        MAIN,
        false,
    )
}

/// Every command's documentation, `bucket-lease` itself first.
pub fn specs() -> Vec<Spec> {
    vec![
        main_spec(),
        run::spec(),
        inspect::spec(),
        brk::spec(),
        bench_options::spec(),
        migrate_dir::spec(),
    ]
}

fn main() -> ExitCode {
    // First, before any thread starts, so that every thread inherits it.
    tty::block_terminal_stops();
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    #[cfg(target_os = "linux")]
    if args.first().is_some_and(|a| a == child::SUPERVISE) {
        let code = supervise::main(&args[1..]);
        log::finish(log::EXIT_LOG_BOUND);
        return ExitCode::from(code);
    }
    ExitCode::from(cli::finish(dispatch(Args::new(args))))
}

fn dispatch(mut args: Args) -> Result<u8, Failure> {
    // `-v` and `-q` before the command are taken by `next`.
    let word = match args.next(MAIN, false)? {
        None => return Err(Failure::usage("", format!("no command given ({COMMANDS})"))),
        Some(Arg::Help) => return Ok(args::print_help(&main_spec())),
        Some(Arg::Opt(MainKey::Version, _)) => {
            // Nothing may follow (`-V=1` leaves `=1` to read).
            if let Some(Arg::Word(word)) = args.next(MAIN, false)? {
                return Err(args.unexpected(&word));
            }
            return Ok(print_version());
        }
        Some(Arg::Opt(MainKey::Generate, kind)) => {
            if let Some(Arg::Word(word)) = args.next(MAIN, false)? {
                return Err(args.unexpected(&word));
            }
            return generate::print(&given(kind), &specs(), cli::URL_HELP, cli::EXIT_CODES);
        }
        Some(Arg::Word(word)) => word.to_string_lossy().into_owned(),
    };
    args.command = match word.as_str() {
        "run" => "run",
        "inspect" => "inspect",
        "break" => "break",
        "bench" => "bench",
        "migrate-dir" => "migrate-dir",
        "help" => return help_for(&mut args),
        other => {
            return Err(Failure::usage(
                "",
                format!("unknown command {other:?} ({COMMANDS})"),
            ))
        }
    };
    match args.command {
        "run" => run::main(args),
        "inspect" => inspect::main(args),
        "break" => brk::main(args),
        "migrate-dir" => migrate_dir::main(args),
        _ => bench::main(args),
    }
}

fn help_for(args: &mut Args) -> Result<u8, Failure> {
    const NONE: &[Opt<MainKey>] = &[];
    let spec = match args.next(NONE, false)? {
        None | Some(Arg::Help) => main_spec(),
        Some(Arg::Word(w)) => match w.to_string_lossy().as_ref() {
            "run" => run::spec(),
            "inspect" => inspect::spec(),
            "break" => brk::spec(),
            "bench" => bench_options::spec(),
            "migrate-dir" => migrate_dir::spec(),
            other => {
                return Err(Failure::usage(
                    "",
                    format!("help: unknown command {other:?} ({COMMANDS})"),
                ))
            }
        },
        Some(Arg::Opt(..)) => unreachable!("the table is empty"),
    };
    if let Some(Arg::Word(extra)) = args.next(NONE, false)? {
        return Err(args.unexpected(&extra));
    }
    Ok(args::print_help(&spec))
}

fn print_version() -> u8 {
    let features: Vec<&str> = [
        ("fs", cfg!(feature = "fs")),
        ("s3", cfg!(feature = "s3")),
        ("r2", cfg!(feature = "r2")),
        ("minio", cfg!(feature = "minio")),
    ]
    .iter()
    .filter(|(_, on)| *on)
    .map(|(name, _)| *name)
    .collect();
    println!(
        "bucket-lease {} (stores: {})",
        env!("CARGO_PKG_VERSION"),
        features.join(", ")
    );
    exit::OK
}
