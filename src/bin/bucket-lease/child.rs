//! Starting `run`'s COMMAND so that it cannot outlive `bucket-lease`.
//!
//! If `bucket-lease run` is killed with SIGKILL it can neither stop COMMAND
//! nor release the lease; the lease is taken over after its TTL, and a
//! COMMAND still running would then write beside the new holder. So on
//! Linux `run` does not start COMMAND itself: it starts its own executable
//! as `bucket-lease __exec-child PID COMMAND [ARG...]`, which
//!
//! 1. asks the kernel to SIGKILL it when its parent dies
//!    (`PR_SET_PDEATHSIG`, which survives `exec`),
//! 2. checks that its parent is still `PID` (the parent may have died
//!    before step 1), and
//! 3. replaces itself with COMMAND (`exec`), keeping its pid, so `run`
//!    signals and waits for COMMAND itself.
//!
//! Everything here is safe code: the death signal is set on the calling
//! process, not between `fork` and `exec`. Elsewhere than on Linux, or when
//! the executable cannot be found, COMMAND is started directly.

use crate::exit;
use std::ffi::OsString;
use std::process::Command;

/// The hidden first argument that makes `bucket-lease` become COMMAND.
pub const EXEC_CHILD: &str = "__exec-child";

/// The command that starts `program` with `args` as `run`'s child.
pub fn command(program: &OsString, args: &[OsString]) -> Command {
    match std::env::current_exe() {
        Ok(me) if cfg!(target_os = "linux") => {
            let mut command = Command::new(me);
            command
                .arg(EXEC_CHILD)
                .arg(std::process::id().to_string())
                .arg(program)
                .args(args);
            command
        }
        _ => {
            let mut command = Command::new(program);
            command.args(args);
            command
        }
    }
}

/// `bucket-lease __exec-child PID COMMAND [ARG...]`: become COMMAND, to be
/// killed with the parent `PID`. Returns only when that fails, with the
/// exit code to end on (127 not found, 126 cannot execute).
pub fn exec_child(args: &[OsString]) -> u8 {
    let [parent, program, rest @ ..] = args else {
        eprintln!("bucket-lease: {EXEC_CHILD} is internal to `bucket-lease run`");
        return exit::USAGE;
    };
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{getppid, set_parent_process_death_signal, Signal};
        if let Err(e) = set_parent_process_death_signal(Some(Signal::KILL)) {
            eprintln!("bucket-lease: run: cannot tie the command to its supervisor: {e}");
            return exit::CANNOT_EXECUTE;
        }
        let parent_alive = getppid()
            .is_some_and(|p| parent.to_str() == Some(p.as_raw_nonzero().to_string().as_str()));
        if !parent_alive {
            // `run` died before the death signal was set: it watches nothing.
            return exit::LOST;
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = parent;
    use std::os::unix::process::CommandExt;
    let error = Command::new(program).args(rest).exec();
    eprintln!("bucket-lease: run: cannot run {program:?}: {error}");
    if error.kind() == std::io::ErrorKind::NotFound {
        exit::NOT_FOUND
    } else {
        exit::CANNOT_EXECUTE
    }
}
