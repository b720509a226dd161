//! `bucket-lease inspect --watch` on `file://` directories (no server):
//! one JSON line per change, SIGINT and SIGTERM end it with exit 0, a
//! closed stdout (`| head -1`) ends it quietly with exit 0, and misuse
//! exits as `inspect` does.
#![cfg(all(feature = "cli", feature = "fs"))]

mod cli_common;

use bucket_lease::record::format_stamp;
use cli_common::{finish, signal, Target, CONFIG, USAGE};
use rustix::process::Signal;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant, SystemTime};

/// How long a test waits for a line it expects: far beyond a poll
/// interval, for a loaded machine.
const LINE_LIMIT: Duration = Duration::from_secs(30);

/// A record of `holder` at `epoch`, renewed now, with a TTL of `ttl_s`.
fn record(holder: &str, epoch: u64, ttl_s: u64) -> Vec<u8> {
    let now = format_stamp(SystemTime::now());
    serde_json::json!({
        "instance_id": holder,
        "acquired_at": now,
        "renewed_at": now,
        "ttl_s": ttl_s,
        "epoch": epoch,
        "instance_nonce": format!("n-{holder}"),
        "holder_name": format!("{holder}-host:1"),
    })
    .to_string()
    .into_bytes()
}

/// `inspect --watch --interval INTERVAL URL` in the background, and its
/// stdout as lines on a channel.
fn watch(t: &Target, url: &str, interval: &str) -> (Child, Receiver<String>) {
    let mut child = t.spawn(["inspect", "--watch", "--interval", interval, url]);
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, lines)
}

/// The next line, parsed: it must come within [`LINE_LIMIT`].
fn next_line(lines: &Receiver<String>) -> Value {
    let line = lines
        .recv_timeout(LINE_LIMIT)
        .unwrap_or_else(|e| panic!("no line within {LINE_LIMIT:?}: {e}"));
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

fn change(line: &Value) -> (&str, &str, Option<&str>, Option<u64>) {
    (
        line["change"].as_str().unwrap(),
        line["state"].as_str().unwrap(),
        line["holder"].as_str(),
        line["epoch"].as_u64(),
    )
}

/// The first line is the state as it is; then a holder, two takeovers
/// and an expiry, each one line with the fields of `inspect --json`; then
/// SIGINT ends it with exit 0 and nothing on stderr.
#[test]
fn two_takeovers_are_seen_as_json_lines() {
    let t = Target::fs("watch-takeovers");
    let url = t.url("jobs");
    let (child, lines) = watch(&t, &url, "100ms");
    let first = next_line(&lines);
    assert_eq!(change(&first), ("first", "free", None, None));
    assert_eq!(first["url"], url.as_str());
    assert_eq!(first["key"], "jobs/LEASE");
    assert!(first["seen_at"].is_string(), "{first}");

    t.put_lease(&url, &record("a", 1, 30));
    let held = next_line(&lines);
    assert_eq!(change(&held), ("appeared", "held", Some("a"), Some(1)));
    assert_eq!(held["holder_name"], "a-host:1");
    assert_eq!(held["instance_nonce"], "n-a");
    assert_eq!(held["fresh"], true);
    for field in [
        "etag",
        "ttl_s",
        "age_s",
        "expires_in_s",
        "read_at",
        "released",
    ] {
        assert!(held.get(field).is_some(), "{field}: {held}");
    }

    t.put_lease(&url, &record("b", 2, 30));
    assert_eq!(
        change(&next_line(&lines)),
        ("holder", "held", Some("b"), Some(2))
    );
    // The last holder nobody renews: held, then expired at its TTL.
    t.put_lease(&url, &record("c", 3, 2));
    assert_eq!(
        change(&next_line(&lines)),
        ("holder", "held", Some("c"), Some(3))
    );
    let expired = next_line(&lines);
    assert_eq!(change(&expired), ("expired", "expired", Some("c"), Some(3)));
    assert_eq!(expired["fresh"], false);

    signal(&child, Signal::INT);
    let done = finish(child, LINE_LIMIT);
    assert_eq!(done.code, Some(0), "{done:?}");
    assert_eq!(done.stderr, "", "{done:?}");
    assert!(lines.try_recv().is_err(), "no line after the signal");
}

/// SIGINT and SIGTERM end the watch with exit 0 while it sleeps between
/// reads (a minute apart: it does not wait for the next one).
#[test]
fn sigint_and_sigterm_end_the_watch_with_exit_0() {
    let t = Target::fs("watch-signals");
    let url = t.url("jobs");
    t.put_lease(&url, &record("a", 1, 3600));
    for sig in [Signal::INT, Signal::TERM] {
        let (child, lines) = watch(&t, &url, "1m");
        assert_eq!(change(&next_line(&lines)).0, "first");
        signal(&child, sig);
        let done = finish(child, LINE_LIMIT);
        assert_eq!(done.code, Some(0), "{sig:?}: {done:?}");
        assert_eq!(done.stderr, "", "{sig:?}: {done:?}");
    }
}

/// `inspect --watch URL | head -1`: head prints the first line and exits;
/// the watch ends quietly with exit 0 at its next line (the pipeline's
/// status under `pipefail` is 0).
#[test]
fn a_closed_stdout_ends_the_watch_quietly() {
    let t = Target::fs("watch-head");
    let url = t.url("jobs");
    t.put_lease(&url, &record("a", 1, 3600));
    let mut pipeline = Command::new("bash")
        .args([
            "-c",
            "set -o pipefail; \"$0\" inspect --watch --interval 50ms \"$1\" | head -1",
            env!("CARGO_BIN_EXE_bucket-lease"),
            &url,
        ])
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("BUCKET_LEASE_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash starts");
    let mut first = String::new();
    BufReader::new(pipeline.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    let first: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(change(&first), ("first", "held", Some("a"), Some(1)));
    // A change for the watch to write, until its write finds the pipe
    // closed (the first may still fit before head exits).
    let limit = Instant::now() + LINE_LIMIT;
    let mut epoch = 1;
    while pipeline.try_wait().unwrap().is_none() {
        assert!(Instant::now() < limit, "the watch did not end");
        epoch += 1;
        t.put_lease(&url, &record("b", epoch, 3600));
        std::thread::sleep(Duration::from_millis(200));
    }
    let done = finish(pipeline, LINE_LIMIT);
    assert_eq!(done.code, Some(0), "{done:?}");
    assert_eq!(done.stderr, "", "{done:?}");
}

#[test]
fn misuse_and_a_bad_url_exit_as_inspect_does() {
    let t = Target::fs("watch-misuse");
    let url = t.url("jobs");
    for (args, code, says) in [
        (
            vec!["inspect", "--watch", "ftp://x/y"],
            CONFIG,
            "unknown scheme",
        ),
        (vec!["inspect", "--watch"], USAGE, "URL"),
        (
            vec!["inspect", "--watch", "--interval", "0", url.as_str()],
            USAGE,
            "--interval",
        ),
        (
            vec!["inspect", "--watch", "--interval", "soon", url.as_str()],
            USAGE,
            "--interval",
        ),
        (
            vec!["inspect", "--interval", "1s", url.as_str()],
            USAGE,
            "give --watch too",
        ),
    ] {
        let done = t.run(&args);
        assert_eq!(done.code, Some(code), "{args:?}: {done:?}");
        assert!(done.stderr.contains(says), "{args:?}: {done:?}");
        assert_eq!(done.stdout, "", "{args:?}: {done:?}");
    }
    // A directory that is not there: the store cannot be opened (78).
    let missing = "file:///nonexistent/bucket-lease-watch//jobs";
    let done = t.run(["inspect", "--watch", missing]);
    assert_eq!(done.code, Some(CONFIG), "{done:?}");
}
