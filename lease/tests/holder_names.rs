//! The holder's name for people beside its instance id wherever a holder
//! is named (issue 34): `Held`, `Released::LeftAlone`, a lost lease, and
//! the metadata stamped on fenced objects (escaped to visible ASCII, as
//! S3 user metadata must be, and read back leniently). On the in-memory
//! store with a test clock.

use bucket_lease_core::fence::{FencedReader, HOLDER_METADATA, HOLDER_NAME_METADATA};
use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::{
    clock::TestClock, store::PutMode, store::PutOptions, Contender, FencedWriter, LeaseError,
    LeaseOptions, Released, Store,
};
use std::sync::Arc;
use std::time::Duration;

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

    fn named(&self, name: &str) -> Contender {
        let options = LeaseOptions::new(TTL_S).clock(Arc::new(self.clock.clone()));
        Contender::new(self.store.clone(), "db", options)
            .with_holder_name(name)
            .unwrap()
    }
}

#[test]
fn held_names_the_holder_by_id_and_name() {
    let w = World::new();
    let a = w.named("job-a@db1").try_acquire().unwrap();
    match w.named("job-b").try_acquire() {
        Err(e @ LeaseError::Held { .. }) => {
            let LeaseError::Held {
                ref holder,
                ref holder_name,
                ..
            } = e
            else {
                unreachable!()
            };
            assert_eq!(holder, a.instance_id());
            assert_eq!(holder_name.as_deref(), Some("job-a@db1"));
            let text = e.to_string();
            assert!(
                text.contains(&format!("{} (job-a@db1)", a.instance_id())),
                "{text}"
            );
        }
        other => panic!("expected Held, got {other:?}"),
    }
}

/// A lease taken over: its renewal finds it lost, and both the lease and
/// its release name the new holder by id and by name.
#[test]
fn a_lost_lease_and_its_release_name_the_new_holder() {
    let w = World::new();
    let a = w.named("job-a").try_acquire().unwrap();
    assert_eq!((a.lost_to(), a.lost_to_name()), (None, None));
    w.clock.advance(Duration::from_secs(TTL_S + 1));
    let b = w.named("job-b").try_acquire().unwrap();
    assert!(matches!(a.renew(), Err(LeaseError::Lost { .. })));
    assert_eq!(a.lost_to().as_deref(), Some(b.instance_id()));
    assert_eq!(a.lost_to_name().as_deref(), Some("job-b"));
    assert_eq!(
        a.release().unwrap(),
        Released::LeftAlone {
            holder: Some(b.instance_id().into()),
            holder_name: Some("job-b".into()),
        }
    );
}

/// A release that reads the record (the lease was marked lost by a
/// refused write elsewhere) names who holds it now too; a holder without
/// a name is named by its id alone.
#[test]
fn a_release_that_reads_the_record_names_its_holder() {
    let w = World::new();
    let a = w.named("job-a").try_acquire().unwrap();
    w.clock.advance(Duration::from_secs(TTL_S + 1));
    let b = w.named("job-b").try_acquire().unwrap();
    a.mark_lost(None);
    assert_eq!(
        a.release().unwrap(),
        Released::LeftAlone {
            holder: Some(b.instance_id().into()),
            holder_name: Some("job-b".into()),
        }
    );
    drop(b);

    let w = World::new();
    let a = w.named("job-a").try_acquire().unwrap();
    w.clock.advance(Duration::from_secs(TTL_S + 1));
    let c = w.named("x").without_holder_name().try_acquire().unwrap();
    assert!(a.renew().is_err());
    assert_eq!(a.lost_to_name(), None);
    assert_eq!(
        a.release().unwrap(),
        Released::LeftAlone {
            holder: Some(c.instance_id().into()),
            holder_name: None,
        }
    );
}

/// The name is stamped on every fenced object as visible ASCII (S3 user
/// metadata is ASCII in practice; the HTTP store refuses anything else),
/// and the reader gives it back as it was written.
#[test]
fn fenced_objects_carry_the_holder_name_escaped_to_ascii() {
    let w = World::new();
    for name in [
        "nightly@db1",
        "équipe nuit:42",
        "100% (eu-west-1)",
        "日本:7",
    ] {
        let lease = Arc::new(w.named(name).try_acquire().unwrap());
        let writer = FencedWriter::new(lease.clone());
        let key = format!("db/part-{}", name.len());
        writer.put_new(&key, b"part").unwrap();
        let object = w.store.get(&key, None).unwrap();
        let stamped = object
            .metadata
            .iter()
            .find(|(n, _)| n == HOLDER_NAME_METADATA)
            .map(|(_, v)| v.clone())
            .expect("the name is stamped");
        assert!(
            stamped.bytes().all(|b| b.is_ascii_graphic()),
            "visible ASCII only: {stamped:?}"
        );
        assert!(object
            .metadata
            .contains(&(HOLDER_METADATA.into(), lease.instance_id().into())));
        let read = FencedReader::new(w.store.clone()).get(&key).unwrap();
        assert_eq!(read.holder.as_deref(), Some(lease.instance_id()));
        assert_eq!(read.holder_name.as_deref(), Some(name));
        let stream = FencedReader::new(w.store.clone()).open(&key).unwrap();
        assert_eq!(stream.holder_name.as_deref(), Some(name));
        writer.put_pointer("db/LATEST", key.as_bytes()).unwrap();
        let pointer = FencedReader::new(w.store.clone()).get("db/LATEST").unwrap();
        assert_eq!(pointer.holder_name.as_deref(), Some(name));
        lease.release().unwrap();
    }
}

/// A name in the metadata that is not one this crate writes (a bad
/// escape, bytes that are not UTF-8, a control character once decoded,
/// too long) is read as none; the object is read all the same.
#[test]
fn a_hostile_stamped_name_is_read_as_none() {
    let w = World::new();
    let long = "x".repeat(129);
    for stamped in [
        "%",
        "%zz",
        "%ff%fe",
        "a%1b%5b2Jb",
        "rtl%e2%80%aex",
        long.as_str(),
        "",
    ] {
        let options = PutOptions::new(PutMode::Overwrite)
            .with_metadata("bucket-lease-epoch", "1")
            .with_metadata(HOLDER_NAME_METADATA, stamped);
        w.store.put("db/odd", b"body", &options).unwrap();
        let read = FencedReader::new(w.store.clone()).get("db/odd").unwrap();
        assert_eq!((read.epoch, read.holder_name), (1, None), "{stamped:?}");
        assert_eq!(read.object.body, b"body");
    }
}
