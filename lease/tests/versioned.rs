//! A lease on a bucket that keeps versions says so once: one warning per
//! lease object per process, naming how many versions a day it adds and the
//! lifecycle rule that bounds them; none on a bucket without versions (nor
//! one answering S3's `null` version id), and none for fenced data writes.

use bucket_lease_core::memory::MemoryStore;
use bucket_lease_core::{
    clock::TestClock, store::DeleteMode, store::Object, store::PutMode, store::PutOptions,
    store::Version, Contender, FencedWriter, Lease, LeaseOptions, Store, StoreError,
};
use std::sync::{Arc, Mutex, Once};
use std::time::Instant;

/// Install (once) a logger that keeps every warning; the warnings logged so
/// far by every test of this file that name `mark`.
fn warnings(mark: &str) -> Vec<String> {
    struct Keep;
    static KEPT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    impl log::Log for Keep {
        fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
            metadata.level() <= log::Level::Warn
        }
        fn log(&self, record: &log::Record<'_>) {
            if self.enabled(record.metadata()) {
                KEPT.lock().unwrap().push(record.args().to_string());
            }
        }
        fn flush(&self) {}
    }
    static KEEP: Keep = Keep;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_logger(&KEEP).expect("no other logger in these tests");
        log::set_max_level(log::LevelFilter::Warn);
    });
    KEPT.lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(mark))
        .cloned()
        .collect()
}

/// Acquire `prefix` on `store` at `ttl_s`, renew it five times, release.
fn hold(store: Arc<dyn Store>, prefix: &str, ttl_s: u64) {
    warnings("");
    let options = LeaseOptions::new(ttl_s).clock(Arc::new(TestClock::new()));
    let lease = Contender::new(store, prefix, options)
        .try_acquire()
        .unwrap();
    for _ in 0..5 {
        lease.renew().unwrap();
    }
    lease.release().unwrap();
}

#[test]
fn a_versioned_bucket_is_named_once_with_the_count_and_the_rule() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::versioned());
    hold(store.clone(), "versioned/once", 30);
    let said = warnings("versioned/once/LEASE");
    assert_eq!(said.len(), 1, "{said:#?}");
    for needle in [
        "memory:///versioned/once/LEASE",
        "keeps every version",
        "8640 versions a day at ttl_s 30",
        r#""Filter":{"Prefix":"versioned/once/LEASE"}"#,
        r#""NoncurrentVersionExpiration":{"NoncurrentDays":1}"#,
    ] {
        assert!(said[0].contains(needle), "{needle:?} in {}", said[0]);
    }

    // The same lease taken again in this process, by a new contender: it
    // was said already.
    hold(store.clone(), "versioned/once", 30);
    assert_eq!(warnings("versioned/once/LEASE").len(), 1);

    // Another lease on the bucket is named on its own, with its own count.
    hold(store, "versioned/other", 3);
    let said = warnings("versioned/other/LEASE");
    assert_eq!(said.len(), 1, "{said:#?}");
    assert!(
        said[0].contains("86400 versions a day at ttl_s 3"),
        "{}",
        said[0]
    );
}

#[test]
fn a_bucket_without_versions_is_not_named() {
    hold(Arc::new(MemoryStore::new()), "unversioned", 30);
    assert_eq!(warnings("unversioned/LEASE"), Vec::<String>::new());
}

/// A store that answers with the version id `ids` says for each key (`null`
/// is what S3 answers on a bucket whose versioning was never on or is
/// suspended); its conditions are on the ETag alone, as S3's `If-Match`.
#[derive(Debug)]
struct VersionIds {
    inner: MemoryStore,
    ids: fn(&str) -> Option<String>,
}

impl Store for VersionIds {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        let mut object = self.inner.get(key, deadline)?;
        object.version.version_id = (self.ids)(key);
        Ok(object)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        let mut options = options.clone();
        if let PutMode::Update(wanted) = &mut options.mode {
            wanted.version_id = None;
        }
        let mut version = self.inner.put(key, body, &options)?;
        version.version_id = (self.ids)(key);
        Ok(version)
    }

    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        let mut mode = mode.clone();
        if let DeleteMode::IfVersion(wanted) = &mut mode {
            wanted.version_id = None;
        }
        self.inner.delete(key, &mode, d)
    }
}

#[test]
fn the_null_version_id_is_not_a_versioned_bucket() {
    let store = VersionIds {
        inner: MemoryStore::new(),
        ids: |_| Some("null".into()),
    };
    hold(Arc::new(store), "suspended", 30);
    assert_eq!(warnings("suspended/LEASE"), Vec::<String>::new());
}

#[test]
fn fenced_data_writes_are_not_named() {
    // Versions on every object but the lease record.
    let store = Arc::new(VersionIds {
        inner: MemoryStore::new(),
        ids: |key| (!key.ends_with("/LEASE")).then(|| "v1".into()),
    });
    warnings("");
    let options = LeaseOptions::new(30).clock(Arc::new(TestClock::new()));
    let lease = Lease::acquire(store.clone(), "fenced", options).unwrap();
    let writer = FencedWriter::new(Arc::new(lease));
    let written = writer.put_new("fenced/seg-1", b"one").unwrap();
    assert_eq!(written.version_id.as_deref(), Some("v1"));
    writer.put_pointer("fenced/LATEST", b"1").unwrap();
    assert_eq!(warnings("fenced/"), Vec::<String>::new());
}
