//! Hostile input, generated: `LEASE` bodies another process or server
//! controls (not JSON, wrong types, missing or extra fields, TTLs of 0 and
//! beyond 2^63, stamps far in the past or future or in odd formats, epochs
//! at `u64::MAX`, control characters, bodies over the read cap). For each,
//! the parser, `inspect`, `break_lease` and `try_acquire` have a defined
//! outcome — an error that says what was wrong, or the reference's rule
//! (an unreadable record is stale) — and never panic, never remove the
//! record, and never give a new holder an epoch that is not greater than
//! the one it replaced.

use bucket_lease_core::inspect::{break_lease, inspect};
use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::record::{
    check_holder_name, LeaseRecord, MAX_HOLDER_NAME_BYTES, MAX_SANE_TTL_S,
};
use bucket_lease_core::{clock::TestClock, Contender, LeaseError, LeaseOptions};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const KEY: &str = "db/LEASE";

/// A wall clock somewhere between 1970 and 2400.
fn wall() -> impl Strategy<Value = SystemTime> {
    (0u64..13_000_000_000).prop_map(|s| UNIX_EPOCH + Duration::from_secs(s))
}

/// A JSON value of a type a field should not have, or of the right type
/// with an extreme value.
fn odd_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,40}".prop_map(Value::from),
        Just(json!([1, 2, 3])),
        Just(json!({"nested": {"deeper": []}})),
    ]
}

/// A stamp: RFC 3339 far in the past or future, or text that is not one.
fn stamp() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0i64..4_000_000_000_000).prop_map(|s| {
            let at = time::OffsetDateTime::from_unix_timestamp(s.min(253_402_300_799))
                .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
            Value::from(
                at.format(&time::format_description::well_known::Rfc3339)
                    .unwrap_or_default(),
            )
        }),
        Just(Value::from("9999-12-31T23:59:59Z")),
        Just(Value::from("0000-01-01T00:00:00Z")),
        Just(Value::from("2026-11-30T25:61:61Z")),
        Just(Value::from("2026-11-30 12:00:00")),
        Just(Value::from("-1")),
        odd_value(),
    ]
}

fn ttl() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(0)),
        Just(json!(1)),
        Just(json!(MAX_SANE_TTL_S)),
        Just(json!(MAX_SANE_TTL_S + 1)),
        Just(json!(1u64 << 63)),
        Just(json!(u64::MAX)),
        Just(json!(-1)),
        any::<u64>().prop_map(Value::from),
        odd_value(),
    ]
}

fn epoch() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(0)),
        Just(json!(u64::MAX)),
        Just(json!(u64::MAX - 1)),
        any::<u64>().prop_map(Value::from),
        odd_value(),
    ]
}

fn instance_id() -> impl Strategy<Value = Value> {
    prop_oneof![
        "[0-9a-f]{32}".prop_map(Value::from),
        Just(Value::from("evil\u{1b}[2J\u{7}\r\u{202e}")),
        ".{0,64}".prop_map(Value::from),
        Just(Value::from("x".repeat(10_000))),
        odd_value(),
    ]
}

/// A `holder_name`: a fair one, or one a hostile writer chose (escapes,
/// reordering marks, too long, not a string).
fn holder_name() -> impl Strategy<Value = Value> {
    prop_oneof![
        "[a-z0-9.-]{1,20}:[0-9]{1,7}".prop_map(Value::from),
        Just(Value::from("evil\u{1b}]0;owned\u{7}\r\u{202e}")),
        Just(Value::from("\u{200b}")),
        Just(Value::from("")),
        ".{0,64}".prop_map(Value::from),
        Just(Value::from("n".repeat(MAX_HOLDER_NAME_BYTES + 1))),
        odd_value(),
    ]
}

/// A `LEASE` body: bytes that are no JSON at all, or a JSON object whose
/// fields may be missing, mistyped, extreme or extra.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let field = |v: BoxedStrategy<Value>| proptest::option::weighted(0.85, v);
    let object = (
        field(instance_id().boxed()),
        field(stamp().boxed()),
        field(stamp().boxed()),
        field(ttl().boxed()),
        field(epoch().boxed()),
        field(stamp().boxed()),
        proptest::option::of(odd_value()),
        proptest::option::of(holder_name()),
    )
        .prop_map(
            |(id, acquired, renewed, ttl, epoch, released, extra, name)| {
                let mut map = serde_json::Map::new();
                let mut put = |name: &str, v: Option<Value>| {
                    if let Some(v) = v {
                        map.insert(name.to_string(), v);
                    }
                };
                put("instance_id", id);
                put("acquired_at", acquired);
                put("renewed_at", renewed);
                put("ttl_s", ttl);
                put("epoch", epoch);
                if released.as_ref().is_some_and(|_| extra.is_some()) {
                    put("released_at", released);
                }
                put("host", extra);
                put("holder_name", name);
                serde_json::to_vec(&Value::Object(map)).unwrap()
            },
        );
    prop_oneof![
        4 => object,
        1 => proptest::collection::vec(any::<u8>(), 0..256),
        1 => Just(Vec::new()),
        1 => Just(b"{\"instance_id\":".to_vec()),
        1 => Just(vec![b'['; 4096]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn judging_any_record_never_panics(body in body(), now in wall()) {
        if let Some(rec) = LeaseRecord::parse(&body) {
            let _ = (rec.is_fresh(now), rec.is_suspect(now), rec.renewed());
            let _ = (rec.next_epoch(), rec.suspect_watch_s(30), rec.released(now).to_bytes());
            prop_assert!(!(rec.is_released() && rec.is_fresh(now)));
            // A name is read only when it passes the check, and the field
            // never decides whether the rest is a record.
            if let Some(name) = &rec.holder_name {
                prop_assert!(check_holder_name(name).is_ok(), "{:?}", name);
            }
        }
        if let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(&body) {
            let named = LeaseRecord::parse(&body).is_some();
            map.remove("holder_name");
            let unnamed = LeaseRecord::parse(&serde_json::to_vec(&Value::Object(map)).unwrap());
            prop_assert_eq!(named, unnamed.is_some(), "holder_name changed readability");
        }
    }

    #[test]
    fn a_held_error_names_the_holder_without_a_control_character(
        body in body(),
        now in wall(),
    ) {
        let store = Arc::new(MemoryStore::new());
        store.insert(KEY, &body);
        let clock = TestClock::starting_at(now);
        let options = LeaseOptions::new(30).clock(Arc::new(clock.clone()));
        if let Err(LeaseError::Held { holder_name: Some(name), .. }) =
            Contender::new(store.clone(), "db", options).try_acquire()
        {
            prop_assert!(check_holder_name(&name).is_ok(), "{:?}", name);
        }
    }

    #[test]
    fn inspect_and_break_have_an_outcome_for_any_record(
        body in body(),
        now in wall(),
        cap in proptest::option::of(0usize..300),
    ) {
        let store = MemoryStore::new();
        store.set_read_cap(cap);
        store.insert(KEY, &body);
        let clock = TestClock::starting_at(now);
        let seen = inspect(&store, "db", &clock).unwrap().expect("the record is there");
        let _ = (seen.expires_in(), seen.expires_in_s(), seen.age_s(), seen.holder());
        if let Some(name) = seen.holder_name() {
            prop_assert!(check_holder_name(name).is_ok(), "{:?}", name);
        }
        let holder = seen.holder().unwrap_or("nobody").to_string();
        match break_lease(&store, "db", &holder, &clock) {
            Ok(broken) => prop_assert!(broken.record.epoch > broken.replaced.epoch),
            Err(e) => {
                let _ = e.to_string();
            }
        }
        prop_assert!(store.peek(KEY).is_some(), "the record was removed");
    }

    #[test]
    fn an_acquire_over_any_record_never_panics_deletes_or_lowers_the_epoch(
        body in body(),
        now in wall(),
        cap in proptest::option::of(0usize..300),
        ttl_s in 1u64..=MAX_SANE_TTL_S,
    ) {
        let store = Arc::new(MemoryStore::new());
        store.set_read_cap(cap);
        store.insert(KEY, &body);
        let readable = cap.is_none_or(|c| body.len() <= c);
        let before = LeaseRecord::parse(&body).filter(|_| readable);
        let clock = TestClock::starting_at(now);
        let options = LeaseOptions::new(ttl_s).clock(Arc::new(clock.clone()));
        let result = Contender::new(store.clone(), "db", options).try_acquire();
        prop_assert!(store.peek(KEY).is_some(), "the record was removed");
        match (&result, &before) {
            (Ok(lease), Some(rec)) => {
                prop_assert!(!rec.is_fresh(now), "a fresh record was taken over");
                prop_assert_eq!(lease.epoch(), rec.epoch + 1);
            }
            (Ok(lease), None) => prop_assert_eq!(lease.epoch(), 1),
            (Err(LeaseError::Held { .. }), Some(rec)) => prop_assert!(rec.is_fresh(now)),
            (Err(LeaseError::EpochExhausted { .. }), Some(rec)) => {
                prop_assert_eq!(rec.epoch, u64::MAX)
            }
            (Err(e), _) => prop_assert!(false, "unexpected outcome {e}"),
        }
        if let Ok(lease) = result {
            prop_assert!(lease.may_write());
            lease.release().unwrap();
        }
    }
}
