//! The processes under a process, read from `/proc` (Linux), and signals
//! sent to all of them.
//!
//! What it promises:
//!
//! - **Every descendant is found**, whatever group or session it moved
//!   to: the tree is walked down from the root through each task's
//!   `/proc/PID/task/TID/children` (reading only the tree, in well under a
//!   millisecond for a job's few dozen processes), or, on a kernel built
//!   without those files, built from the parent pid of every process in
//!   `/proc/*/stat`. A stat line is read after its last `)`, since a
//!   command's name may hold one. A process whose parent died is found
//!   under the subreaper it was given to (`run` and its supervisor are
//!   subreapers).
//! - **A signal goes to the process it was meant for.** Each process is
//!   named by its pid and its start time; it is signalled through a pidfd
//!   opened and then checked against that start time, so a pid reused
//!   after the scan is never signalled. (Without pidfds, before Linux 5.3,
//!   by pid.)
//! - **Groups are signalled whole**, atomically against forks: the group of
//!   each process found, when the group's leader is one of the processes
//!   found (or the `leader` given: the command's group outlives it).
//!   Never the caller's own group.
//! - **A kill is repeated until none is left** ([`kill_all`]), so a
//!   process forked between a scan and its signals dies in the next round;
//!   bounded in time, it names the processes it could not kill.
//!
//! Zombies (dead, waiting for their parent) count as dead.

use rustix::fd::AsFd;
use rustix::io::Errno;
use rustix::process::{
    kill_process, kill_process_group, pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal,
};
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// One process, as `/proc/PID/stat` showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    /// Its pid.
    pub pid: i32,
    /// Its parent's pid.
    pub ppid: i32,
    /// Its process group.
    pub pgid: i32,
    /// Its state letter (`R`, `S`, `D`, `T`, `Z`, …).
    pub state: char,
    /// When it started (clock ticks since boot): with the pid, it names
    /// this process and no later one.
    pub start: u64,
    /// Its command name, for messages.
    pub comm: String,
}

impl Proc {
    /// Not dead: neither a zombie nor on its way out.
    pub fn alive(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

impl fmt::Display for Proc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pid {} ({}, state {})",
            self.pid,
            crate::text::printable(&self.comm),
            self.state
        )
    }
}

/// Parse one `/proc/PID/stat` line.
pub fn parse_stat(text: &str) -> Option<Proc> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text.get(..open)?.trim().parse().ok()?;
    let comm = text.get(open + 1..close)?.to_string();
    let mut fields = text.get(close + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    // Fields 6 to 21 (session … itrealvalue), then 22, starttime.
    let start = fields.nth(16)?.parse().ok()?;
    Some(Proc {
        pid,
        ppid,
        pgid,
        state,
        start,
        comm,
    })
}

/// Whether process `pid` is stopped now (state `T`, by a signal), by
/// `/proc`; false when it cannot be read.
pub fn is_stopped(pid: i32) -> bool {
    read_stat(pid).is_some_and(|p| p.state == 'T')
}

fn read_stat(pid: i32) -> Option<Proc> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process on the system now (those that vanish while being read
/// are left out).
fn scan() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

/// The processes under `root` (not `root` itself) in `all`, zombies
/// included, parents before their children.
fn under(all: &[Proc], root: i32) -> Vec<Proc> {
    let mut children: HashMap<i32, Vec<&Proc>> = HashMap::new();
    for p in all {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut out = Vec::new();
    let mut next = vec![root];
    let mut seen = HashSet::from([root]);
    while let Some(parent) = next.pop() {
        for child in children.get(&parent).into_iter().flatten() {
            if seen.insert(child.pid) {
                out.push((*child).clone());
                next.push(child.pid);
            }
        }
    }
    out
}

/// Whether the kernel lists each task's children
/// (`/proc/PID/task/TID/children`, `CONFIG_PROC_CHILDREN`).
fn children_files() -> bool {
    static THERE: OnceLock<bool> = OnceLock::new();
    *THERE.get_or_init(|| {
        let me = std::process::id();
        Path::new(&format!("/proc/{me}/task/{me}/children")).exists()
    })
}

/// The pids of the children of `pid`, forked by any of its threads.
fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|c| c.parse::<i32>().ok()),
            );
        }
    }
    out
}

/// The processes under `root`, walked from it through the children files
/// (only the tree is read, however many processes the system runs),
/// parents before their children.
fn walk(root: i32) -> Vec<Proc> {
    let mut out = Vec::new();
    let mut seen = HashSet::from([root]);
    let mut next = VecDeque::from([root]);
    while let Some(parent) = next.pop_front() {
        for child in children(parent) {
            if seen.insert(child) {
                if let Some(p) = read_stat(child) {
                    out.push(p);
                    next.push_back(child);
                }
            }
        }
    }
    out
}

/// The processes under `root` now, zombies included: walked through the
/// children files, or, on a kernel without them, picked from a scan of
/// every process.
fn tree(root: i32) -> Vec<Proc> {
    if children_files() {
        walk(root)
    } else {
        under(&scan(), root)
    }
}

/// Every process under `root` now, zombies included.
pub fn descendants(root: Pid) -> Vec<Proc> {
    tree(root.as_raw_nonzero().get())
}

/// Send `sig` to `p` if it is still the process that was scanned.
fn signal_one(p: &Proc, sig: Signal) -> Result<(), Errno> {
    let Some(pid) = Pid::from_raw(p.pid) else {
        return Ok(());
    };
    match pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => {
            // The pidfd names whoever had the pid when it was opened: send
            // only if that is still the scanned process.
            match read_stat(p.pid) {
                Some(now) if now.start == p.start => pidfd_send_signal(fd.as_fd(), sig),
                _ => Ok(()),
            }
        }
        Err(Errno::SRCH) => Ok(()),
        Err(Errno::NOSYS) => kill_process(pid, sig),
        Err(e) => Err(e),
    }
}

/// The process groups to signal for the processes `found`: those led by
/// one of them (zombies included: a group's id is not reused while its
/// leader is unreaped) or by `leader`, that still hold a live member, and
/// never the caller's own (nor one whose id `/proc` shows as 0: not
/// visible in this PID namespace, as the caller's own may be).
fn groups(found: &[Proc], leader: Option<i32>) -> Vec<i32> {
    let pids: HashSet<i32> = found.iter().map(|p| p.pid).chain(leader).collect();
    let own = crate::ids::own_group_raw();
    // In order, each once, by insertion: a job has a few groups, and a
    // sort of std's of its own type costs the command kilobytes.
    let mut out: Vec<i32> = Vec::new();
    for p in found {
        if p.alive() && p.pgid != own && pids.contains(&p.pgid) {
            if let Err(at) = out.binary_search(&p.pgid) {
                out.insert(at, p.pgid);
            }
        }
    }
    out
}

/// What one round of signals found.
#[derive(Debug, Default)]
pub struct Round {
    /// The live processes found under the root.
    pub found: Vec<Proc>,
    /// Those the signal could not be sent to, with why.
    pub failed: Vec<(Proc, Errno)>,
}

/// The processes and groups already sent a signal, so that a rescan sends
/// it only to newcomers.
#[derive(Debug, Default)]
pub struct Sent {
    procs: HashSet<(i32, u64)>,
    groups: HashSet<i32>,
}

/// Send `sig` to every live process under `root` not in `sent` (pass a
/// fresh [`Sent`] to reach all of them): first to their process groups
/// (see the [module docs](self); `leader` is a group leader that may
/// already be gone), then to each by pid. SIGTERM is followed by SIGCONT
/// for a stopped process, so that it can act on it (no other signal is:
/// SIGSTOP must leave every process stopped).
pub fn signal_all(root: Pid, sig: Signal, leader: Option<Pid>, sent: &mut Sent) -> Round {
    signal_all_but(root, sig, leader, sent, &|_| false)
}

/// [`signal_all`], leaving out every process for which `spare` holds (and
/// the groups they lead): they are neither signalled nor found.
fn signal_all_but(
    root: Pid,
    sig: Signal,
    leader: Option<Pid>,
    sent: &mut Sent,
    spare: &dyn Fn(&Proc) -> bool,
) -> Round {
    let mut all = tree(root.as_raw_nonzero().get());
    all.retain(|p| !spare(p));
    let leader = leader.map(|p| p.as_raw_nonzero().get());
    for group in groups(&all, leader) {
        if sent.groups.insert(group) {
            if let Some(group) = Pid::from_raw(group) {
                let _ = kill_process_group(group, sig);
            }
        }
    }
    let mut round = Round::default();
    for p in all.into_iter().filter(Proc::alive) {
        if sent.procs.insert((p.pid, p.start)) {
            match signal_one(&p, sig) {
                Ok(()) if sig == Signal::TERM && p.state == 'T' => {
                    let _ = signal_one(&p, Signal::CONT);
                }
                Ok(()) => {}
                Err(e) => round.failed.push((p.clone(), e)),
            }
        }
        round.found.push(p);
    }
    round
}

/// How long to wait between two rounds of [`kill_all`], `elapsed` after
/// the first: often at first, then less so.
fn pause(elapsed: Duration) -> Duration {
    if elapsed < Duration::from_secs(1) {
        Duration::from_millis(5)
    } else {
        Duration::from_millis(50)
    }
}

/// SIGKILL every process under `root` (and the groups, as
/// [`signal_all`]) but those `spare` holds for, again and again, calling
/// `reap` between rounds (to collect the caller's dead children), until
/// none is alive or `bound` has passed.
///
/// # Errors
///
/// The processes still alive after `bound`, with why the last signal to
/// each failed, if it did.
pub fn kill_all(
    root: Pid,
    leader: Option<Pid>,
    bound: Duration,
    reap: &mut dyn FnMut(),
    spare: &dyn Fn(&Proc) -> bool,
) -> Result<(), Vec<String>> {
    let start = Instant::now();
    loop {
        reap();
        let round = signal_all_but(root, Signal::KILL, leader, &mut Sent::default(), spare);
        if round.found.is_empty() {
            reap();
            return Ok(());
        }
        let elapsed = start.elapsed();
        if elapsed >= bound {
            let failed: HashMap<i32, Errno> =
                round.failed.iter().map(|(p, e)| (p.pid, *e)).collect();
            return Err(round
                .found
                .iter()
                .map(|p| match failed.get(&p.pid) {
                    Some(e) => format!("{p}: {e}"),
                    None => p.to_string(),
                })
                .collect());
        }
        std::thread::sleep(pause(elapsed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(pid: i32, comm: &str, state: char, ppid: i32, pgid: i32) -> String {
        format!(
            "{pid} ({comm}) {state} {ppid} {pgid} 1 0 -1 4194304 100 0 0 0 1 2 0 0 20 0 1 0 \
             {pid}00 1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
        )
    }

    #[test]
    fn a_name_holding_brackets_and_spaces_is_read_to_its_last_bracket() {
        let p = parse_stat(&stat(42, "evil) S 1 1 (x", 'S', 7, 9)).expect("parsed");
        assert_eq!(
            (p.pid, p.ppid, p.pgid, p.state, p.start),
            (42, 7, 9, 'S', 4200)
        );
        assert_eq!(p.comm, "evil) S 1 1 (x");
        assert!(parse_stat("42 (cut short) S 7").is_none());
        assert!(parse_stat("").is_none());
    }

    #[test]
    fn the_tree_holds_every_descendant_and_nothing_else() {
        let all: Vec<Proc> = [
            stat(10, "root", 'S', 1, 10),
            stat(11, "child", 'S', 10, 11),
            stat(12, "grandchild", 'S', 11, 11),
            stat(13, "setsid", 'S', 10, 13),
            stat(14, "zombie", 'Z', 13, 13),
            stat(20, "stranger", 'S', 1, 20),
            stat(21, "its child", 'S', 20, 20),
        ]
        .iter()
        .map(|s| parse_stat(s).unwrap())
        .collect();
        let mut pids: Vec<i32> = under(&all, 10).iter().map(|p| p.pid).collect();
        pids.sort_unstable();
        assert_eq!(pids, [11, 12, 13, 14]);
        assert!(under(&all, 12).is_empty());
        let found = under(&all, 10);
        // Groups led by a descendant; a zombie is not alive.
        assert_eq!(groups(&found, None), [11, 13]);
        assert!(!found.iter().find(|p| p.pid == 14).unwrap().alive());
        // The command's group once its leader is gone.
        let orphans: Vec<Proc> = found.into_iter().filter(|p| p.pid != 11).collect();
        assert_eq!(groups(&orphans, Some(11)), [11, 13]);
        assert_eq!(groups(&orphans, None), [13]);
    }

    #[test]
    fn the_walk_and_the_scan_find_the_same_tree() {
        if !children_files() {
            eprintln!("note: this kernel has no /proc/PID/task/TID/children; the scan is used");
            return;
        }
        let mut sleeper = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30 & wait"])
            .spawn()
            .expect("sh starts");
        let me = std::process::id() as i32;
        let pids = |mut v: Vec<Proc>| {
            v.retain(|p| p.pid != me);
            let mut v: Vec<i32> = v.into_iter().map(|p| p.pid).collect();
            v.sort_unstable();
            v
        };
        let mut found = (Vec::new(), Vec::new());
        for _ in 0..100 {
            let walked = pids(walk(me));
            let scanned = pids(under(&scan(), me));
            if walked.len() == 3 && walked == scanned {
                found = (walked, scanned);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = signal_all(
            Pid::from_child(&sleeper),
            Signal::KILL,
            None,
            &mut Sent::default(),
        );
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert_eq!(found.0.len(), 3, "sh and its two sleeps: {found:?}");
    }

    #[test]
    fn this_process_is_found_under_its_parent() {
        let me = rustix::process::getpid();
        let parent = rustix::process::getppid().expect("a parent");
        let found = descendants(parent);
        let mine = found
            .iter()
            .find(|p| p.pid == me.as_raw_nonzero().get())
            .expect("found");
        assert!(mine.alive());
        assert!(descendants(me).iter().all(|p| p.pid != mine.pid));
    }
}
