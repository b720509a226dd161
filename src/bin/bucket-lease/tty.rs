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
//!   Only that thread's mask changes, and only for the call; a child
//!   started later gets an empty mask from std.
//! - **Messages never stop `run`**: in a terminal, `run` and the
//!   supervisor block SIGTTOU for good ([`block_sigttou`]), as shells
//!   ignore it, so that a message written from the background under
//!   `stty tostop` does not stop them.
//! - **The terminal is taken back only from a group that is gone**
//!   ([`take_back`]): a foreground group with a live process (the shell's,
//!   after `bg`) is left alone.

use rustix::io::Errno;
use rustix::process::{getpgrp, test_kill_process_group, Pid};
use rustix::termios::{isatty, tcgetpgrp, tcsetpgrp};

/// Whether standard input is this process's controlling terminal and this
/// process's group is in its foreground.
pub fn interactive() -> bool {
    isatty(std::io::stdin()) && foreground() == Some(getpgrp())
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
#[cfg(target_os = "linux")]
pub fn job_control() -> bool {
    use rustix::process::{getpgid, getppid, getsid};
    let own = getpgrp();
    let session = getsid(None).ok();
    let mut next = getppid();
    // A chain of processes in one group is short; the bound only guards
    // against a loop in what /proc shows while it changes.
    for _ in 0..64 {
        let Some(pid) = next else {
            return false;
        };
        if getpgid(Some(pid)).ok() != Some(own) {
            return getsid(Some(pid)).ok() == session && session.is_some();
        }
        next = std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero()))
            .ok()
            .and_then(|text| crate::procs::parse_stat(&text))
            .and_then(|p| Pid::from_raw(p.ppid));
    }
    false
}

/// Elsewhere than on Linux `run` never gives a command the terminal (see
/// [`crate::child`]), so this is not asked.
#[cfg(not(target_os = "linux"))]
pub fn job_control() -> bool {
    true
}

/// Block SIGTTOU in this thread and in the threads it starts from now on
/// (children get an empty mask from std): a process in the background of
/// the terminal is then neither stopped for writing to it under `stty
/// tostop` (`run`'s and the supervisor's messages while the command has
/// the terminal; a stopped `run` would renew nothing) nor for `tcsetpgrp`.
/// Logs a failure.
pub fn block_sigttou() {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    if let Err(e) = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), None) {
        log::warn!("cannot block SIGTTOU ({e}): under `stty tostop` a message may stop run");
    }
}

/// Give the terminal back to this process's group when its foreground
/// group has no process left (the command's, once it is gone); logs a
/// failure, with what it means.
pub fn take_back() {
    let own = getpgrp();
    let Some(now) = foreground() else {
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
