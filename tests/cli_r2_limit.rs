//! Cloudflare R2's limit on writes of one key (issue 30): "Maximum
//! concurrent writes to the same object name (key): 1 per second", beyond
//! which R2 answers `429 TooManyRequests`. Every command of `bucket-lease`,
//! and the library's fenced writes, must work under it: on an `r2://` URL
//! (whose profile spaces the writes of a key), and on an `s3://` one with
//! `BUCKET_LEASE_WRITE_INTERVAL=1s`.
//!
//! The limit is modelled by the fault-injecting proxy of `tests/s3_proxy`
//! in front of moto ([`FaultProxy::limit_writes`], 1 s), and each test
//! runs under both readings of the rule: only accepted writes start the
//! window ([`WriteLimit::AcceptedWrites`]), or every write that reaches the
//! key does, refused ones too ([`WriteLimit::EveryWrite`]). Start the
//! servers with `scripts/test-servers.sh start` and source
//! `.ci/tmp/servers.env`; without them each test prints a note and passes,
//! unless `BUCKET_LEASE_REQUIRE_SERVERS=1`.

mod cli_common;
mod s3_proxy;

use bucket_lease::fence::FencedReader;
use bucket_lease::KeptLease;
use bucket_lease::{Contender, FencedWriter, Keeper, KeeperOptions, LeaseOptions, Released};
use cli_common::{Done, Target, CONFIG, USAGE};
use s3_proxy::{Answer, FaultProxy, WriteLimit};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// R2's documented limit: one write of a key per second.
const WINDOW: Duration = Duration::from_secs(1);

/// moto behind a proxy that limits writes of each key under `mode`; the
/// target's URLs are `r2://` ones on the proxy. `None` (with a note) when
/// the servers are not running.
fn r2_limited(test: &str, mode: WriteLimit) -> Option<(Target, FaultProxy)> {
    let (t, proxy) = s3_limited(test, mode)?;
    Some((t.on_r2(), proxy))
}

/// As [`r2_limited`], with `s3://` URLs (the S3 profile: no spacing of
/// its own unless `BUCKET_LEASE_WRITE_INTERVAL` asks for it).
fn s3_limited(test: &str, mode: WriteLimit) -> Option<(Target, FaultProxy)> {
    let moto = Target::moto(test)?;
    let proxy = FaultProxy::start(moto.endpoint().expect("moto's endpoint"));
    proxy.limit_writes(WINDOW, mode);
    Some((moto.through(&proxy.endpoint()), proxy))
}

/// Each scenario `fn NAME(mode: WriteLimit)` as a module `NAME` of two
/// tests, `accepted_writes` and `every_write`.
macro_rules! under_both_limits {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn accepted_writes() {
                super::$name(super::WriteLimit::AcceptedWrites);
            }
            #[test]
            fn every_write() {
                super::$name(super::WriteLimit::EveryWrite);
            }
        }
    )*};
}

under_both_limits!(
    run_true_twice_in_a_row,
    runs_twice_in_a_row_with_renewals,
    a_command_shorter_than_a_renewal_then_another_run,
    renewing_runs_keep_the_lease,
    inspect_shows_free_and_held,
    break_stops_the_running_holder,
    break_a_stale_holder,
    bench_runs_and_leaves_the_lease_free,
    fenced_pointer_writes_twice_in_a_second,
    the_fenced_job_example_twice_in_a_row,
    a_ttl_whose_renewals_outpace_the_limit_is_refused,
    s3_with_a_write_interval_works_as_r2,
    s3_without_a_write_interval_leaves_no_live_record,
    a_throttled_create_is_retried_not_held,
    a_slow_down_create_is_retried_not_held,
    acquire_latency_under_the_limit,
);

/// The shared scenarios of `tests/cli_common` that apply on a target whose
/// TTLs are at least 3 s (renewals at most once a second), run through the
/// limiting proxy on `r2://`.
macro_rules! shared_scenarios {
    ($($name:ident),* $(,)?) => {$(
        fn $name(mode: WriteLimit) {
            let Some((t, proxy)) = r2_limited(stringify!($name), mode) else {
                return;
            };
            cli_common::$name(&t);
            eprintln!("{}: 429s per key: {:?}", stringify!($name), proxy.throttled_per_key());
        }
    )*};
}

// Not `second_run_is_held_then_waits` nor
// `killed_holder_is_taken_over_after_the_ttl`: they run with a TTL of 2 s,
// renewals every 667 ms, which R2's limit cannot take (see
// `a_ttl_whose_renewals_outpace_the_limit_is_refused`).
shared_scenarios!(
    runs_twice_in_a_row_with_renewals,
    a_command_shorter_than_a_renewal_then_another_run,
    inspect_shows_free_and_held,
    break_a_stale_holder,
    bench_runs_and_leaves_the_lease_free,
);

/// `break` of a running holder on a TTL of 6 s: at R2's shortest TTL (3 s)
/// a live holder takes every turn the service gives its key, and a break
/// may never get in (see the README).
fn break_stops_the_running_holder(mode: WriteLimit) {
    let Some((t, proxy)) = r2_limited("break_stops_the_running_holder", mode) else {
        return;
    };
    cli_common::break_stops_the_running_holder_at(&t, 6);
    eprintln!("429s per key: {:?}", proxy.throttled_per_key());
}

/// `done` exited 0, said nothing of an error (a 429 retried is no error)
/// and never took a throttle for a holder.
fn assert_clean(done: &Done, context: &str) {
    assert_eq!(done.code, Some(0), "{context}: {done:?}");
    for word in ["error", "held by"] {
        assert!(!done.stderr.contains(word), "{context}: {word:?}: {done:?}");
    }
}

/// The first example: `run r2://… -- true` twice in a row. Both
/// exit 0, nothing said of an error; the lease is free afterwards.
fn run_true_twice_in_a_row(mode: WriteLimit) {
    let Some((t, proxy)) = r2_limited("true-twice", mode) else {
        return;
    };
    let url = t.url("nightly");
    for round in 1..=2 {
        let done = t.run(["run", url.as_str(), "--", "true"]);
        assert_clean(&done, &format!("run {round}"));
        let json = t.inspect(&url);
        assert_eq!(json["state"], "free", "run {round}: {json}");
        assert_eq!(json["released"], true, "run {round}: {json}");
    }
    eprintln!("429s per key: {:?}", proxy.throttled_per_key());
}

/// `run --ttl 3 -- sleep 4` (renewals every second, as often as R2 takes
/// them) and `run --ttl 6 -- sleep 7` keep the lease to the end: exit 0,
/// renewals landed, the lease free after each.
fn renewing_runs_keep_the_lease(mode: WriteLimit) {
    let Some((t, proxy)) = r2_limited("renewing", mode) else {
        return;
    };
    for (ttl, sleep) in [("3", "4"), ("6", "7")] {
        let url = t.url(&format!("ttl-{ttl}"));
        let key = lease_path(&t, &url);
        let done = t.run(["run", "--ttl", ttl, url.as_str(), "--", "sleep", sleep]);
        assert_clean(&done, &format!("--ttl {ttl}"));
        let json = t.inspect(&url);
        assert_eq!(json["state"], "free", "--ttl {ttl}: {json}");
        // The create, at least one renewal, the release: at least three
        // writes of the record landed (a run whose renewals all failed
        // would have lost the lease and exited 76).
        let landed = accepted_writes(&proxy, &key);
        assert!(landed >= 3, "--ttl {ttl}: {landed} writes landed: {done:?}");
        eprintln!(
            "--ttl {ttl}: {landed} writes landed, {} answered 429",
            proxy.throttled(&key)
        );
    }
}

/// The decoded path of the `LEASE` object of `url` (`/bucket/prefix/LEASE`)
/// as the proxy logs it.
fn lease_path(t: &Target, url: &str) -> String {
    let (_, prefix) = t.store(url);
    format!("/{}/LEASE", prefix)
}

/// How many writes of `path` exactly the upstream accepted (2xx).
fn accepted_writes(proxy: &FaultProxy, path: &str) -> usize {
    proxy
        .log()
        .iter()
        .filter(|s| {
            s.path.ends_with(path)
                && matches!(s.method.as_str(), "PUT" | "POST" | "DELETE")
                && s.status.is_some_and(|c| (200..300).contains(&c))
        })
        .count()
}

/// The library's fenced writes on the `r2` profile through the limit: a
/// pointer written twice within a second by one holder (the second write
/// comes at once after the first) succeeds both times, and so do immutable
/// parts and the release.
fn fenced_pointer_writes_twice_in_a_second(mode: WriteLimit) {
    let Some((t, proxy)) = r2_limited("pointer-twice", mode) else {
        return;
    };
    let (store, prefix) = t.store(&t.url("job"));
    let mut contender = Contender::new(store.clone(), &prefix, LeaseOptions::new(30));
    let lease = contender.try_acquire().expect("the lease is taken");
    let keeper = Keeper::spawn(lease, KeeperOptions::new()).expect("the keeper starts");
    let writer = FencedWriter::new(keeper.lease().clone());
    let latest = format!("{prefix}/LATEST");
    let started = Instant::now();
    writer
        .put_pointer(&latest, b"parts/1-0")
        .expect("the first pointer write");
    writer
        .put_pointer(&latest, b"parts/1-1")
        .expect("the second pointer write, at once after the first");
    eprintln!(
        "two pointer writes in {:?}; 429s per key: {:?}",
        started.elapsed(),
        proxy.throttled_per_key()
    );
    let pointer = FencedReader::new(store)
        .trusting(keeper.lease().epoch())
        .get(&latest)
        .expect("the pointer reads back");
    assert_eq!(pointer.object.body, b"parts/1-1");
    assert!(keeper.may_write(), "the lease is still held");
    assert_eq!(keeper.stop().expect("released"), Released::Freed);
}

/// `examples/fenced_job.rs` (the README's library example), step for step,
/// twice in a row on one `r2://` prefix through the limit: each run takes
/// the lease, writes three parts named by its epoch, moves `LATEST`, reads
/// it back trusting its epoch and releases; the second is epoch 2.
fn the_fenced_job_example_twice_in_a_row(mode: WriteLimit) {
    let Some((t, proxy)) = r2_limited("fenced-job", mode) else {
        return;
    };
    let (store, prefix) = t.store(&t.url("nightly"));
    for round in 1..=2u64 {
        let mut contender = Contender::new(store.clone(), &prefix, LeaseOptions::new(30));
        let lease = contender
            .try_acquire()
            .unwrap_or_else(|e| panic!("run {round}: acquire: {e}"));
        let keeper = Keeper::spawn(lease, KeeperOptions::new()).expect("the keeper starts");
        let epoch = keeper.lease().epoch();
        assert_eq!(epoch, round);
        let writer = FencedWriter::new(keeper.lease().clone());
        for part in 0..3 {
            writer
                .put_new(&format!("{prefix}/parts/{epoch}-{part}"), b"...")
                .unwrap_or_else(|e| panic!("run {round}, part {part}: {e}"));
        }
        let latest = format!("{prefix}/LATEST");
        writer
            .put_pointer(&latest, format!("parts/{epoch}-2").as_bytes())
            .unwrap_or_else(|e| panic!("run {round}, LATEST: {e}"));
        let pointer = FencedReader::new(store.clone())
            .trusting(epoch)
            .get(&latest)
            .unwrap_or_else(|e| panic!("run {round}, reading LATEST: {e}"));
        assert_eq!(pointer.epoch, epoch);
        assert!(keeper.may_write(), "run {round}: the lease is still held");
        let released = keeper
            .stop()
            .unwrap_or_else(|e| panic!("run {round}: release: {e}"));
        assert_eq!(released, Released::Freed, "run {round}");
    }
    eprintln!("429s per key: {:?}", proxy.throttled_per_key());
}

/// Whether `text` holds the number `n` on its own (not a digit of a longer
/// number, such as 13 or 2.3).
fn names_number(text: &str, n: f64) -> bool {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|token| token.trim_matches('.').parse::<f64>().ok())
        .any(|value| value == n)
}

/// A TTL whose renewals (every TTL/3) would come faster than R2 takes
/// writes of the record: `run --ttl 2 r2://…` is refused before anything
/// is written, as a bad setting (exit 64 or 78), naming 3 (seconds), the
/// smallest TTL that works.
fn a_ttl_whose_renewals_outpace_the_limit_is_refused(mode: WriteLimit) {
    let Some((t, proxy)) = r2_limited("short-ttl", mode) else {
        return;
    };
    let url = t.url("nightly");
    let done = t.run(["run", "--ttl", "2", url.as_str(), "--", "true"]);
    assert!(
        done.code == Some(USAGE) || done.code == Some(CONFIG),
        "exit {:?}, not a usage or configuration error: {done:?}",
        done.code
    );
    // Neither the URL nor the prefix (whose pid and hex digits may hold a
    // 3) counts.
    let (_, prefix) = t.store(&url);
    let said = done.stderr.replace(&url, "URL").replace(&prefix, "PREFIX");
    assert!(
        names_number(&said, 3.0),
        "the smallest TTL that works (3) is not named: {done:?}"
    );
    assert_eq!(
        proxy.count("PUT", "/LEASE"),
        0,
        "refused before writing: {:?}",
        proxy.log()
    );
}

/// The S3 profile with `BUCKET_LEASE_WRITE_INTERVAL=1s` through the limit
/// behaves as `r2://`: `run -- true` twice, and a renewing run.
fn s3_with_a_write_interval_works_as_r2(mode: WriteLimit) {
    let Some((t, proxy)) = s3_limited("s3-interval", mode) else {
        return;
    };
    let t = t.with_env("BUCKET_LEASE_WRITE_INTERVAL", Some("1s"));
    let url = t.url("nightly");
    for round in 1..=2 {
        let done = t.run(["run", url.as_str(), "--", "true"]);
        assert_clean(&done, &format!("run {round}"));
        assert_eq!(t.inspect(&url)["state"], "free", "run {round}");
    }
    let done = t.run(["run", "--ttl", "3", url.as_str(), "--", "sleep", "4"]);
    assert_clean(&done, "--ttl 3 -- sleep 4");
    assert_eq!(t.inspect(&url)["state"], "free");
    eprintln!("429s per key: {:?}", proxy.throttled_per_key());
}

/// The S3 profile with no write interval, through the limit: `run -- true`
/// may fail (a throttled write it was not told to space), but its error
/// names the setting that fixes it, and it never leaves a live record that
/// blocks the prefix (the hand-back of a failed acquire is retried after
/// the window): a run right after is never refused as held, and the record
/// reads free, unless the first run's error says the record is left and
/// until when.
fn s3_without_a_write_interval_leaves_no_live_record(mode: WriteLimit) {
    let Some((t, proxy)) = s3_limited("s3-no-interval", mode) else {
        return;
    };
    let url = t.url("nightly");
    let first = t.run(["run", url.as_str(), "--", "true"]);
    let state = t.inspect(&url)["state"].clone();
    let second = t.run(["run", url.as_str(), "--", "true"]);
    eprintln!(
        "first: {first:?}\nsecond: {second:?}\n429s per key: {:?}",
        proxy.throttled_per_key()
    );
    for done in [&first, &second] {
        if done.code != Some(0) {
            assert!(
                matches!(done.code, Some(69 | 75 | 76 | 78)),
                "an undocumented exit: {done:?}"
            );
            assert!(
                done.stderr.contains("BUCKET_LEASE_WRITE_INTERVAL"),
                "a throttled failure names the setting: {done:?}"
            );
        }
    }
    let said_left = first.stderr.contains("left") && first.stderr.contains("until");
    assert!(
        said_left || (state == "free" && !second.stderr.contains("held by")),
        "the first run left a live record without saying so ({state}):\nfirst: {first:?}\n\
         second: {second:?}"
    );
}

/// A `429 TooManyRequests` (`Retry-After: 1`) to the first create of the
/// record is a throttle, not a holder: `run` retries after the pause the
/// service asked for and gets the lease (exit 0, no "held by").
fn a_throttled_create_is_retried_not_held(mode: WriteLimit) {
    let Some((t, proxy)) = r2_limited("throttled-create", mode) else {
        return;
    };
    let answer = Answer::too_many_requests().header("retry-after", "1");
    retried_not_held(&t, &proxy, answer, Some(Duration::from_secs(1)));
}

/// As [`a_throttled_create_is_retried_not_held`], with `503 SlowDown`.
fn a_slow_down_create_is_retried_not_held(mode: WriteLimit) {
    let Some((t, proxy)) = r2_limited("slow-down-create", mode) else {
        return;
    };
    let answer = Answer::error(503, "SlowDown", "Please reduce your request rate.", &[]);
    retried_not_held(&t, &proxy, answer, None);
}

/// The first `PUT` of the record gets `answer`, not forwarded: `run -- true`
/// exits 0, frees the lease and never says "held"; with `retry_after`, the
/// next write of the record came no sooner than that after the refusal.
fn retried_not_held(t: &Target, proxy: &FaultProxy, answer: Answer, retry_after: Option<Duration>) {
    let url = t.url("nightly");
    let key = lease_path(t, &url);
    proxy.inject("PUT", &key, 1, answer);
    let done = t.run(["run", "-v", url.as_str(), "--", "true"]);
    assert_eq!(done.code, Some(0), "{done:?}");
    assert!(!done.stderr.contains("held by"), "{done:?}");
    assert_eq!(t.inspect(&url)["state"], "free");
    let writes: Vec<_> = proxy
        .log()
        .into_iter()
        .filter(|s| s.method == "PUT" && s.path.ends_with(&key))
        .collect();
    assert!(
        writes.len() >= 2 && matches!(writes[0].outcome, s3_proxy::Outcome::Injected(_)),
        "the refused create, then more: {writes:?}"
    );
    if let Some(pause) = retry_after {
        // A lower bound only (a loaded machine makes it later), with 100 ms
        // for the two clocks' reading.
        let waited = writes[1].arrived - writes[0].arrived;
        assert!(
            waited + Duration::from_millis(100) >= pause,
            "the next write came {waited:?} after a 429 with Retry-After {pause:?}: {done:?}"
        );
    }
}

/// Not an assertion: how long `run` takes from its start to its command's
/// start under the limit, over 10 runs in a row on one lease (each after
/// the previous one released it); the median is printed.
fn acquire_latency_under_the_limit(mode: WriteLimit) {
    let Some((t, proxy)) = r2_limited("latency", mode) else {
        return;
    };
    let url = t.url("nightly");
    // In a row, each run's acquire meets the window of the release before
    // it; spaced by the window, it does not.
    for (how, gap) in [
        ("in a row", Duration::ZERO),
        ("a window apart", WINDOW + Duration::from_millis(100)),
    ] {
        let mut latencies = Vec::new();
        for round in 1..=10 {
            std::thread::sleep(gap);
            let spawned = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64();
            let done = t.run(["run", url.as_str(), "--", "date", "+%s.%N"]);
            assert_eq!(done.code, Some(0), "run {round}: {done:?}");
            let started: f64 = done
                .stdout
                .trim()
                .parse()
                .expect("the command's start time");
            latencies.push(started - spawned);
        }
        latencies.sort_by(f64::total_cmp);
        let p50 = (latencies[4] + latencies[5]) / 2.0;
        eprintln!(
            "acquire latency under {mode:?}, 10 runs {how}: p50 {:.0} ms, min {:.0} ms, max \
             {:.0} ms; {} writes answered 429 so far",
            p50 * 1000.0,
            latencies[0] * 1000.0,
            latencies[9] * 1000.0,
            proxy.throttled("")
        );
    }
}

/// The proxy's model itself (it passes whatever the library does): plain
/// unsigned HTTP `PUT`s of one key through the limit, one connection each
/// (moto takes an unsigned write of a new key, and refuses one of an
/// existing key with 403). A write
/// right after an accepted one is refused `429 TooManyRequests` in both
/// readings (with `Retry-After` when set); a write the upstream refused
/// (a condition that did not hold) starts a window only under
/// [`WriteLimit::EveryWrite`]; an UploadPart is not a write of the key.
#[test]
fn the_proxy_models_both_readings_of_the_limit() {
    for mode in [WriteLimit::AcceptedWrites, WriteLimit::EveryWrite] {
        let Some((t, proxy)) = s3_limited("model", mode) else {
            return;
        };
        proxy.retry_after(Some(2));
        let (_, prefix) = t.store(&t.url("k"));
        let path = format!("/{}/{prefix}/object", test_bucket());
        let put = |extra: &str| raw_put(&proxy, &path, extra);
        assert_eq!(put("").0, 200, "{mode:?}: the first write");
        let (status, answer) = put("");
        assert_eq!(status, 429, "{mode:?}: a write right after: {answer}");
        assert!(answer.contains("<Code>TooManyRequests</Code>"), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("retry-after: 2"),
            "{answer}"
        );
        assert_eq!(proxy.throttled(&path), 1, "{mode:?}");
        let part = format!("{path}?partNumber=1&uploadId=none");
        assert_ne!(raw_put(&proxy, &part, "").0, 429, "{mode:?}: UploadPart");
        std::thread::sleep(WINDOW + Duration::from_millis(200));
        // moto refuses an unsigned create-only write of an existing key
        // with 403 (a signed one with 412): either way, not accepted.
        let (refused, answer) = put("If-None-Match: *\r\n");
        assert!(
            (400..500).contains(&refused) && refused != 429,
            "{mode:?}: a create-only write of an existing key: {answer}"
        );
        // Forwarded, or refused by the limit (moto refuses an unsigned
        // overwrite 403: what counts is that it was forwarded).
        let after_refusal = put("").0;
        match mode {
            WriteLimit::AcceptedWrites => assert_ne!(after_refusal, 429, "{mode:?}"),
            _ => assert_eq!(after_refusal, 429, "{mode:?}"),
        }
    }
}

fn test_bucket() -> String {
    std::env::var("BUCKET_LEASE_TEST_BUCKET").unwrap_or_else(|_| "bucket-lease-test".to_string())
}

/// A `PUT` of `target` (path and query) through `proxy` with the header
/// lines `extra`, unsigned (moto does not check signatures): the status
/// and the answer's head and body.
fn raw_put(proxy: &FaultProxy, target: &str, extra: &str) -> (u16, String) {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let request = format!(
        "PUT {target} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 2\r\n{extra}\r\nhi",
        proxy.port()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let (mut answer, mut length) = (String::new(), 0);
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("an answer");
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        answer.push_str(&line);
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).expect("the body");
    answer.push_str(&String::from_utf8_lossy(&body));
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, answer)
}
