//! A fenced job run twice in a row on one bucket, as a user reruns a
//! nightly job: on a local directory, and on moto when the test servers
//! run (`scripts/test-servers.sh`). Both runs must write, move `LATEST`
//! and release; the second is a new holder at the next epoch. Then a
//! holder that lost a write's answer retries it and keeps its lease.
#![cfg(feature = "fs")]

use bucket_lease::backends::fs::DirStore;
use bucket_lease::fence::FencedReader;
use bucket_lease::KeptLease;
use bucket_lease::{
    store::DeleteMode, store::Object, store::PutOptions, store::StoreErrorKind, store::Version,
    Contender, FencedWriter, Keeper, KeeperOptions, LeaseOptions, Released, Store, StoreError,
    WriteError,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[cfg(any(feature = "s3", feature = "r2", feature = "minio"))]
#[path = "../backends/tests/common/mod.rs"]
mod common;

/// One run of the job: take the lease, write three parts named by epoch,
/// move `LATEST`, read it back trusting this epoch, release.
fn run_job(store: &Arc<dyn Store>, prefix: &str) -> (u64, Released) {
    let mut contender = Contender::new(store.clone(), prefix, LeaseOptions::new(30));
    let keeper = Keeper::spawn(contender.try_acquire().unwrap(), KeeperOptions::new()).unwrap();
    let epoch = keeper.lease().epoch();
    let writer = FencedWriter::new(keeper.lease().clone());
    for part in 0..3 {
        writer
            .put_new(&format!("{prefix}/parts/{epoch}-{part}"), b"...")
            .unwrap_or_else(|e| panic!("epoch {epoch}, part {part}: {e}"));
    }
    let latest = format!("{prefix}/LATEST");
    writer
        .put_pointer(&latest, format!("parts/{epoch}-2").as_bytes())
        .unwrap_or_else(|e| panic!("epoch {epoch}, LATEST: {e}"));
    let pointer = FencedReader::new(store.clone())
        .trusting(epoch)
        .get(&latest)
        .unwrap();
    assert_eq!(pointer.epoch, epoch);
    assert!(keeper.may_write(), "epoch {epoch}: the lease is still held");
    (epoch, keeper.stop().unwrap())
}

fn twice(store: Arc<dyn Store>, prefix: &str) {
    assert_eq!(run_job(&store, prefix), (1, Released::Freed));
    assert_eq!(run_job(&store, prefix), (2, Released::Freed));
    // The first run's parts are now older than the pointer's epoch.
    let reader = FencedReader::new(store).trusting(2);
    assert!(reader.get(&format!("{prefix}/parts/1-0")).is_err());
    assert!(reader.get(&format!("{prefix}/parts/2-0")).is_ok());
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "bucket-lease-{name}-{}-{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_job_run_twice_on_a_directory_writes_and_releases_both_times() {
    let dir = temp_dir("fenced-job");
    let store: Arc<dyn Store> = Arc::new(DirStore::open(&dir).unwrap());
    twice(store, "nightly");
    std::fs::remove_dir_all(dir).unwrap();
}

#[cfg(any(feature = "s3", feature = "r2", feature = "minio"))]
#[test]
fn a_job_run_twice_on_moto_writes_and_releases_both_times() {
    let Some(store) = common::store(common::Server::Moto) else {
        return;
    };
    twice(Arc::new(store), &common::unique_prefix("fenced-job"));
}

/// A directory store that loses the answer of the next write after the
/// write landed.
#[derive(Debug)]
struct LosesOneAnswer {
    inner: DirStore,
    lose: AtomicBool,
}

impl Store for LosesOneAnswer {
    fn get(&self, key: &str, d: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, d)
    }

    fn head(&self, key: &str, d: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.head(key, d)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        let written = self.inner.put(key, body, options)?;
        if self.lose.swap(false, Ordering::SeqCst) {
            return Err(StoreError::new(StoreErrorKind::Transport, "PUT", key).timed_out());
        }
        Ok(written)
    }

    fn delete(&self, key: &str, mode: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.inner.delete(key, mode, d)
    }
}

#[test]
fn a_retried_write_after_a_lost_answer_keeps_the_lease() {
    let dir = temp_dir("lost-answer");
    let store = Arc::new(LosesOneAnswer {
        inner: DirStore::open(&dir).unwrap(),
        lose: false.into(),
    });
    let lease = Contender::new(store.clone(), "job", LeaseOptions::new(30))
        .try_acquire()
        .unwrap();
    let writer = FencedWriter::new(Arc::new(lease));
    store.lose.store(true, Ordering::SeqCst);
    let first = writer.put_new("job/part", b"bytes");
    assert!(matches!(first, Err(WriteError::Store(_))), "{first:?}");
    writer.put_new("job/part", b"bytes").unwrap();
    assert!(writer.lease().may_write());

    writer.put_pointer("job/LATEST", b"part-0").unwrap();
    store.lose.store(true, Ordering::SeqCst);
    let first = writer.put_pointer("job/LATEST", b"part");
    assert!(matches!(first, Err(WriteError::Store(_))), "{first:?}");
    writer.put_pointer("job/LATEST", b"part").unwrap();
    assert!(writer.lease().may_write());
    assert_eq!(writer.lease().release().unwrap(), Released::Freed);
    std::fs::remove_dir_all(dir).unwrap();
}
