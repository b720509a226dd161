//! The ids of process groups and sessions, as this process sees them.
//!
//! What it promises:
//!
//! - **A group or session this process cannot see has no id**: the
//!   functions here return `None` for it. The kernel reports such an id as
//!   0: a group or session whose leader is outside this process's PID
//!   namespace, as for a container's first process and everything it
//!   starts (`docker run … bucket-lease run`, `unshare --pid --fork`).
//!   rustix's own `getpgrp`, `getpgid` and `getsid` take every id the
//!   kernel gives for nonzero, and panic on a 0 (in a debug build), so
//!   nothing else in the command calls them.

use rustix::process::Pid;

/// Take an id from the kernel: 0 (not visible here) is `None`.
fn visible(raw: nix::unistd::Pid) -> Option<Pid> {
    Pid::from_raw(raw.as_raw().max(0))
}

fn to_nix(pid: Pid) -> nix::unistd::Pid {
    nix::unistd::Pid::from_raw(pid.as_raw_nonzero().get())
}

/// This process's group.
pub fn own_group() -> Option<Pid> {
    visible(nix::unistd::getpgrp())
}

/// The group of `pid`, if it exists and is visible here.
pub fn group_of(pid: Pid) -> Option<Pid> {
    nix::unistd::getpgid(Some(to_nix(pid)))
        .ok()
        .and_then(visible)
}

/// The session of `pid`, or this process's with `None`, if it exists and
/// is visible here.
pub fn session_of(pid: Option<Pid>) -> Option<Pid> {
    nix::unistd::getsid(pid.map(to_nix)).ok().and_then(visible)
}

/// A raw group id to compare with those `/proc` shows: 0 when this
/// process's group is not visible here, as `/proc` shows such a group.
pub fn own_group_raw() -> i32 {
    own_group().map_or(0, |g| g.as_raw_nonzero().get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_the_ids_the_kernel_gives() {
        let me = rustix::process::getpid();
        let group = nix::unistd::getpgrp().as_raw();
        assert_eq!(own_group_raw(), group.max(0));
        assert_eq!(
            group_of(me).map(|g| g.as_raw_nonzero().get()),
            (group > 0).then_some(group)
        );
        assert_eq!(session_of(None), session_of(Some(me)));
    }

    #[test]
    fn a_kernel_zero_is_no_id() {
        assert_eq!(visible(nix::unistd::Pid::from_raw(0)), None);
        assert_eq!(visible(nix::unistd::Pid::from_raw(7)), Pid::from_raw(7));
    }
}
