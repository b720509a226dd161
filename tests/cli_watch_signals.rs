//! `bucket-lease inspect --watch` ended by a signal whatever it waits on:
//! a read that hangs, a credentials source that hangs (endpoints on
//! 127.0.0.1 that misbehave; no server needed).
#![cfg(all(feature = "cli", feature = "s3"))]

mod cli_common;

use cli_common::{answering, black_hole, finish, signal, Proxy, Target};
use rustix::process::Signal;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// `inspect --watch` in the background with `args`, and its stdout as
/// lines on a channel.
fn watch(t: &Target, args: &[&str]) -> (Child, Receiver<String>) {
    let mut all = vec!["inspect", "--watch"];
    all.extend_from_slice(args);
    let mut child = t.spawn(all);
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

/// inspect.rs: "SIGINT and SIGTERM end it with exit 0, at once, also
/// mid-wait." During the first read, on an endpoint that never answers,
/// a signal must end the watch at once with exit 0 (as `run`'s wait ends
/// at once mid-request: cli_http's `a_signal_ends_a_wait_at_once`), not
/// wait out the read's `--timeout` and then exit 69.
#[test]
fn a_signal_during_the_first_read_on_a_black_hole_ends_the_watch_at_once() {
    let t = Target::http("watch-black-hole-first", &black_hole(), "bucket");
    let url = t.url("lease");
    for sig in [Signal::INT, Signal::TERM] {
        let (child, _lines) = watch(&t, &["--timeout", "20s", url.as_str()]);
        std::thread::sleep(Duration::from_millis(1500));
        let sent = Instant::now();
        signal(&child, sig);
        let done = finish(child, Duration::from_secs(60));
        let took = sent.elapsed();
        assert!(
            took < Duration::from_secs(5) && done.code == Some(0),
            "{sig:?} during the first read: exit {:?} after {took:?} (expected 0 at once): {done:?}",
            done.code
        );
    }
}

/// The same once the watch runs: the first read answered (no lease), then
/// the network turns into a black hole; a signal during the hanging poll
/// must end the watch at once with exit 0, not after `--timeout`.
#[test]
fn a_signal_during_a_later_hanging_read_ends_the_watch_at_once() {
    let proxy = Proxy::start(&answering("404 Not Found", "NoSuchKey"));
    let t = Target::http("watch-black-hole-later", proxy.endpoint(), "bucket");
    let url = t.url("lease");
    let (child, lines) = watch(
        &t,
        &["--interval", "100ms", "--timeout", "20s", url.as_str()],
    );
    let first: Value = serde_json::from_str(
        &lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the first line"),
    )
    .unwrap();
    assert_eq!(first["change"], "first", "{first}");
    assert_eq!(first["state"], "free", "{first}");
    proxy.black_hole(true);
    // Well into a poll that is never answered.
    std::thread::sleep(Duration::from_millis(1500));
    let sent = Instant::now();
    signal(&child, Signal::INT);
    let done = finish(child, Duration::from_secs(60));
    let took = sent.elapsed();
    assert!(
        took < Duration::from_secs(5) && done.code == Some(0),
        "SIGINT during a hanging poll: exit {:?} after {took:?} (expected 0 at once): {done:?}",
        done.code
    );
}

/// The same while opening the store: a `credential_process` that hangs.
/// The signal is taken (the handler is installed first: the process is
/// not killed by it) but not acted on until the `--timeout` watchdog ends
/// the process with exit 69.
#[test]
fn a_signal_while_the_credentials_source_hangs_ends_the_watch_at_once() {
    let t = Target::http("watch-hanging-credentials", &black_hole(), "bucket");
    let config = t.path("config");
    std::fs::write(&config, "[default]\ncredential_process = sleep 60\n").unwrap();
    let t = t
        .with_env("AWS_ACCESS_KEY_ID", None)
        .with_env("AWS_SECRET_ACCESS_KEY", None)
        .with_env("AWS_CONFIG_FILE", Some(&config.display().to_string()));
    let url = t.url("lease");
    let (child, _lines) = watch(&t, &["--timeout", "20s", url.as_str()]);
    std::thread::sleep(Duration::from_millis(1500));
    let sent = Instant::now();
    signal(&child, Signal::INT);
    let done = finish(child, Duration::from_secs(60));
    let took = sent.elapsed();
    assert!(
        took < Duration::from_secs(5) && done.code == Some(0),
        "SIGINT while opening the store: exit {:?} after {took:?} (expected 0 at once): {done:?}",
        done.code
    );
}
