//! Throttling and a service's write interval, against a scripted loopback
//! server: which answers are throttled and what `Retry-After` they carry,
//! and how a store with a write interval spaces its own writes of a key.
#![cfg(http)]

mod common;

use bucket_lease_core::store::{Delivery, PutMode, PutOptions, Store, StoreErrorKind};
use common::canned::{Canned, Reply};
use std::time::{Duration, Instant};

use common::canned::store_builder as builder;

fn create() -> PutOptions {
    PutOptions::new(PutMode::Create).with_deadline(Some(Instant::now() + Duration::from_secs(10)))
}

#[test]
fn a_429_and_s3s_slow_down_are_throttled_answers_with_their_retry_after() {
    let server = Canned::start(vec![
        Reply::error(429, "TooManyRequests", "one write a second", "R1").header("Retry-After", "2"),
        Reply::error(503, "SlowDown", "Please reduce your request rate.", "R2"),
        Reply::error(503, "ServiceUnavailable", "busy", "R3").header("Retry-After", "5"),
        Reply::status(429),
    ]);
    let store = builder(&server).build().unwrap();
    let e = store.put("k1", b"x", &create()).unwrap_err();
    assert!(e.is_throttled(), "{e}");
    assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
    assert_eq!(
        (e.kind(), e.delivery()),
        (StoreErrorKind::Transport, Delivery::Answered)
    );
    assert!(e.may_have_landed() && !e.is_refusal(), "settled by reading");
    assert!(e.to_string().contains("retry after 2s"), "{e}");
    assert!(e.to_string().contains("throttling"), "{e}");
    let slow = store.put("k2", b"x", &create()).unwrap_err();
    assert!(
        slow.is_throttled() && slow.retry_after().is_none(),
        "{slow}"
    );
    let busy = store.put("k3", b"x", &create()).unwrap_err();
    assert!(!busy.is_throttled(), "a 503 of another code: {busy}");
    let bare = store.put("k4", b"x", &create()).unwrap_err();
    assert!(bare.is_throttled(), "{bare}");
}

#[test]
fn a_store_with_a_write_interval_spaces_its_writes_of_a_key() {
    let server = Canned::answering(|_| Reply::status(200).header("ETag", "\"v\""));
    let store = builder(&server)
        .write_interval(Duration::from_millis(400))
        .build()
        .unwrap();
    assert_eq!(store.write_interval(), Some(Duration::from_millis(400)));
    let overwrite = || {
        PutOptions::new(PutMode::Overwrite)
            .with_deadline(Some(Instant::now() + Duration::from_secs(10)))
    };
    for _ in 0..3 {
        store.put("a", b"x", &overwrite()).unwrap();
    }
    store.put("b", b"x", &overwrite()).unwrap();
    let seen = server.seen();
    let at = |i: usize| seen[i].at;
    // Each write of `a` went at least an interval after the answer to the
    // one before; `b` did not wait for `a`.
    for i in 1..3 {
        assert!(
            at(i) - at(i - 1) >= Duration::from_millis(400),
            "{:?}",
            at(i) - at(i - 1)
        );
    }
    assert!(at(3) - at(2) < Duration::from_millis(400));
    // Reads are not spaced.
    store.get("a", None).ok();
    assert!(server.seen()[4].at - at(3) < Duration::from_millis(400));
}

#[test]
fn a_write_whose_turn_comes_after_its_deadline_is_not_sent() {
    let server = Canned::answering(|_| Reply::status(200).header("ETag", "\"v\""));
    let store = builder(&server)
        .write_interval(Duration::from_secs(5))
        .build()
        .unwrap();
    let soon = || {
        PutOptions::new(PutMode::Overwrite)
            .with_deadline(Some(Instant::now() + Duration::from_secs(1)))
    };
    store.put("a", b"x", &soon()).unwrap();
    let started = Instant::now();
    let e = store.put("a", b"x", &soon()).unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(500), "no wait");
    assert_eq!(e.delivery(), Delivery::NotSent, "{e}");
    assert!(e.to_string().contains("one write of a key every 5s"), "{e}");
    assert_eq!(server.seen().len(), 1, "nothing more was sent");
}

#[test]
fn a_retry_after_longer_than_the_interval_is_waited_before_the_next_write() {
    let server = Canned::start(vec![
        Reply::error(429, "TooManyRequests", "slow down", "R1").header("Retry-After", "1"),
        Reply::status(200).header("ETag", "\"v\""),
    ]);
    let store = builder(&server)
        .write_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    store.put("a", b"x", &create()).unwrap_err();
    store.put("a", b"x", &create()).unwrap();
    let seen = server.seen();
    assert!(seen[1].at - seen[0].at >= Duration::from_secs(1));
}
