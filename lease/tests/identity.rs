//! Identity is per process start (issue 19): a record is ours only when it
//! carries our instance id *and* our process's nonce. Two processes given
//! one instance id are two holders; a lost answer within one process is
//! still recognised. On the in-memory store with a test clock.

use bucket_lease_core::fence::{
    FencedReader, DIGEST_METADATA, EPOCH_METADATA, HOLDER_METADATA, NONCE_METADATA,
};
use bucket_lease_core::lease::TRANSIENT_WRITE_TRIES;
use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::record::{format_stamp, process_nonce, LeaseRecord};
use bucket_lease_core::{
    clock::Clock, clock::TestClock, error::HolderRelation, store::PutMode, store::PutOptions,
    Contender, FencedWriter, Lease, LeaseError, LeaseOptions, Released, Store, WriteError,
};
use std::sync::Arc;
use std::time::Duration;

const KEY: &str = "db/LEASE";
const NAME: &str = "backup-host-1";
const TTL_S: u64 = 30;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

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

    /// A contender named [`NAME`] in this test's own process.
    fn ours(&self) -> Contender {
        let options = LeaseOptions::new(TTL_S).clock(Arc::new(self.clock.clone()));
        Contender::new(self.store.clone(), "db", options).with_instance_id(NAME)
    }

    /// A contender named [`NAME`] in another process, started with `nonce`.
    fn namesake(&self, nonce: &str) -> Contender {
        self.ours().with_instance_nonce(nonce)
    }

    fn record(&self) -> LeaseRecord {
        LeaseRecord::parse(&self.store.peek(KEY).expect("a LEASE object")).expect("a record")
    }

    /// A fresh record naming [`NAME`] as written by another program: the
    /// given nonce, or none (the reference, an older version).
    fn plant(&self, nonce: Option<&str>, epoch: u64) {
        let now = format_stamp(self.clock.wall());
        let record = LeaseRecord::new(NAME, now.clone(), now, TTL_S, epoch);
        let record = match nonce {
            Some(nonce) => record.with_nonce(nonce),
            None => record,
        };
        self.store.insert(KEY, &record.to_bytes());
    }
}

/// The error when the lease is held by another process under our name.
fn assert_held_by_namesake(result: Result<Lease, LeaseError>) {
    match result {
        Err(e @ LeaseError::Held { .. }) => {
            let LeaseError::Held { ref holder, .. } = e else {
                unreachable!()
            };
            assert_eq!(holder, NAME);
            let text = e.to_string();
            assert!(
                text.contains(&format!(
                    "held by another process under this same instance id {NAME}"
                )) && text.contains("give each process its own instance id"),
                "{text}"
            );
        }
        Err(other) => panic!("expected Held by a namesake, got {other}"),
        Ok(lease) => panic!(
            "a second process under the same id took the live record (epoch {})",
            lease.epoch()
        ),
    }
}

#[test]
fn a_second_process_under_the_same_id_is_held_out_until_the_record_is_stale() {
    let w = World::new();
    let first = w.namesake("process-a").try_acquire().expect("a takes it");
    let mut second = w.namesake("process-b");

    assert_held_by_namesake(second.try_acquire());
    w.clock.advance(secs(TTL_S - 1));
    assert_held_by_namesake(second.try_acquire());
    assert_eq!(w.record().instance_nonce.as_deref(), Some("process-a"));
    assert_eq!(w.record().epoch, 1);

    // The first renews: still its own, and still keeping the second out.
    first.renew().expect("the first process still holds it");
    w.clock.advance(secs(TTL_S - 1));
    assert_held_by_namesake(second.try_acquire());

    // Once stale it is taken over like any other holder's, one epoch on.
    w.clock.advance(secs(2));
    let taken = second.try_acquire().expect("a stale record is taken over");
    assert_eq!(
        taken.epoch(),
        2,
        "a takeover, not our own record taken back"
    );
    assert_eq!(taken.instance_nonce(), "process-b");
    assert_eq!(w.record().instance_nonce.as_deref(), Some("process-b"));

    // To the first, its renewal finds someone else's record: lost.
    assert!(
        matches!(first.renew(), Err(LeaseError::Lost { .. })),
        "the record of another process is not ours to adopt"
    );
    assert!(!first.may_write());
    // Its release leaves the second's record alone, and so does an
    // abandoned acquire's clean-up in the first's process.
    assert!(matches!(first.release(), Ok(Released::LeftAlone { .. })));
    assert!(matches!(
        w.namesake("process-a").release_abandoned(),
        Ok(Released::LeftAlone { .. })
    ));
    let left = w.record();
    assert_eq!(
        (left.instance_nonce.as_deref(), left.is_released()),
        (Some("process-b"), false),
        "nothing of the second's was touched"
    );
    taken.renew().expect("the second holds it");
}

#[test]
fn the_held_error_says_when_the_holder_has_our_name() {
    let w = World::new();
    let _first = w.namesake("process-a").try_acquire().unwrap();
    match w.namesake("process-b").try_acquire() {
        Err(LeaseError::Held {
            holder, relation, ..
        }) => assert!(relation == HolderRelation::Namesake && holder == NAME),
        other => panic!("expected Held, got {other:?}"),
    }
    // Another name held by another process is the plain case.
    let other = w.ours().with_instance_id("someone-else").try_acquire();
    match other {
        Err(
            e @ LeaseError::Held {
                relation: HolderRelation::Other,
                ..
            },
        ) => assert!(!e.to_string().contains("same instance id"), "{e}"),
        other => panic!("expected a plain Held, got {other:?}"),
    }
}

#[test]
fn a_lost_answer_is_still_recognised_within_one_process() {
    let w = World::new();
    // Every write of the attempt lands and loses its answer.
    w.store.lose_next_answers(TRANSIENT_WRITE_TRIES as usize);
    w.ours().try_acquire().expect_err("no answer ever came");
    let landed = w.record();
    assert_eq!(landed.instance_nonce.as_deref(), Some(process_nonce()));

    // Another process under the name is kept out of it...
    assert_held_by_namesake(w.namesake("process-b").try_acquire());
    // ...while this process, even through a contender built anew under the
    // same id (as `bucket-lease run` does to clean up), takes it over at
    // once: no live lease of the process holds it. A new lease is a new
    // holder, one epoch on (issue 28).
    let lease = w.ours().try_acquire().expect("our own record is ours");
    assert_eq!(lease.epoch(), 2, "a new lease value is a new holder");
    assert_eq!(lease.instance_nonce(), process_nonce());

    // A renewal whose answer was lost is adopted, not taken for a loss.
    w.clock.advance(secs(10));
    w.store.lose_next_answers(1);
    lease.renew().expect_err("the answer was lost");
    lease.renew().expect("the landed renewal is ours");
    assert!(lease.may_write());
    drop(lease);

    // And an abandoned acquire's record (the call failed after its write
    // landed unseen) is freed by the same process.
    w.clock.advance(secs(TTL_S));
    w.store.lose_next_answers(TRANSIENT_WRITE_TRIES as usize);
    w.ours().try_acquire().expect_err("no answer ever came");
    assert!(!w.record().is_released());
    assert_eq!(w.ours().release_abandoned().unwrap(), Released::Freed);
}

#[test]
fn a_record_naming_us_without_a_nonce_is_foreign() {
    let w = World::new();
    w.plant(None, 4);
    assert_held_by_namesake(w.ours().try_acquire());
    assert_eq!(
        w.ours().release_abandoned().unwrap(),
        Released::LeftAlone {
            holder: Some(NAME.into()),
            holder_name: None,
        },
        "an abandoned acquire's clean-up does not free it"
    );
    assert!(!w.record().is_released());
    w.clock.advance(secs(TTL_S));
    let lease = w.ours().try_acquire().expect("stale: taken over");
    assert_eq!(lease.epoch(), 5);

    // The same record written over ours (an older version of this program
    // under the same name): our renewal is lost, our release touches
    // nothing.
    w.plant(None, 6);
    assert!(matches!(lease.renew(), Err(LeaseError::Lost { .. })));
    assert!(matches!(lease.release(), Ok(Released::LeftAlone { .. })));
    assert_eq!(w.record().epoch, 6);
    assert!(!w.record().is_released());

    // So is one carrying another nonce.
    let w = World::new();
    w.plant(Some("another-process"), 2);
    assert_held_by_namesake(w.ours().try_acquire());
}

/// Writes `body` under `key` as the fenced writer of another process would,
/// under our name and epoch: the same metadata as `like`, but the nonce
/// `nonce` (or none).
fn plant_object(
    store: &MemoryStore,
    key: &str,
    body: &[u8],
    like: &[(String, String)],
    nonce: Option<&str>,
) {
    let mut options = PutOptions::new(PutMode::Overwrite);
    for (name, value) in like {
        if name != NONCE_METADATA {
            options = options.with_metadata(name.as_str(), value.as_str());
        }
    }
    if let Some(nonce) = nonce {
        options = options.with_metadata(NONCE_METADATA, nonce);
    }
    store.put(key, body, &options).unwrap();
}

#[test]
fn a_fenced_writer_does_not_count_another_process_object_as_its_own() {
    for other_nonce in [Some("process-b"), None] {
        let w = World::new();
        let lease = Arc::new(w.ours().try_acquire().unwrap());
        let writer = FencedWriter::new(lease.clone());
        // What our own write of these bytes stamps (holder, epoch, nonce,
        // digest), read back from a key of its own.
        writer.put_new("db/parts/mine", b"part").unwrap();
        let ours = w.store.head("db/parts/mine", None).unwrap().metadata;
        for name in [
            EPOCH_METADATA,
            HOLDER_METADATA,
            NONCE_METADATA,
            DIGEST_METADATA,
        ] {
            assert!(ours.iter().any(|(n, _)| n == name), "{name} in {ours:?}");
        }
        assert!(ours.contains(&(NONCE_METADATA.into(), process_nonce().into())));

        // Another process, at our epoch under our name, wrote the same bytes.
        plant_object(&w.store, "db/parts/1", b"part", &ours, other_nonce);
        match writer.put_new("db/parts/1", b"part") {
            Err(WriteError::Superseded(_)) => {}
            other => panic!("{other_nonce:?}: expected Superseded, got {other:?}"),
        }
        assert!(lease.is_lost(), "another writer is active");
    }

    // The pointer likewise.
    let w = World::new();
    let lease = Arc::new(w.ours().try_acquire().unwrap());
    let writer = FencedWriter::new(lease.clone());
    writer.put_pointer("db/LATEST", b"1").unwrap();
    let ours = w.store.head("db/LATEST", None).unwrap().metadata;
    plant_object(&w.store, "db/LATEST", b"theirs", &ours, Some("process-b"));
    assert!(matches!(
        writer.put_pointer("db/LATEST", b"2"),
        Err(WriteError::Superseded(_))
    ));
    assert!(lease.is_lost());
    assert_eq!(w.store.get("db/LATEST", None).unwrap().body, b"theirs");
}

#[test]
fn a_fenced_writer_still_recognises_its_own_lost_answer() {
    let w = World::new();
    let lease = Arc::new(w.ours().try_acquire().unwrap());
    let writer = FencedWriter::new(lease.clone());
    w.store.lose_next_answers(1);
    writer
        .put_new("db/parts/1", b"part")
        .expect_err("answer lost");
    let version = writer.put_new("db/parts/1", b"part").expect("ours landed");
    assert_eq!(version, w.store.head("db/parts/1", None).unwrap().version);
    assert!(!lease.is_lost());

    let read = FencedReader::new(w.store.clone())
        .get("db/parts/1")
        .unwrap();
    assert_eq!(read.epoch, 1);
    assert_eq!(read.holder.as_deref(), Some(NAME));
    assert_eq!(read.nonce.as_deref(), Some(lease.instance_nonce()));
}

/// The record type of the async reference, as it declares it: four
/// required fields and serde's default of ignoring any other.
#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
struct ReferenceRecord {
    instance_id: String,
    acquired_at: String,
    renewed_at: String,
    ttl_s: u64,
}

#[test]
fn records_stay_readable_both_ways() {
    // As the reference writes it: no epoch, no nonce.
    let reference = br#"{"instance_id":"abc","acquired_at":"2026-01-02T03:04:05Z","renewed_at":"2026-01-02T03:04:15Z","ttl_s":30}"#;
    let parsed = LeaseRecord::parse(reference).expect("a reference record parses");
    assert_eq!((parsed.epoch, parsed.instance_nonce.as_deref()), (0, None));
    assert!(
        !parsed.is_written_by("abc", process_nonce()),
        "nobody's own"
    );

    // Ours, with fields a newer version might add.
    let newer = br#"{"instance_id":"abc","acquired_at":"x","renewed_at":"y","ttl_s":5,"epoch":7,"instance_nonce":"n1","host":"h","pid":12}"#;
    let parsed = LeaseRecord::parse(newer).expect("unknown fields are ignored");
    assert_eq!(parsed.instance_nonce.as_deref(), Some("n1"));
    assert!(parsed.is_written_by("abc", "n1"));
    assert!(!parsed.is_written_by("abc", "n2") && !parsed.is_written_by("abd", "n1"));

    // What we write, the reference reads: a held record and a released one.
    let w = World::new();
    let lease = w.ours().try_acquire().unwrap();
    let body = w.store.peek(KEY).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["instance_nonce"], process_nonce());
    let seen: ReferenceRecord = serde_json::from_slice(&body).expect("the reference reads ours");
    assert_eq!((seen.instance_id.as_str(), seen.ttl_s), (NAME, TTL_S));
    lease.release().unwrap();
    let seen: ReferenceRecord =
        serde_json::from_slice(&w.store.peek(KEY).unwrap()).expect("and our released one");
    assert_eq!(seen.ttl_s, 0);

    // A record without a nonce is written without the field.
    let mut bare = LeaseRecord::parse(reference).unwrap();
    bare.instance_nonce = None;
    let json: serde_json::Value = serde_json::from_slice(&bare.to_bytes()).unwrap();
    assert!(json.get("instance_nonce").is_none());
}

#[test]
fn contenders_of_one_process_share_its_nonce() {
    let w = World::new();
    assert_eq!(w.ours().instance_nonce(), process_nonce());
    let options = LeaseOptions::new(TTL_S).clock(Arc::new(w.clock.clone()));
    let other = Contender::new(w.store.clone(), "elsewhere", options);
    assert_eq!(other.instance_nonce(), process_nonce());
    assert_eq!(process_nonce().len(), 32);
    assert!(process_nonce().bytes().all(|b| b.is_ascii_hexdigit()));
}

/// The holder name is for people: a record that differs from ours only in
/// it is still ours (renewed, released), and a namesake under our holder
/// name is still another process.
#[test]
fn the_holder_name_never_decides_who_holds_the_lease() {
    let w = World::new();
    let lease = w
        .ours()
        .with_holder_name("job-a")
        .unwrap()
        .try_acquire()
        .unwrap();
    assert_eq!(lease.holder_name(), Some("job-a"));
    assert_eq!(w.record().holder_name.as_deref(), Some("job-a"));
    // Our record, rewritten under another name (a new version): still ours.
    let renamed = w.record().with_holder_name("renamed-by-hand");
    w.store.insert(KEY, &renamed.to_bytes());
    lease
        .renew()
        .expect("our id and nonce: ours, whatever the name");
    assert!(lease.may_write());
    assert_eq!(
        w.record().holder_name.as_deref(),
        Some("job-a"),
        "renewed under our name"
    );
    // A namesake process with our holder name too is another holder.
    let other = w
        .namesake("another-process")
        .with_holder_name("job-a")
        .unwrap()
        .try_acquire();
    assert_held_by_namesake(other);
    match w.ours().with_instance_id("b").try_acquire() {
        Err(e @ LeaseError::Held { .. }) => {
            let LeaseError::Held {
                ref holder_name, ..
            } = e
            else {
                unreachable!()
            };
            assert_eq!(holder_name.as_deref(), Some("job-a"));
            assert!(e.to_string().contains(&format!("{NAME} (job-a)")), "{e}");
        }
        other => panic!("expected Held, got {other:?}"),
    }
    assert_eq!(lease.release().unwrap(), Released::Freed);
    // By default the name is host:pid; it can be left out, and a bad one
    // is refused before anything is sent.
    let pid = format!(":{}", std::process::id());
    assert!(w.ours().holder_name().is_some_and(|n| n.ends_with(&pid)));
    assert_eq!(w.ours().without_holder_name().holder_name(), None);
    assert!(w.ours().with_holder_name("bad\u{1b}[2J").is_err());
    assert!(w.ours().with_holder_name("x".repeat(129)).is_err());
}
