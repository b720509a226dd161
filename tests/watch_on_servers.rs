//! The watcher (`bucket_lease::watch`) against real S3-compatible servers
//! on 127.0.0.1 started by `scripts/test-servers.sh`, moto and Ceph RGW
//! 16.2:
//!
//! - an unchanged record is polled with `If-None-Match` and answered
//!   `304 Not Modified` (no body), a renewal is read once (`200`) and is
//!   no change, and the polls after it are `304`s again;
//! - a follower's watch sees another contender's takeover within one poll
//!   interval of the new record (issue 33's "done when").
//!
//! Without the servers' variables each test prints a note and passes,
//! unless `BUCKET_LEASE_REQUIRE_SERVERS=1`.
#![cfg(any(feature = "s3", feature = "r2", feature = "minio"))]

#[path = "../backends/tests/common/mod.rs"]
mod common;

use bucket_lease::backends::trace::{self, Outcome, RequestTrace};
use bucket_lease::watch::{Change, ChangeKind, LeaseState, Watcher};
use bucket_lease::{
    clock::SystemClock, store::DeleteMode, store::Object, store::PutOptions, store::Version,
    Contender, Lease, LeaseError, LeaseOptions, Store, StoreError, Wait,
};
use common::Server;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The statuses of the GETs in `traces`, but for a last one cut short by
/// the wait's deadline (a poll begun just before it).
fn get_statuses(traces: &[RequestTrace]) -> Vec<Outcome> {
    let mut statuses: Vec<Outcome> = traces
        .iter()
        .filter(|t| t.method == "GET")
        .map(|t| t.outcome)
        .collect();
    if statuses.last() == Some(&Outcome::Timeout) {
        statuses.pop();
    }
    statuses
}

fn a_wait(for_: Duration, every: Duration) -> Wait {
    Wait::until(Instant::now() + for_).max_reread(every)
}

#[test]
fn an_unchanged_record_is_polled_with_304s_on_moto() {
    unchanged_is_304(Server::Moto);
}

#[test]
fn an_unchanged_record_is_polled_with_304s_on_rgw() {
    unchanged_is_304(Server::Rgw);
}

fn unchanged_is_304(server: Server) {
    let Some(store) = common::store(server) else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(store);
    let prefix = common::unique_prefix("watch-304");
    let lease = Lease::acquire(store.clone(), &prefix, LeaseOptions::new(60))
        .unwrap_or_else(|e| panic!("{server:?}: {e}"));
    let mut watcher = Watcher::new(store.clone(), &prefix, Arc::new(SystemClock));
    let every = Duration::from_millis(100);
    let (seen, traces) = trace::collect(|| {
        let first = watcher.next_change(&a_wait(Duration::from_secs(10), every));
        let then = watcher.next_change(&a_wait(Duration::from_millis(1200), every));
        (first, then)
    });
    let first = seen.0.unwrap().expect("the first call reports");
    assert_eq!(
        (first.kind, first.state, first.holder()),
        (
            ChangeKind::First,
            LeaseState::Held,
            Some(lease.instance_id())
        ),
        "{server:?}"
    );
    assert_eq!(seen.1.unwrap(), None, "{server:?}: nothing changed");
    let statuses = get_statuses(&traces);
    assert_eq!(
        statuses[0],
        Outcome::Status(200),
        "{server:?}: {statuses:?}"
    );
    // About a dozen polls, each a 304: the record was not sent again.
    assert!(statuses.len() >= 5, "{server:?}: {statuses:?}");
    assert!(
        statuses[1..].iter().all(|s| *s == Outcome::Status(304)),
        "{server:?}: {statuses:?}"
    );

    // A renewal: a new ETag, read once, no change; then 304s on it.
    lease.renew().unwrap_or_else(|e| panic!("{server:?}: {e}"));
    let (none, traces) =
        trace::collect(|| watcher.next_change(&a_wait(Duration::from_millis(1200), every)));
    assert_eq!(none.unwrap(), None, "{server:?}: a renewal is no change");
    let statuses = get_statuses(&traces);
    assert_eq!(
        statuses[0],
        Outcome::Status(200),
        "{server:?}: {statuses:?}"
    );
    assert!(statuses.len() >= 5, "{server:?}: {statuses:?}");
    assert!(
        statuses[1..].iter().all(|s| *s == Outcome::Status(304)),
        "{server:?}: {statuses:?}"
    );
    lease.release().unwrap();
}

/// A store that notes when its first successful write of the record
/// returned: the takeover's write, for the contender that takes over.
#[derive(Debug)]
struct NotesWrites {
    inner: Arc<dyn Store>,
    written: Mutex<Option<Instant>>,
}

impl Store for NotesWrites {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        let written = self.inner.put(key, body, options);
        if written.is_ok() && key.ends_with("/LEASE") {
            let mut first = self.written.lock().unwrap();
            first.get_or_insert_with(Instant::now);
        }
        written
    }

    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        self.inner.delete(key, mode, deadline)
    }

    fn condition_spelling(&self) -> u64 {
        self.inner.condition_spelling()
    }

    fn concurrent_requests(&self) -> bool {
        self.inner.concurrent_requests()
    }
}

/// How late a sleeping thread may wake on a loaded two-core machine: the
/// poll due one interval after the previous began may start this much
/// later (a timer's lateness, not a request's time, which is measured).
const WAKE_SLACK: Duration = Duration::from_millis(500);

#[test]
fn a_followers_watch_sees_a_takeover_within_one_poll_interval_on_moto() {
    takeover_within_one_interval(Server::Moto);
}

#[test]
fn a_followers_watch_sees_a_takeover_within_one_poll_interval_on_rgw() {
    takeover_within_one_interval(Server::Rgw);
}

/// A holder stops renewing; another contender takes the lease over once
/// the record expires; a follower watching with a poll interval of 1 s
/// reports the new holder. The poll that saw it began no later than one
/// interval (plus [`WAKE_SLACK`]) after the takeover's write returned, so
/// the change arrived within one interval plus that poll's own time.
fn takeover_within_one_interval(server: Server) {
    let Some(store) = common::store(server) else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(store);
    let prefix = common::unique_prefix("watch-takeover");
    let interval = Duration::from_secs(1);
    // Renewed by nobody: it expires two seconds after it was taken.
    let old = Lease::acquire(store.clone(), &prefix, LeaseOptions::new(2))
        .unwrap_or_else(|e| panic!("{server:?}: {e}"));
    let noting = Arc::new(NotesWrites {
        inner: store.clone(),
        written: Mutex::new(None),
    });
    let mut next = Contender::new(noting.clone(), &prefix, LeaseOptions::new(30));
    let successor = next.instance_id().to_string();

    let follower = {
        let (store, prefix, successor) = (store.clone(), prefix.clone(), successor.clone());
        std::thread::spawn(move || {
            trace::collect(|| {
                let mut watcher = Watcher::new(store, &prefix, Arc::new(SystemClock));
                let wait =
                    Wait::until(Instant::now() + Duration::from_secs(60)).max_reread(interval);
                let mut changes: Vec<Change> = Vec::new();
                while changes.last().and_then(Change::holder) != Some(successor.as_str()) {
                    match watcher.next_change(&wait) {
                        Ok(Some(change)) => changes.push(change),
                        other => panic!("expected a change, got {other:?} after {changes:?}"),
                    }
                }
                changes
            })
        })
    };
    let limit = Instant::now() + Duration::from_secs(30);
    let lease = loop {
        match next.try_acquire() {
            Ok(lease) => break lease,
            Err(LeaseError::Held { .. }) if Instant::now() < limit => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("{server:?}: {e}"),
        }
    };
    let written = noting.written.lock().unwrap().expect("the takeover wrote");
    let (changes, traces) = follower.join().unwrap();
    let kinds: Vec<ChangeKind> = changes.iter().map(|c| c.kind).collect();
    assert_eq!(kinds[0], ChangeKind::First, "{server:?}: {kinds:?}");
    assert_eq!(changes[0].holder(), Some(old.instance_id()), "{server:?}");
    let taken = changes.last().unwrap();
    assert_eq!(
        (taken.kind, taken.state, taken.epoch()),
        (ChangeKind::NewHolder, LeaseState::Held, Some(lease.epoch())),
        "{server:?}: {kinds:?}"
    );
    // The poll that saw it: the last GET that ended before it was judged.
    let poll = traces
        .iter()
        .rfind(|t| t.method == "GET" && t.ended <= taken.seen)
        .expect("a poll saw it");
    let began_after = poll.started.saturating_duration_since(written);
    assert!(
        began_after <= interval + WAKE_SLACK,
        "{server:?}: the poll that saw the takeover began {began_after:?} after its write"
    );
    let request = poll.ended - poll.started;
    let seen_after = taken.seen.saturating_duration_since(written);
    assert!(
        seen_after <= interval + WAKE_SLACK + request,
        "{server:?}: seen {seen_after:?} after the write (the poll took {request:?})"
    );
    eprintln!(
        "{server:?}: takeover seen {seen_after:?} after its write (poll interval {interval:?}, \
         the poll took {request:?}); changes {kinds:?}"
    );
    lease.release().unwrap();
    drop(old);
}
