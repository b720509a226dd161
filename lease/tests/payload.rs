//! The record's payload (issue 34): a small printable value the holder
//! writes at acquire, keeps through every renewal and the release, and a
//! follower reads; the async reference still reads the record; a hostile
//! payload in the bucket never makes a record unreadable. On the in-memory
//! store with a test clock.

use bucket_lease_core::inspect::inspect;
use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::record::{check_payload, InvalidPayload, LeaseRecord, MAX_PAYLOAD_BYTES};
use bucket_lease_core::{
    clock::TestClock, watch::Watcher, Contender, LeaseOptions, Released, Wait,
};
use std::sync::Arc;
use std::time::Duration;

const KEY: &str = "db/LEASE";
const TTL_S: u64 = 30;

struct World {
    store: Arc<MemoryStore>,
    clock: TestClock,
}

impl World {
    fn new() -> Self {
        World {
            store: Arc::new(MemoryStore::new()),
            clock: TestClock::new(),
        }
    }

    fn contender(&self) -> Contender {
        let options = LeaseOptions::new(TTL_S).clock(Arc::new(self.clock.clone()));
        Contender::new(self.store.clone(), "db", options)
    }

    fn body(&self) -> Vec<u8> {
        self.store.peek(KEY).expect("a LEASE object")
    }

    fn record(&self) -> LeaseRecord {
        LeaseRecord::parse(&self.body()).expect("a record")
    }
}

/// The record type of the async reference, as it declares it
/// (`/work/shared/reference/seed-lease.rs`): four required fields and
/// serde's default of ignoring any other.
#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
struct ReferenceRecord {
    instance_id: String,
    acquired_at: String,
    renewed_at: String,
    ttl_s: u64,
}

#[test]
fn the_payload_is_written_at_acquire_and_kept_by_renewals_and_the_release() {
    let w = World::new();
    let address = "10.0.0.7:5432 primary";
    let mut contender = w.contender().with_payload(address).expect("a fair payload");
    assert_eq!(contender.payload(), Some(address));
    let lease = contender.try_acquire().unwrap();
    assert_eq!(lease.payload(), Some(address));
    assert_eq!(w.record().payload.as_deref(), Some(address));
    for _ in 0..3 {
        w.clock.advance(Duration::from_secs(10));
        lease.renew().unwrap();
        assert_eq!(w.record().payload.as_deref(), Some(address), "renewal");
    }
    // A follower reads it with one look at the record.
    let seen = inspect(&*w.store, "db", &w.clock).unwrap().unwrap();
    assert_eq!(seen.payload(), Some(address));
    assert_eq!(
        seen.record.as_ref().unwrap().payload.as_deref(),
        Some(address)
    );
    assert_eq!(lease.release().unwrap(), Released::Freed);
    let released = w.record();
    assert!(released.is_released());
    assert_eq!(
        released.payload.as_deref(),
        Some(address),
        "the release keeps it"
    );
}

#[test]
fn without_a_payload_the_record_has_no_such_field() {
    let w = World::new();
    let lease = w.contender().try_acquire().unwrap();
    assert_eq!(lease.payload(), None);
    let json: serde_json::Value = serde_json::from_slice(&w.body()).unwrap();
    assert!(json.get("payload").is_none(), "{json}");
}

/// What we write with a payload, the reference reads (held and released),
/// and the reference's records, which carry none, read in ours.
#[test]
fn a_record_with_a_payload_stays_readable_both_ways() {
    let w = World::new();
    let payload = "x".repeat(MAX_PAYLOAD_BYTES);
    let lease = w
        .contender()
        .with_payload(payload.clone())
        .unwrap()
        .try_acquire()
        .unwrap();
    let body = w.body();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["payload"], payload.as_str());
    let seen: ReferenceRecord = serde_json::from_slice(&body).expect("the reference reads ours");
    assert_eq!(
        (seen.instance_id.as_str(), seen.ttl_s),
        (lease.instance_id(), TTL_S)
    );
    lease.release().unwrap();
    let seen: ReferenceRecord = serde_json::from_slice(&w.body()).expect("and our released one");
    assert_eq!(seen.ttl_s, 0);
    let reference = br#"{"instance_id":"abc","acquired_at":"2026-01-02T03:04:05Z","renewed_at":"2026-01-02T03:04:15Z","ttl_s":30}"#;
    assert_eq!(LeaseRecord::parse(reference).unwrap().payload, None);
}

#[test]
fn an_invalid_payload_is_refused_naming_the_limit() {
    let w = World::new();
    let long = "é".repeat(MAX_PAYLOAD_BYTES / 2) + "x";
    let e = w.contender().with_payload(long).unwrap_err();
    assert_eq!(
        e,
        InvalidPayload::TooLong {
            bytes: MAX_PAYLOAD_BYTES + 1
        }
    );
    let text = e.to_string();
    assert!(
        text.contains("over the maximum of 1024") && text.contains("in an object under"),
        "names the limit and what to do: {text}"
    );
    for bad in [
        "two\nlines",
        "esc\u{1b}[2J",
        "tab\there",
        "rtl\u{202e}x",
        "nul\0",
    ] {
        let e = w.contender().with_payload(bad).unwrap_err();
        assert!(matches!(e, InvalidPayload::Unprintable { .. }), "{bad:?}");
        let text = e.to_string();
        assert!(
            text.starts_with("invalid payload: ") && text.contains("base64"),
            "{e}"
        );
    }
    assert_eq!(check_payload(""), Ok(()), "an empty payload is a value");
    assert_eq!(check_payload(&"é".repeat(MAX_PAYLOAD_BYTES / 2)), Ok(()));
    assert_eq!(
        check_payload("eyJhZGRyIjoiMTAuMC4wLjciLCJnZW4iOjN9"),
        Ok(())
    );
    assert_eq!(check_payload(r#"{"addr":"10.0.0.7","gen":3}"#), Ok(()));
}

/// A payload a hostile or newer writer put in the bucket (too long, with
/// escapes, not a string) is read as none: the record still parses, is
/// judged as before, and a contender takes it over as it would any other.
#[test]
fn a_hostile_payload_is_read_as_none_and_the_record_still_parses() {
    let long = "y".repeat(MAX_PAYLOAD_BYTES + 1);
    let huge = "z".repeat(60 * 1024);
    for payload in [
        serde_json::json!("a\u{1b}[2Jb"),
        serde_json::json!("rtl\u{202e}x"),
        serde_json::json!(long),
        serde_json::json!(huge),
        serde_json::json!(7),
        serde_json::json!({"nested": [1, 2]}),
        serde_json::json!([1, 2]),
        serde_json::Value::Null,
    ] {
        let w = World::new();
        let body = serde_json::json!({"instance_id": "other", "acquired_at": "x",
            "renewed_at": "1970-01-01T00:00:00Z", "ttl_s": 5, "epoch": 3, "payload": payload});
        w.store.insert(KEY, body.to_string().as_bytes());
        let rec = LeaseRecord::parse(&w.body()).expect("still a record");
        assert_eq!((rec.epoch, rec.payload.as_deref()), (3, None), "{payload}");
        let seen = inspect(&*w.store, "db", &w.clock).unwrap().unwrap();
        assert_eq!(seen.payload(), None);
        let lease = w
            .contender()
            .try_acquire()
            .expect("a stale record is taken");
        assert_eq!(lease.epoch(), 4);
    }
}

/// A follower that watches the lease finds the payload in each change.
#[test]
fn a_watcher_sees_the_payload() {
    let w = World::new();
    let _lease = w
        .contender()
        .with_payload("leader at 10.0.0.7:5432")
        .unwrap()
        .try_acquire()
        .unwrap();
    let mut watcher = Watcher::new(w.store.clone(), "db", Arc::new(w.clock.clone()));
    let change = watcher
        .next_change(&Wait::forever())
        .unwrap()
        .expect("the first change is the state as it is");
    let seen = change.inspection.as_ref().expect("a record");
    assert_eq!(seen.payload(), Some("leader at 10.0.0.7:5432"));
}
