//! The terminal on standard input, for `run` started in the foreground of
//! one (see [`crate::run`], "In a terminal").
//!
//! What it promises:
//!
//! - **Interactive means what a shell means**: standard input is the
//!   controlling terminal, and the caller's process group is its
//!   foreground group ([`interactive`]). A `run` in the background
//!   (`&`), or with its input from a file or a pipe, is not.
//! - **The foreground can be given from any group of the session**
//!   ([`give`]): a process outside the foreground that calls `tcsetpgrp`
//!   is sent SIGTTOU (and stopped) unless it blocks it, so SIGTTOU is
//!   blocked in the calling thread for the call, as shells ignore it.
//!   Only that thread's mask changes, and only for the call.
//! - **Messages never stop `run`**: `run` and the supervisor block
//!   SIGTTOU and SIGTTIN for good, whatever standard input is
//!   ([`block_terminal_stops`]), as shells ignore them, so that a message
//!   written from the background under `stty tostop` does not stop them.
//!   A child inherits the mask of the thread that starts it (std does not
//!   reset it), so COMMAND is started with them unblocked
//!   ([`spawn_with_terminal_stops`]); a `credential_process` the stores
//!   run inherits them blocked (reading the terminal fails rather than
//!   stopping it).
//! - **The terminal is taken back only from a group that is gone**
//!   ([`take_back`]): a foreground group with a live process (the shell's,
//!   after `bg`) is left alone.

use rustix::io::Errno;
use rustix::process::{test_kill_process_group, Pid};
use rustix::termios::{isatty, tcgetpgrp, tcsetpgrp};

/// Whether standard input is this process's controlling terminal and this
/// process's group is in its foreground.
pub fn interactive() -> bool {
    isatty(std::io::stdin()) && crate::ids::own_group().is_some_and(|own| foreground() == Some(own))
}

/// The foreground process group of the terminal on standard input, if it
/// is the controlling terminal.
pub fn foreground() -> Option<Pid> {
    tcgetpgrp(std::io::stdin()).ok()
}

/// Make `group` the foreground process group of the terminal on standard
/// input, with SIGTTOU blocked in this thread meanwhile.
///
/// # Errors
///
/// When the mask cannot be changed, or `tcsetpgrp` fails (the group is not
/// in this session, or standard input is not the controlling terminal).
pub fn give(group: Pid) -> Result<(), Errno> {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let mut before = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut before))
        .map_err(|e| Errno::from_raw_os_error(e as i32))?;
    let given = tcsetpgrp(std::io::stdin(), group);
    // A SIGTTOU blocked here was never sent (the kernel sends none to a
    // caller that blocks it), so nothing is pending when it is unblocked.
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&before), None);
    given
}

/// Whether something can continue this process's group once it stops:
/// the group is not orphaned, that is, the first ancestor outside it (the
/// shell that started the job, above a script that ran `run`, say) is in
/// this session. (In an orphaned group a stopped job would stay stopped:
/// the kernel discards SIGTSTP from the terminal there, for that reason.)
/// A group or session not visible in this PID namespace (a container's
/// first process) counts as orphaned.
#[cfg(target_os = "linux")]
pub fn job_control() -> bool {
    use crate::ids::{group_of, own_group, session_of};
    let (Some(own), Some(session)) = (own_group(), session_of(None)) else {
        return false;
    };
    let parent = |pid: Pid| {
        std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero()))
            .ok()
            .and_then(|text| crate::procs::parse_stat(&text))
            .and_then(|p| Pid::from_raw(p.ppid))
    };
    in_session_above(own, session, rustix::process::getppid(), |pid| Ancestor {
        group: group_of(pid),
        session: session_of(Some(pid)),
        parent: parent(pid),
    })
}

/// What [`in_session_above`] asks of an ancestor.
#[cfg(target_os = "linux")]
struct Ancestor {
    group: Option<Pid>,
    session: Option<Pid>,
    parent: Option<Pid>,
}

/// Whether the first of the ancestors from `first` up that is outside
/// group `own` is in `session`.
#[cfg(target_os = "linux")]
fn in_session_above(
    own: Pid,
    session: Pid,
    first: Option<Pid>,
    mut look: impl FnMut(Pid) -> Ancestor,
) -> bool {
    let mut next = first;
    // A chain of processes in one group is short; the bound only guards
    // against a loop in what /proc shows while it changes.
    for _ in 0..64 {
        let Some(pid) = next else {
            return false;
        };
        let ancestor = look(pid);
        if ancestor.group != Some(own) {
            return ancestor.session == Some(session);
        }
        next = ancestor.parent;
    }
    false
}

/// Elsewhere than on Linux `run` never gives a command the terminal (see
/// [`crate::child`]), so this is not asked.
#[cfg(not(target_os = "linux"))]
pub fn job_control() -> bool {
    true
}

/// Block SIGTTOU and SIGTTIN in this thread and in the threads it starts
/// from now on, whatever standard input is (a program it starts would
/// inherit the mask: start one with [`spawn_with_terminal_stops`]): a process in the background of the terminal is then neither
/// stopped for writing to it under `stty tostop` (a message of `run` or
/// the supervisor, from the thread that writes them) nor for `tcsetpgrp`,
/// and a read of it fails instead of stopping the process. A stopped `run`
/// would renew nothing and signal nothing. Called first thing in `main`,
/// before any thread starts. Says a failure on stderr, at once: the logger
/// has no thread yet.
pub fn block_terminal_stops() {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
    let mut stops = SigSet::empty();
    stops.add(Signal::SIGTTOU);
    stops.add(Signal::SIGTTIN);
    if let Err(e) = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&stops), None) {
        crate::log::line(format!(
            "bucket-lease: warning: cannot block SIGTTOU and SIGTTIN ({e}): in the background \
             of a terminal, a message may stop bucket-lease"
        ));
    }
}

/// Start `command` with SIGTTOU and SIGTTIN unblocked, as the program
/// expects them: from a thread of its own that unblocks them first, for a
/// child inherits the mask of the thread that starts it. Not for a child
/// that asks for a parent-death signal: it would come when that thread
/// ends.
pub fn spawn_with_terminal_stops(
    command: &mut std::process::Command,
) -> std::io::Result<std::process::Child> {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
    std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new()
            .name("spawn".into())
            .spawn_scoped(scope, || {
                let mut stops = SigSet::empty();
                stops.add(Signal::SIGTTOU);
                stops.add(Signal::SIGTTIN);
                pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&stops), None)
                    .map_err(std::io::Error::from)?;
                command.spawn()
            })?;
        spawned
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Give the terminal back to this process's group when its foreground
/// group has no process left (the command's, once it is gone); logs a
/// failure, with what it means.
pub fn take_back() {
    let (Some(own), Some(now)) = (crate::ids::own_group(), foreground()) else {
        return;
    };
    if now == own || test_kill_process_group(now) != Err(Errno::SRCH) {
        return;
    }
    if let Err(e) = give(own) {
        log::warn!(
            "could not take the terminal back from the command's process group ({e}); the \
             shell takes it back when run exits"
        );
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn pid(raw: i32) -> Pid {
        Pid::from_raw(raw).expect("positive")
    }

    /// The chain `run (group 10) <- sh 10 <- PARENT`, with the session 5.
    fn above(parent: Ancestor) -> bool {
        let mut parent = Some(parent);
        in_session_above(pid(10), pid(5), Some(pid(10)), move |p| {
            if p == pid(10) {
                Ancestor {
                    group: Some(pid(10)),
                    session: Some(pid(5)),
                    parent: Some(pid(1)),
                }
            } else {
                parent.take().expect("asked once")
            }
        })
    }

    #[test]
    fn a_shell_of_the_session_above_the_group_continues_it() {
        assert!(above(Ancestor {
            group: Some(pid(5)),
            session: Some(pid(5)),
            parent: None,
        }));
    }

    #[test]
    fn a_group_whose_first_ancestor_outside_it_is_elsewhere_is_orphaned() {
        // Another session (a terminal's session leader above `sh -c`).
        assert!(!above(Ancestor {
            group: Some(pid(1)),
            session: Some(pid(1)),
            parent: None,
        }));
        // A container's first process: its group and session were made
        // outside the PID namespace, and have no id here.
        assert!(!above(Ancestor {
            group: None,
            session: None,
            parent: None,
        }));
        // The chain ends inside the group.
        assert!(!in_session_above(pid(10), pid(5), None, |_| unreachable!()));
    }
}
