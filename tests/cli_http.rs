//! The `bucket-lease` command against HTTP endpoints on 127.0.0.1 that
//! misbehave in one fixed way: one that never answers (a black hole), and
//! one that refuses every request with a permanent error. No server needed.

mod cli_common;

use cli_common::{black_hole, finish, signal, Target, CONFIG, NO_PERMISSION, STORE};
use rustix::process::Signal;
use std::time::{Duration, Instant};

/// `run --wait 2` on an endpoint that never answers ends after one bounded
/// acquire attempt (about 10 s), not after two full request timeouts.
#[test]
fn a_wait_on_a_black_hole_ends_within_the_acquire_timeout() {
    let t = Target::http("black-hole-wait", &black_hole(), "bucket");
    let url = t.url("lease");
    for wait in ["0", "2"] {
        let started = Instant::now();
        let done = t.run(["run", "--wait", wait, url.as_str(), "--", "true"]);
        let took = started.elapsed();
        assert_eq!(done.code, Some(STORE), "--wait {wait}: {done:?}");
        assert!(
            took < Duration::from_secs(30),
            "--wait {wait} took {took:?}: {done:?}"
        );
    }
    let started = Instant::now();
    let done = t.run(["run", url.as_str(), "--", "true"]);
    assert_eq!(done.code, Some(STORE), "no --wait: {done:?}");
    assert!(started.elapsed() < Duration::from_secs(30), "{done:?}");
}

/// SIGINT or SIGTERM ends a wait at once, even in the middle of a request
/// that will never be answered.
#[test]
fn a_signal_ends_a_wait_at_once() {
    let t = Target::http("black-hole-signal", &black_hole(), "bucket");
    let url = t.url("lease");
    for (sig, code) in [(Signal::INT, 130), (Signal::TERM, 143)] {
        let child = t.spawn(["run", "--wait", "60", url.as_str(), "--", "true"]);
        std::thread::sleep(Duration::from_millis(1500));
        let sent = Instant::now();
        signal(&child, sig);
        let done = finish(child, Duration::from_secs(30));
        let took = sent.elapsed();
        assert_eq!(done.code, Some(code), "{sig:?}: {done:?}");
        assert!(
            took < Duration::from_secs(5),
            "{sig:?} ended the wait after {took:?}: {done:?}"
        );
    }
}

/// Refused credentials or permissions end `run` at once with exit 77 and
/// what to check, however long `--wait` is.
#[test]
fn refused_credentials_fail_at_once_with_77() {
    for code in [
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
    ] {
        let t = Target::http(
            "denied",
            &cli_common::answering("403 Forbidden", code),
            "bucket",
        );
        let url = t.url("lease");
        let started = Instant::now();
        let done = t.run(["run", "--wait", "30", url.as_str(), "--", "true"]);
        assert_eq!(done.code, Some(NO_PERMISSION), "{code}: {done:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{code}: {done:?}"
        );
        assert!(done.stderr.contains("credentials"), "{code}: {done:?}");
    }
}

/// A bucket that does not exist ends `run` at once with exit 78 saying so.
#[test]
fn a_missing_bucket_fails_at_once_with_78() {
    let endpoint = cli_common::answering("404 Not Found", "NoSuchBucket");
    let t = Target::http("no-bucket", &endpoint, "no-such-bucket");
    let url = t.url("lease");
    let started = Instant::now();
    let done = t.run(["run", "--wait", "30", url.as_str(), "--", "true"]);
    assert_eq!(done.code, Some(CONFIG), "{done:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "{done:?}");
    assert!(done.stderr.contains("does not exist"), "{done:?}");
}

/// A port nobody listens on: the command says nothing was sent, that a
/// retry is safe, and names the host and port; `https://` to a plain-HTTP
/// server says to check the scheme.
#[test]
fn a_refused_connection_and_a_tls_mismatch_say_what_happened_and_where() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap().to_string();
    drop(listener);
    let t = Target::http("refused", &format!("http://{target}"), "bucket");
    let done = t.run(["inspect", t.url("lease").as_str()]);
    assert_eq!(done.code, Some(STORE), "{done:?}");
    for part in [
        "not sent",
        &format!("could not connect to {target}"),
        "safe to retry",
    ] {
        assert!(done.stderr.contains(part), "{part}: {done:?}");
    }
    assert!(!done.stderr.contains("may have taken effect"), "{done:?}");

    // A plain-HTTP server that answers whatever arrives (a ClientHello).
    let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let https = format!("https://{}", plain.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in plain.incoming() {
            let Ok(mut stream) = stream else { return };
            let _ = stream.read(&mut [0u8; 512]);
            let _ = stream.write_all(
                b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
    let t = Target::http("tls-mismatch", &https, "bucket");
    let done = t.run(["inspect", t.url("lease").as_str()]);
    assert_eq!(done.code, Some(STORE), "{done:?}");
    assert!(
        done.stderr
            .contains("check http:// vs https:// in the endpoint"),
        "{done:?}"
    );
}

/// A prefix whose lease fits S3's 1024-byte keys but whose probe key does
/// not is refused when the store is configured, before any request (the
/// endpoint never answers, so a request would hang), naming the limit and
/// the longest prefix that fits; `bench`, whose scratch prefix is longer,
/// says how long a prefix it can bench, and creates nothing.
#[test]
fn a_prefix_too_long_for_the_probe_key_is_refused_before_any_request() {
    let t = Target::http("long-prefix", &black_hole(), "bucket");
    let url_with_prefix_of = |bytes: usize| {
        let base = t.url("p");
        let prefix_len = base.len() - "s3://bucket/".len();
        format!("{base}{}", "x".repeat(bytes - prefix_len))
    };
    let started = Instant::now();
    let done = t.run(["run", url_with_prefix_of(980).as_str(), "--", "true"]);
    assert_eq!(done.code, Some(CONFIG), "{done:?}");
    for part in ["980 bytes", "1024 bytes", "at most 979 bytes"] {
        assert!(done.stderr.contains(part), "{part}: {done:?}");
    }
    let done = t.run(["bench", "--iters", "1", url_with_prefix_of(970).as_str()]);
    assert_eq!(done.code, Some(CONFIG), "{done:?}");
    for part in ["970 bytes", "at most 964 bytes", "nothing was created"] {
        assert!(done.stderr.contains(part), "{part}: {done:?}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a request was sent to the black hole: {done:?}"
    );
}

/// `inspect`, `break` and `bench` are bounded as a whole by `--timeout`:
/// on an endpoint that never answers, each ends by then with 69, saying
/// what timed out and how to give it longer; the default is in the help.
#[test]
fn inspect_break_and_bench_end_at_their_timeout() {
    let t = Target::http("black-hole-timeout", &black_hole(), "bucket");
    let url = t.url("lease");
    for args in [
        vec!["inspect", "--timeout", "1.5s", url.as_str()],
        vec!["break", "--holder", "h", "--timeout=1.5", url.as_str()],
        vec!["bench", "-q", "--timeout", "1.5s", url.as_str()],
    ] {
        let started = Instant::now();
        let done = t.run(&args);
        let took = started.elapsed();
        assert_eq!(done.code, Some(STORE), "{args:?}: {done:?}");
        assert!(took >= Duration::from_millis(1400), "{args:?}: {took:?}");
        assert!(
            took < Duration::from_secs(5),
            "{args:?} took {took:?}: {done:?}"
        );
        assert!(
            done.stderr.contains("timed out after 1.5 s"),
            "{args:?}: {done:?}"
        );
        assert!(done.stderr.contains("--timeout"), "{args:?}: {done:?}");
    }
    for (cmd, default) in [("inspect", "30s"), ("break", "30s"), ("bench", "10m")] {
        let help = t.run([cmd, "--help"]);
        assert!(
            help.stdout.contains("--timeout DURATION")
                && help.stdout.contains(&format!("default {default}")),
            "{cmd}: {help:?}"
        );
    }
}

/// The bound covers opening the store too: a `credential_process` that
/// never answers does not keep `inspect` past its `--timeout`.
#[test]
fn the_timeout_covers_a_hanging_credentials_source() {
    let t = Target::http("hanging-credentials", &black_hole(), "bucket");
    let config = t.path("config");
    std::fs::write(&config, "[default]\ncredential_process = sleep 60\n").unwrap();
    let t = t
        .with_env("AWS_ACCESS_KEY_ID", None)
        .with_env("AWS_SECRET_ACCESS_KEY", None)
        .with_env("AWS_CONFIG_FILE", Some(&config.display().to_string()));
    let url = t.url("lease");
    let started = Instant::now();
    let done = t.run(["inspect", "--timeout", "2s", url.as_str()]);
    let took = started.elapsed();
    assert_eq!(done.code, Some(STORE), "{done:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}: {done:?}");
    assert!(done.stderr.contains("timed out after 2.0 s"), "{done:?}");
}
