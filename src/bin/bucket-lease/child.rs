//! Starting `run`'s COMMAND, and stopping every process it starts.
//!
//! A job is rarely one process: a shell script runs programs in the
//! background and in pipelines, a program forks workers, a daemon forks
//! twice and calls `setsid`. Each of them may write to the bucket, so each
//! must be dead by the lease's write deadline, and none may outlive `run`.
//!
//! On Linux `run` ([`Job`]) becomes a child subreaper and starts its own
//! executable as `bucket-lease __supervise PID GRACE_MS LOG TTY COMMAND
//! [ARG...]` ([`crate::supervise`]), in a process group of its own. The
//! supervisor starts COMMAND in a new process group, is the subreaper of
//! everything below it, and does what `run` asks: SIGTERM to COMMAND's
//! group and to every descendant (found in `/proc`, whatever group or
//! session it moved to), or SIGKILL to all of them until none is left.
//! When COMMAND exits by itself, the processes it left get SIGTERM, then
//! SIGKILL after the grace period. The supervisor exits once it has no
//! process left under it, with COMMAND's status.
//!
//! - **At the write deadline** `run` does not rely on the supervisor
//!   alone: it asks it to kill (SIGUSR1) and sends SIGKILL itself to every
//!   process under it and to their groups ([`Job::kill`]).
//! - **If `run` dies** (SIGKILL, a crash), the kernel sends the supervisor
//!   SIGUSR2 (`PR_SET_PDEATHSIG`), and it kills every process of COMMAND
//!   at once, then exits.
//! - **If the supervisor dies** (SIGKILL, the OOM killer), the processes
//!   it leaves are given to `run`, the next subreaper up, which kills and
//!   reaps every one of them before it releases the lease ([`Job::sweep`]).
//!   `run` also does so after a supervisor that exited normally: it exits
//!   only when no process it started is left, or names those it could not
//!   kill.
//! - **Only if both die at once** (SIGKILL to both) can COMMAND's
//!   processes live on.
//!
//! Everything here is safe code: groups are set with std's
//! `CommandExt::process_group`, the death signal and the subreaper on the
//! calling process, never between `fork` and `exec`. Elsewhere than on
//! Linux (or without `/proc`), COMMAND is started directly in a process
//! group of its own, and only that group is signalled: processes that
//! leave it (`setsid`, daemons) are not stopped, nor is anything when
//! `run` is killed with SIGKILL.

use rustix::process::{kill_process, kill_process_group, Pid, Signal};
use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

/// The hidden first argument that makes `bucket-lease` the supervisor of
/// a command ([`crate::supervise`]).
pub const SUPERVISE: &str = "__supervise";

/// How long a kill of what is left goes on in `run` before the processes
/// still alive are named (the supervisor has tried for
/// [`crate::supervise::KILL_BOUND`] already).
#[cfg(target_os = "linux")]
const SWEEP_BOUND: Duration = Duration::from_secs(5);

/// The command that starts COMMAND (`program` with `args`) for `run`: its
/// environment is `run`'s, plus what the caller adds. `grace` is for what
/// COMMAND leaves when it exits; `verbose` and `quiet` are `run`'s logging
/// flags, for the supervisor's messages. `interactive`: `run` is in the
/// foreground of the terminal on its standard input, and COMMAND is to
/// have it (with a supervisor only; see [`crate::supervise`]).
pub fn command(
    program: &OsString,
    args: &[OsString],
    grace: Duration,
    verbose: u8,
    quiet: bool,
    interactive: bool,
) -> Start {
    let supervised = cfg!(target_os = "linux") && std::path::Path::new(SELF_EXE).exists();
    let interactive = interactive && supervised;
    let mut command = if supervised {
        let mut command = Command::new(SELF_EXE);
        let log = if quiet {
            "q".to_string()
        } else {
            verbose.to_string()
        };
        let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        command
            .arg0("bucket-lease")
            .arg(SUPERVISE)
            .arg(std::process::id().to_string())
            .arg(grace_ms.to_string())
            .arg(log)
            .arg(if interactive { TTY } else { NO_TTY })
            .arg(program)
            .args(args);
        command
    } else {
        let mut command = Command::new(program);
        command.args(args);
        command
    };
    command.process_group(0);
    Start {
        command,
        supervised,
        interactive,
    }
}

/// The supervisor's TTY argument: COMMAND gets the terminal's foreground.
pub const TTY: &str = "tty";

/// The supervisor's TTY argument: COMMAND stays in the background.
pub const NO_TTY: &str = "-";

/// This executable, even if its file was replaced or removed since it
/// started.
const SELF_EXE: &str = "/proc/self/exe";

/// A command ready to start; add to its environment, then [`Job::spawn`].
pub struct Start {
    /// The command; only its environment may be changed.
    pub command: Command,
    supervised: bool,
    interactive: bool,
}

/// COMMAND, started: under its supervisor on Linux, else as the leader of
/// a process group of its own.
pub struct Job {
    child: Child,
    supervised: bool,
    interactive: bool,
}

impl Job {
    /// Start it. On Linux `run` becomes a child subreaper first.
    ///
    /// # Errors
    ///
    /// When the process cannot be started.
    pub fn spawn(start: Start) -> io::Result<Job> {
        let Start {
            mut command,
            supervised,
            interactive,
        } = start;
        #[cfg(target_os = "linux")]
        if supervised {
            if let Err(e) = rustix::process::set_child_subreaper(Some(Pid::INIT)) {
                log::warn!(
                    "cannot become a subreaper ({e}): if the command's supervisor dies, what it \
                     leaves may outlive run"
                );
            }
        }
        // The supervisor asks for a parent-death signal, so it is started
        // from this thread, with its mask (it blocks the same signals
        // itself); a command started directly gets its own job control.
        let child = if supervised {
            command.spawn()?
        } else {
            crate::tty::spawn_with_terminal_stops(&mut command)?
        };
        Ok(Job {
            child,
            supervised,
            interactive,
        })
    }

    fn pid(&self) -> Pid {
        Pid::from_child(&self.child)
    }

    /// Whether COMMAND was given the terminal's foreground (its supervisor
    /// then stops and continues its tree on job-control requests).
    pub fn interactive(&self) -> bool {
        self.interactive
    }

    /// Interactive only: ask the supervisor to stop (SIGSTOP) every
    /// process of COMMAND, if they are not stopped already (SIGTSTP).
    pub fn freeze(&self) {
        if let Err(e) = kill_process(self.pid(), Signal::TSTP) {
            log::warn!(
                "could not ask the command's supervisor to stop the command ({e}): processes \
                 outside its process group go on while run is suspended"
            );
        }
    }

    /// Interactive only: ask the supervisor to continue every process of
    /// COMMAND, giving it the terminal if `run`'s group has it (SIGCONT).
    pub fn resume(&self) {
        if let Err(e) = kill_process(self.pid(), Signal::CONT) {
            log::warn!(
                "could not ask the command's supervisor to continue the command ({e}): it stays \
                 stopped (SIGINT or SIGTERM to run stop it)"
            );
        }
    }

    /// COMMAND's status, once it has exited; on Linux, read from its
    /// supervisor, which exits only once no process of COMMAND is left (or
    /// it has named those it could not kill).
    ///
    /// # Errors
    ///
    /// When waiting fails.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// Ask every process of COMMAND to stop: SIGTERM.
    pub fn terminate(&self) {
        // The supervisor sends SIGTERM to each; without one, the group
        // gets it, then SIGCONT in case it was stopped.
        let sent = if self.supervised {
            kill_process(self.pid(), Signal::TERM)
        } else {
            kill_process_group(self.pid(), Signal::TERM)
                .and_then(|()| kill_process_group(self.pid(), Signal::CONT))
        };
        if let Err(e) = sent {
            log::warn!("could not send SIGTERM to the command: {e}");
        }
    }

    /// SIGKILL every process of COMMAND: the supervisor is asked to (and
    /// goes on until none is left), and `run` sends SIGKILL to every
    /// process under the supervisor and to their groups itself, so that
    /// they die now even if the supervisor is slow to run.
    pub fn kill(&self) {
        if !self.supervised {
            if let Err(e) = kill_process_group(self.pid(), Signal::KILL) {
                log::warn!("could not send SIGKILL to the command: {e}");
            }
            return;
        }
        if let Err(e) = kill_process(self.pid(), Signal::USR1) {
            log::warn!("could not ask the command's supervisor to kill it: {e}");
        }
        #[cfg(target_os = "linux")]
        {
            let round = crate::procs::signal_all(
                self.pid(),
                Signal::KILL,
                None,
                &mut crate::procs::Sent::default(),
            );
            for (p, e) in round.failed {
                log::warn!("could not send SIGKILL to {p}: {e}");
            }
        }
    }

    /// SIGKILL the supervisor itself (one that does not exit after a
    /// kill); [`sweep`](Self::sweep) then kills what it leaves.
    pub fn kill_supervisor(&mut self) {
        let _ = self.child.kill();
    }

    /// Once the supervisor has exited: kill and reap every process still
    /// under `run` (left by a supervisor that was killed, or one that
    /// could not kill them all), for at most [`SWEEP_BOUND`]. Without a
    /// supervisor: SIGKILL to what is left of COMMAND's group. Logs what
    /// it did; the processes it could not kill are named.
    pub fn sweep(&self) {
        if !self.supervised {
            // The group outlives its leader while it has members.
            let _ = kill_process_group(self.pid(), Signal::KILL);
            return;
        }
        #[cfg(target_os = "linux")]
        spare_credential_helpers(|spared| {
            use rustix::process::{getpid, waitpid, Pid, WaitOptions};
            let me = getpid();
            let spare = |p: &crate::procs::Proc| spared.contains(&p.pgid);
            let left: Vec<_> = crate::procs::descendants(me)
                .into_iter()
                .filter(|p| p.alive() && !spare(p))
                .collect();
            if !left.is_empty() {
                log::warn!(
                    "the command's supervisor left {} process(es): killing them",
                    left.len()
                );
            }
            // Reap the orphans the supervisor left, one by one: a
            // credential helper's shell is a child of `run` too, and is
            // reaped by the fetch that started it.
            let mut reap = || {
                for p in crate::procs::descendants(me) {
                    if p.ppid == me.as_raw_nonzero().get() && !p.alive() && !spare(&p) {
                        let _ =
                            Pid::from_raw(p.pid).map(|pid| waitpid(Some(pid), WaitOptions::NOHANG));
                    }
                }
            };
            if let Err(left) = crate::procs::kill_all(me, None, SWEEP_BOUND, &mut reap, &spare) {
                log::error!(
                    "could not kill every process of the command within {} s: {}",
                    SWEEP_BOUND.as_secs(),
                    left.join("; ")
                );
            }
        });
    }
}

/// Call `f` with the process groups of the credential helpers
/// (`credential_process`) running in this process now, none starting
/// until it returns: `run`'s sweep spares them (they are `run`'s children,
/// like the orphans it kills).
#[cfg(target_os = "linux")]
fn spare_credential_helpers(f: impl FnOnce(&[i32])) {
    #[cfg(any(feature = "s3", feature = "r2", feature = "minio"))]
    bucket_lease_backends::credentials::with_running_groups(|groups| {
        let groups: Vec<i32> = groups
            .iter()
            .filter_map(|g| i32::try_from(*g).ok())
            .collect();
        f(&groups)
    });
    #[cfg(not(any(feature = "s3", feature = "r2", feature = "minio")))]
    f(&[]);
}
