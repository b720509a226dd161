//! A profile's `credential_process`: a program, run through `sh -c`, that
//! prints `{"Version": 1, "AccessKeyId", "SecretAccessKey",
//! "SessionToken"?, "Expiration"?}` on its standard output. Its standard
//! input is empty and its standard error goes to ours; its output is never
//! shown (it holds the secret), not even in part.
//!
//! One run is bounded as a whole by the fetch's deadline:
//!
//! - the program runs in a process group of its own, and if it has not
//!   exited by the deadline the whole group is killed (`SIGKILL`), so no
//!   process it started outlives the fetch, and the shell is reaped;
//! - a provider dropped while it runs (the process may be about to exit)
//!   kills its group at once, so it never outlives the process that ran it;
//! - its output is read as it comes, by polling the pipe with a timeout,
//!   never by a thread blocked until the pipe's end;
//! - once the shell has exited, its output is read to the end for a short
//!   grace ([`GRACE`], never past the deadline). A process it left behind
//!   that still holds the output open (`helper &`) is not waited for: the
//!   output read so far is used if it is complete, the program's process
//!   group is killed, and the profile is named in one warning (per
//!   provider, not per run).
//! - every run in flight is listed, by its process group, for
//!   [`with_running_groups`]: a program that kills the processes left
//!   under it (`bucket-lease run`, a subreaper) spares them with it.

use super::{CredentialsProvider, Fetch, Fetched, Source};
use crate::sign::Credentials;
use bucket_lease_core::mutant::StoreMutant;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// The most bytes read from the program's output.
const MAX_OUTPUT: usize = 64 * 1024;

/// How long the output is read for after the shell has exited, waiting
/// for its end.
const GRACE: Duration = Duration::from_millis(100);

/// The process groups (each its shell's pid) of every run in flight in
/// this process. Held while a shell is spawned, so that a run is listed
/// from its first instant.
static RUNNING_GROUPS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Call `f` with the process groups (each led by the run's `sh`) of every
/// `credential_process` run in flight in this process; none starts until
/// `f` returns, and none of their shells is reaped by anyone else meanwhile
/// unless `f` does it.
///
/// For a program that kills and reaps whatever is left under it (as
/// `bucket-lease run` does with what its command leaves behind): a run of
/// a credential helper is then a child of that program too, and must be
/// spared, or the refresh it serves fails.
pub fn with_running_groups<R>(f: impl FnOnce(&[u32]) -> R) -> R {
    let groups = RUNNING_GROUPS.lock().unwrap_or_else(|e| e.into_inner());
    f(&groups)
}

/// How often a running shell is checked for its exit while its output is
/// quiet.
const STEP: Duration = Duration::from_millis(10);

pub(crate) fn provider(profile: &str, command: &str) -> CredentialsProvider {
    CredentialsProvider::fetching(
        Source::Process {
            profile: profile.to_string(),
        },
        Box::new(Process::new(profile, command)),
    )
}

struct Process {
    profile: String,
    command: String,
    /// Whether the warning about a process left holding the output has
    /// been given.
    warned_leftover: AtomicBool,
    /// The process group of the run in flight (its shell's pid), for
    /// [`Fetch::cancel`].
    running: Mutex<Option<u32>>,
}

/// A run's place in [`RUNNING_GROUPS`], given up when the fetch ends
/// (whichever way), after its shell was reaped and its group killed.
struct Listed(u32);

impl Drop for Listed {
    fn drop(&mut self) {
        let mut listed = RUNNING_GROUPS.lock().unwrap_or_else(|e| e.into_inner());
        listed.retain(|group| *group != self.0);
    }
}

/// How one run of the program ended, before its output is parsed.
enum Ended {
    /// The shell exited and its output reached its end.
    Complete(ExitStatus),
    /// The shell exited, but a process it left holds the output open.
    LeftOpen(ExitStatus),
}

impl Process {
    fn new(profile: &str, command: &str) -> Self {
        Process {
            profile: profile.to_string(),
            command: command.to_string(),
            warned_leftover: AtomicBool::new(false),
            running: Mutex::new(None),
        }
    }

    /// Run the program until it exits and its output ends, or the
    /// grace after its exit, or the deadline; the output read into
    /// `output`.
    fn run(
        &self,
        child: &mut Child,
        stdout: &mut ChildStdout,
        output: &mut Vec<u8>,
        deadline: Instant,
    ) -> Result<Ended, String> {
        rustix::io::ioctl_fionbio(&*stdout, true)
            .map_err(|e| format!("cannot read credential_process's output: {e}"))?;
        let mut open = true;
        let mut exited: Option<(ExitStatus, Instant)> = None;
        loop {
            if exited.is_none() {
                match child.try_wait() {
                    Ok(status) => exited = status.map(|s| (s, Instant::now())),
                    Err(e) => {
                        kill_group(child);
                        return Err(format!("waiting for credential_process: {e}"));
                    }
                }
            }
            let now = Instant::now();
            // Until when to read now; `None`: no bound.
            let until = match exited {
                None if now >= deadline => {
                    kill_group(child);
                    return Err("credential_process did not finish by the deadline; it was \
                                killed, with the processes it started"
                        .into());
                }
                None => Some(deadline),
                Some((status, _)) if !open => return Ok(Ended::Complete(status)),
                // The old defect: the pipe read to its end, however long.
                Some(_) if StoreMutant::UnboundedProcessOutput.on() => None,
                Some((status, at)) => {
                    let until = (at + GRACE).min(deadline);
                    if now >= until {
                        return Ok(Ended::LeftOpen(status));
                    }
                    Some(until)
                }
            };
            let mut wait = until.map_or(STEP, |u| u.saturating_duration_since(now));
            if exited.is_none() {
                wait = wait.min(STEP);
            }
            if !open {
                // The output has ended but the shell runs on.
                std::thread::sleep(wait);
                continue;
            }
            match read_some(stdout, output, wait) {
                Ok(more) => open = more,
                Err(why) => {
                    if exited.is_none() {
                        kill_group(child);
                    }
                    return Err(why);
                }
            }
        }
    }
}

/// Wait up to `wait` for the pipe, then read what it holds into
/// `output`. `false` at the pipe's end.
fn read_some(
    stdout: &mut ChildStdout,
    output: &mut Vec<u8>,
    wait: Duration,
) -> Result<bool, String> {
    let timeout = rustix::event::Timespec::try_from(wait).unwrap_or(rustix::event::Timespec {
        tv_sec: 1,
        tv_nsec: 0,
    });
    let mut fds = [rustix::event::PollFd::new(
        &*stdout,
        rustix::event::PollFlags::IN,
    )];
    match rustix::event::poll(&mut fds, Some(&timeout)) {
        Ok(0) | Err(rustix::io::Errno::INTR) => return Ok(true),
        Ok(_) => {}
        Err(e) => return Err(format!("waiting for credential_process's output: {e}")),
    }
    let mut chunk = [0u8; 8192];
    loop {
        match stdout.read(&mut chunk) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                output.extend_from_slice(&chunk[..n]);
                if output.len() > MAX_OUTPUT {
                    return Err(format!(
                        "credential_process printed more than {MAX_OUTPUT} bytes"
                    ));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading credential_process's output: {e}")),
        }
    }
}

/// Kill the program's whole process group, then reap the shell.
fn kill_group(child: &mut Child) {
    kill_group_of(child.id());
    // The shell at least, should the group be gone.
    let _ = child.kill();
    let _ = child.wait();
}

/// Kill the process group whose leader was the shell `pid`.
fn kill_group_of(pid: u32) {
    let group = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .filter(|pid| *pid != rustix::process::Pid::INIT);
    if let Some(group) = group {
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    }
}

impl Fetch for Process {
    /// Kill the run in flight with its process group: its shell is then
    /// reaped by the fetch, which fails.
    fn cancel(&self) {
        if let Some(pid) = *self.running.lock().unwrap_or_else(|e| e.into_inner()) {
            kill_group_of(pid);
        }
    }

    fn fetch(&self, deadline: Instant) -> Result<Fetched, String> {
        let mut child = {
            let mut listed = RUNNING_GROUPS.lock().unwrap_or_else(|e| e.into_inner());
            let child = Command::new("sh")
                .arg("-c")
                .arg(&self.command)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .process_group(0)
                .spawn()
                .map_err(|e| format!("cannot start `sh -c` for credential_process: {e}"))?;
            listed.push(child.id());
            child
        };
        let _listed = Listed(child.id());
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut output = Vec::new();
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = Some(child.id());
        let ended = self.run(&mut child, &mut stdout, &mut output, deadline);
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = None;
        // A process left behind keeps its end of the pipe; ours closes.
        drop(stdout);
        let (status, complete) = match ended? {
            Ended::Complete(status) => (status, true),
            Ended::LeftOpen(status) => {
                // What it left in its group goes too: nothing of a run
                // outlives its fetch (under `bucket-lease run`, a
                // subreaper, it would otherwise be taken for the command's).
                kill_group(&mut child);
                if !self.warned_leftover.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "the credential_process of profile {:?} exited leaving a process that \
                         held its standard output open; its output was used without waiting, \
                         and the processes it left were stopped (a credential_process must \
                         close its output when it is done; said once)",
                        self.profile
                    );
                }
                (status, false)
            }
        };
        if !status.success() {
            return Err(format!("credential_process failed ({status})"));
        }
        match parse(&output) {
            Err(_) if !complete => Err("credential_process exited but left a process holding \
                                        its output open, and its output was incomplete"
                .into()),
            parsed => parsed,
        }
    }
}

/// The credentials in the program's output. Errors name fields, never
/// their values.
pub(crate) fn parse(output: &[u8]) -> Result<Fetched, String> {
    let json: serde_json::Value = serde_json::from_slice(output)
        .map_err(|_| "credential_process printed something that is not JSON".to_string())?;
    if json.get("Version").and_then(serde_json::Value::as_u64) != Some(1) {
        return Err("credential_process's JSON has no \"Version\": 1".into());
    }
    let field = |name: &str| json.get(name).and_then(serde_json::Value::as_str);
    let (Some(access_key), Some(secret)) = (field("AccessKeyId"), field("SecretAccessKey")) else {
        return Err(
            "credential_process's JSON lacks \"AccessKeyId\" or \"SecretAccessKey\"".into(),
        );
    };
    let mut credentials = Credentials::new(access_key, secret);
    if let Some(token) = field("SessionToken").filter(|t| !t.is_empty()) {
        credentials = credentials.with_session_token(token);
    }
    let expires = match field("Expiration") {
        None => None,
        Some(text) => Some(parse_expiration(text).ok_or_else(|| {
            format!("credential_process's \"Expiration\" {text:?} is not an RFC 3339 time")
        })?),
    };
    Ok(Fetched {
        credentials,
        expires,
    })
}

/// An RFC 3339 time (`2026-11-30T08:00:00Z`) as a `SystemTime`.
pub(crate) fn parse_expiration(text: &str) -> Option<SystemTime> {
    let parsed =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    Some(SystemTime::from(parsed))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_no_secret, capture_log, temp_dir, SECRET_MARK};
    use super::*;

    /// The program of profile `profile` running `script` (written to a
    /// directory of its own, since tests run in parallel); the directory.
    fn script(name: &str, profile: &str, script: &str) -> (Process, std::path::PathBuf) {
        let dir = temp_dir(name);
        let file = dir.join("creds.sh");
        std::fs::write(&file, script.replace("{dir}", dir.to_str().unwrap())).unwrap();
        (process(profile, &format!("sh '{}'", file.display())), dir)
    }

    fn process(profile: &str, command: &str) -> Process {
        Process::new(profile, command)
    }

    /// Whether process `pid` has ended (a zombie nobody reaped counts).
    fn gone(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        }
    }

    /// A program that prints its credentials and exits, leaving a child
    /// (here `sleep 5 &`) that holds its standard output: the output is
    /// used without waiting for that child, and a warning names the
    /// profile once.
    #[test]
    fn a_child_left_holding_the_output_does_not_hold_the_fetch() {
        let log = capture_log();
        let (process, dir) = script(
            "leftover",
            "leftover-child",
            &format!(
                "printf '{{\"Version\": 1, \"AccessKeyId\": \"AKIDLEFT\", \
                 \"SecretAccessKey\": \"{SECRET_MARK}-left\"}}'\nsleep 5 &\n\
                 echo $! >> '{{dir}}/children'\n"
            ),
        );
        for _ in 0..2 {
            let started = Instant::now();
            let fetched = process
                .fetch(Instant::now() + Duration::from_secs(10))
                .unwrap();
            let took = started.elapsed();
            assert_eq!(fetched.credentials.access_key_id(), "AKIDLEFT");
            // The old code read to the end: until the child's 5 s were up.
            assert!(took < Duration::from_secs(2), "took {took:?}");
        }
        // The children it left were stopped with its process group.
        let children = std::fs::read_to_string(dir.join("children")).unwrap();
        for pid in children.lines().map(|l| l.trim().parse::<u32>().unwrap()) {
            let asked = Instant::now();
            while !gone(pid) {
                assert!(
                    asked.elapsed() < Duration::from_secs(2),
                    "{pid} outlived its fetch"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let warnings: Vec<String> = log
            .lock()
            .unwrap()
            .iter()
            .filter(|w| w.contains("profile \"leftover-child\""))
            .cloned()
            .collect();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("standard output"), "{warnings:?}");
        assert_no_secret(&warnings[0]);
    }

    /// Output cut short by the child left holding the pipe is an error
    /// saying so, without the part that was read.
    #[test]
    fn output_cut_short_by_a_child_left_behind_is_an_error_saying_so() {
        let (process, _dir) = script(
            "cut-short",
            "cut-short",
            &format!(
                "printf '{{\"Version\": 1, \"AccessKeyId\": \"AKIDCUT\", '\n\
                 ( sleep 3; printf '\"SecretAccessKey\": \"{SECRET_MARK}-cut\"}}' ) &\n"
            ),
        );
        let started = Instant::now();
        let e = match process.fetch(Instant::now() + Duration::from_secs(10)) {
            Ok(_) => panic!("incomplete output accepted"),
            Err(e) => e,
        };
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert!(
            e.contains("left a process holding its output open") && e.contains("incomplete"),
            "{e}"
        );
        assert_no_secret(&e);
    }

    /// A program that hangs is killed at the deadline with the processes
    /// it started (its whole process group).
    #[test]
    fn a_hanging_program_is_killed_with_its_children_at_the_deadline() {
        let (process, dir) = script(
            "hangs",
            "hangs",
            "sleep 30 &\necho $! > '{dir}/sleep.pid'\nwait\n",
        );
        let started = Instant::now();
        let e = match process.fetch(Instant::now() + Duration::from_millis(300)) {
            Ok(_) => panic!("a hanging program gave credentials"),
            Err(e) => e,
        };
        let took = started.elapsed();
        assert!(took < Duration::from_millis(800), "took {took:?}");
        assert!(e.contains("deadline") && e.contains("killed"), "{e}");
        assert_ends_soon(&dir.join("sleep.pid"), "the deadline");
    }

    /// The process whose pid is in `file` ends within 2 s of `what`.
    fn assert_ends_soon(file: &std::path::Path, what: &str) {
        let pid: u32 = std::fs::read_to_string(file)
            .expect("the script wrote its child's pid")
            .trim()
            .parse()
            .unwrap();
        let killed = Instant::now();
        while !gone(pid) {
            assert!(
                killed.elapsed() < Duration::from_secs(2),
                "the program's child {pid} outlived {what}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A program still running (in the background refresher) when its
    /// provider is dropped, as when the command exits, is killed with its
    /// group then: it never outlives the process that started it.
    #[test]
    fn a_program_running_when_its_provider_is_dropped_is_killed_with_it() {
        let dir = temp_dir("dropped");
        let file = dir.join("creds.sh");
        std::fs::write(
            &file,
            format!(
                "sleep 30 &\necho $! > '{}/sleep.pid'\nwait\n",
                dir.display()
            ),
        )
        .unwrap();
        let provider = provider("dropped", &format!("sh '{}'", file.display()));
        let e = provider
            .credentials(Some(Instant::now() + Duration::from_millis(300)))
            .unwrap_err();
        assert!(e.to_string().contains("did not answer"), "{e}");
        drop(provider);
        assert_ends_soon(&dir.join("sleep.pid"), "its provider");
    }

    #[test]
    fn output_is_read_and_errors_never_show_values() {
        let ok = parse(
            br#"{"Version":1,"AccessKeyId":"AKIDP","SecretAccessKey":"proc-secret",
                "SessionToken":"proc-token","Expiration":"2030-01-02T03:04:05Z"}"#,
        )
        .unwrap();
        assert_eq!(ok.credentials.access_key_id(), "AKIDP");
        assert!(ok.credentials.has_session_token());
        assert_eq!(
            ok.expires,
            Some(std::time::UNIX_EPOCH + Duration::from_secs(1_893_553_445))
        );
        for bad in [
            &br#"{"Version":2,"AccessKeyId":"A","SecretAccessKey":"proc-secret"}"#[..],
            br#"{"Version":1,"SecretAccessKey":"proc-secret"}"#,
            br#"{"Version":1,"AccessKeyId":"A","SecretAccessKey":"proc-secret","Expiration":"soon"}"#,
            b"proc-secret is not json",
        ] {
            let e = match parse(bad) {
                Ok(_) => panic!("accepted"),
                Err(e) => e,
            };
            assert!(!e.contains("proc-secret"), "{e}");
        }
    }
}
