//! The whole lease through each HTTP profile, against real S3-compatible
//! servers on 127.0.0.1 started by `scripts/test-servers.sh`:
//!
//! - moto (conformant): the life cycle on every profile, the renewal thread,
//!   fenced writes with their epoch, and a write abandoned at the write
//!   deadline behind a proxy that delays requests;
//! - Ceph RGW 16.2 (refuses a quoted `If-Match`, right or wrong; ignores
//!   `If-Match` on DELETE), with every profile's default settings: the
//!   same life cycle, renewal thread and fenced writes, the spelling
//!   learned by the first acquire's probe, and a paused holder's release
//!   that leaves its successor's record alone;
//! - s3rver (ignores both conditions) and localbucket (ignores `If-Match`):
//!   the probe fails closed, naming the header, and leaves nothing behind;
//!   best-effort mode still works on s3rver.
//!
//! Without the servers' variables each test prints a note and passes,
//! unless `BUCKET_LEASE_REQUIRE_SERVERS=1`.
#![cfg(any(feature = "s3", feature = "r2", feature = "minio"))]

#[path = "../backends/tests/common/mod.rs"]
mod common;

use bucket_lease::fence::EPOCH_METADATA;
use bucket_lease::KeptLease;
use bucket_lease::{
    error::IgnoredCondition, lease::Exclusion, record::LeaseRecord, store::DeleteMode,
    store::Object, store::PutMode, store::PutOptions, store::Version, Contender, Event,
    FencedWriter, Keeper, KeeperOptions, Lease, LeaseError, LeaseOptions, Released, Store,
    StoreError, WriteError,
};
use common::Server;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn held_by(result: Result<Lease, LeaseError>) -> String {
    match result {
        Err(LeaseError::Held { holder, .. }) => holder,
        other => panic!("expected Held, got {other:?}"),
    }
}

/// Whether the record at `key` says its holder released it (a release
/// never deletes the key).
fn released(store: &dyn Store, key: &str) -> bool {
    let object = store.get(key, None).expect("the LEASE object is kept");
    LeaseRecord::parse(&object.body).is_some_and(|r| r.is_released())
}

#[test]
fn the_life_cycle_on_every_profile() {
    let Some(stores) = common::profile_stores_on_moto() else {
        return;
    };
    for (profile, store) in stores {
        life_cycle(profile, Arc::new(store));
    }
}

/// The same on RGW, each profile a fresh store with its defaults: the
/// first acquire's probe finds the right quoted ETag refused, learns the
/// bare spelling and probes again in it; nothing else differs.
#[test]
fn the_life_cycle_on_every_profile_on_rgw() {
    let Some(stores) = common::profile_stores_on(Server::Rgw) else {
        return;
    };
    for (profile, store) in stores {
        assert_eq!(store.condition_spelling(), 0, "{profile}");
        let store = Arc::new(store);
        life_cycle(profile, store.clone());
        assert_eq!(store.condition_spelling(), 1, "{profile}: learned once");
    }
}

/// Acquire, held for others, 20 renewals (3 on a store with a write
/// interval), release; the next holder one
/// epoch up; a holder that stops renewing taken over after its TTL, its
/// renewal then lost and its release leaving the new record alone.
fn life_cycle(profile: &str, store: Arc<dyn Store>) {
    let prefix = common::unique_prefix("life-cycle");
    let lease = Lease::acquire(store.clone(), &prefix, LeaseOptions::new(30))
        .unwrap_or_else(|e| panic!("{profile}: {e}"));
    assert_eq!(lease.exclusion(), Exclusion::Conditional, "{profile}");
    assert_eq!(
        held_by(Lease::acquire(
            store.clone(),
            &prefix,
            LeaseOptions::new(30)
        )),
        lease.instance_id(),
        "{profile}"
    );
    // A store with a write interval (r2's profile: one second) spaces the
    // renewals by it: fewer of them, for time.
    let renewals = if store.write_interval().is_some() {
        3
    } else {
        20
    };
    for _ in 0..renewals {
        lease.renew().unwrap_or_else(|e| panic!("{profile}: {e}"));
    }
    assert_eq!(lease.release().unwrap(), Released::Freed, "{profile}");
    assert!(released(&*store, lease.key()), "{profile}");
    // The next holder counts one up from the released record.
    let next = Lease::acquire(store.clone(), &prefix, LeaseOptions::new(30)).unwrap();
    assert_eq!(next.epoch(), lease.epoch() + 1, "{profile}");
    next.release().unwrap();

    // A holder that stops renewing is taken over once its TTL is out: the
    // shortest TTL the store takes (3 s on a store that takes one write of
    // a key a second).
    let ttl_s = store
        .write_interval()
        .map_or(1, |interval| (interval * 3).as_secs_f64().ceil() as u64);
    let old = Lease::acquire(store.clone(), &prefix, LeaseOptions::new(ttl_s))
        .unwrap_or_else(|e| panic!("{profile}: {e}"));
    let mut next = Contender::new(store.clone(), &prefix, LeaseOptions::new(ttl_s));
    held_by(next.try_acquire());
    std::thread::sleep(Duration::from_secs(ttl_s) + Duration::from_millis(100));
    let new = next
        .try_acquire()
        .unwrap_or_else(|e| panic!("{profile}: {e}"));
    assert_eq!(new.epoch(), old.epoch() + 1, "{profile}");
    assert_eq!(
        old.renew().unwrap_err(),
        LeaseError::Lost {
            key: old.key().into(),
            holder: Some(new.instance_id().into())
        },
        "{profile}"
    );
    assert_eq!(
        old.release().unwrap(),
        Released::LeftAlone {
            holder: Some(new.instance_id().into()),
            holder_name: new.holder_name().map(Into::into),
        }
    );
    assert_eq!(new.release().unwrap(), Released::Freed, "{profile}");
}

/// Acquire on `server`, expect the probe to fail closed on `condition`
/// naming its header and handing the key back (our record marked
/// released); hand back the store and the prefix for more.
fn probe_fails_closed(
    server: Server,
    condition: IgnoredCondition,
) -> Option<(Arc<dyn Store>, String)> {
    let store: Arc<dyn Store> = Arc::new(common::store(server)?);
    let prefix = common::unique_prefix("probe");
    let err = Lease::acquire(store.clone(), &prefix, LeaseOptions::new(30)).unwrap_err();
    assert_eq!(
        err,
        LeaseError::ConditionsIgnored {
            key: format!("{prefix}/LEASE"),
            condition
        },
        "{server:?}"
    );
    assert!(err.to_string().contains(condition.header()), "{err}");
    // Our record was handed back.
    await_written_back(&*store, &format!("{prefix}/LEASE"), |r| r.is_released());
    Some((store, prefix))
}

#[test]
fn a_server_that_ignores_both_conditions_fails_the_probe_on_if_none_match() {
    let Some((store, prefix)) = probe_fails_closed(Server::S3rver, IgnoredCondition::IfNoneMatch)
    else {
        return;
    };
    // Asked for, best-effort works on it: one holder, the other kept out.
    let options = || LeaseOptions::new(30).best_effort(true);
    let lease = Lease::acquire(store.clone(), &prefix, options()).unwrap();
    assert_eq!(lease.exclusion(), Exclusion::BestEffort);
    let ours = |r: &LeaseRecord| r.instance_id == lease.instance_id() && !r.is_released();
    let acquired = await_written_back(&*store, lease.key(), ours);
    assert_eq!(
        held_by(Lease::acquire(store.clone(), &prefix, options())),
        lease.instance_id()
    );
    lease.renew().unwrap();
    await_written_back(&*store, lease.key(), |r| {
        ours(r) && r.renewed_at != acquired.renewed_at
    });
    assert_eq!(lease.release().unwrap(), Released::Freed);
}

/// Wait until `key` reads back as a record `settled` accepts (at most 5 s),
/// and hand it back.
///
/// s3rver 3.7.1 answers a PUT once it has hashed the body, before its file
/// is written (`putObject` in its `stores/filesystem.js` resolves on the
/// hashing stream's `finish`), so a read right after a write can see an
/// empty object: a store without read-after-write consistency. The lease's
/// best-effort mode promises nothing on such a store, so the test waits
/// for each write to land before it reads.
fn await_written_back(
    store: &dyn Store,
    key: &str,
    settled: impl Fn(&LeaseRecord) -> bool,
) -> LeaseRecord {
    let give_up = Instant::now() + Duration::from_secs(5);
    loop {
        let object = store.get(key, None).expect("the LEASE object is kept");
        if let Some(record) = LeaseRecord::parse(&object.body).filter(|r| settled(r)) {
            return record;
        }
        assert!(Instant::now() < give_up, "{key} never read back as written");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_server_that_ignores_if_match_fails_the_probe_on_if_match() {
    probe_fails_closed(Server::LocalBucket, IgnoredCondition::IfMatch);
}

#[test]
fn the_keeper_renews_against_a_real_server_and_releases_on_stop() {
    keeper_renews_and_releases(Server::Moto);
}

#[test]
fn the_keeper_renews_against_rgw_and_releases_on_stop() {
    keeper_renews_and_releases(Server::Rgw);
}

fn keeper_renews_and_releases(server: Server) {
    let Some(store) = common::store(server) else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(store);
    let prefix = common::unique_prefix("keeper");
    let lease = Lease::acquire(store.clone(), &prefix, LeaseOptions::new(3)).unwrap();
    let key = lease.key().to_string();
    let keeper = Keeper::spawn(lease, KeeperOptions::new()).unwrap();
    for _ in 0..2 {
        match keeper
            .events()
            .recv_timeout(Duration::from_secs(5))
            .unwrap()
        {
            Event::Renewed { latency } => assert!(latency < Duration::from_secs(2)),
            other => panic!("expected a renewal, got {other:?}"),
        }
    }
    assert!(keeper.may_write());
    assert_eq!(keeper.stop().unwrap(), Released::Freed);
    assert!(released(&*store, &key));
}

#[test]
fn fenced_writes_carry_the_epoch_and_refuse_a_second_writer() {
    fenced_writes(Server::Moto);
}

#[test]
fn fenced_writes_carry_the_epoch_and_refuse_a_second_writer_on_rgw() {
    fenced_writes(Server::Rgw);
}

fn fenced_writes(server: Server) {
    let Some(store) = common::store(server) else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(store);
    let prefix = common::unique_prefix("fenced");
    let lease = Arc::new(Lease::acquire(store.clone(), &prefix, LeaseOptions::new(30)).unwrap());
    let writer = FencedWriter::new(lease.clone());
    let segment = format!("{prefix}/seg-1");
    writer.put_new(&segment, b"data").unwrap();
    let object = store.get(&segment, None).unwrap();
    assert!(
        object
            .metadata
            .contains(&(EPOCH_METADATA.to_string(), "1".to_string())),
        "{:?}",
        object.metadata
    );
    let latest = format!("{prefix}/LATEST");
    writer.put_pointer(&latest, b"1").unwrap();
    writer.put_pointer(&latest, b"2").unwrap();
    // A writer that does not fence moves the pointer: no proof of a newer
    // holder, so the next swap reads it and goes on it.
    store
        .put(&latest, b"plain", &PutOptions::new(PutMode::Overwrite))
        .unwrap();
    writer.put_pointer(&latest, b"3").unwrap();
    assert!(!lease.is_lost());
    // A newer holder moves it: the stale writer is superseded.
    let newer = PutOptions::new(PutMode::Overwrite)
        .with_metadata(EPOCH_METADATA, "2")
        .with_metadata(bucket_lease::fence::HOLDER_METADATA, "successor");
    store.put(&latest, b"theirs", &newer).unwrap();
    assert!(matches!(
        writer.put_pointer(&latest, b"4"),
        Err(WriteError::Superseded(_))
    ));
    assert!(lease.is_lost());
    assert_eq!(store.get(&latest, None).unwrap().body, b"theirs");
}

/// A service that honours conditional PUT but ignores `If-Match` on DELETE:
/// moto behind a client-side shim that drops the condition.
#[derive(Debug)]
struct IgnoresDeleteConditions(Arc<dyn Store>);

impl Store for IgnoresDeleteConditions {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.0.get(key, deadline)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        self.0.put(key, body, options)
    }

    fn delete(&self, key: &str, _: &DeleteMode, d: Option<Instant>) -> Result<(), StoreError> {
        self.0.delete(key, &DeleteMode::Unconditional, d)
    }
}

#[test]
fn a_paused_holders_release_never_removes_its_successors_record() {
    let Some(moto) = common::store(Server::Moto) else {
        return;
    };
    paused_release(Arc::new(IgnoresDeleteConditions(Arc::new(moto))));
}

/// The same on RGW, which ignores `If-Match` on DELETE itself.
#[test]
fn a_paused_holders_release_never_removes_its_successors_record_on_rgw() {
    let Some(rgw) = common::store(Server::Rgw) else {
        return;
    };
    paused_release(Arc::new(rgw));
}

fn paused_release(store: Arc<dyn Store>) {
    let prefix = common::unique_prefix("paused-release");
    let a = Lease::acquire(store.clone(), &prefix, LeaseOptions::new(1)).unwrap();
    // A is paused past its TTL; B takes over.
    std::thread::sleep(Duration::from_millis(1100));
    let b = Lease::acquire(store.clone(), &prefix, LeaseOptions::new(30)).unwrap();
    assert_eq!(b.epoch(), a.epoch() + 1);
    // A wakes and releases: B's record stays, and B keeps renewing.
    assert_eq!(
        a.release().unwrap(),
        Released::LeftAlone {
            holder: Some(b.instance_id().into()),
            holder_name: b.holder_name().map(Into::into),
        }
    );
    b.renew().unwrap();
    assert_eq!(
        held_by(Lease::acquire(
            store.clone(),
            &prefix,
            LeaseOptions::new(30)
        )),
        b.instance_id()
    );
    b.release().unwrap();
}

#[test]
fn a_lease_object_over_the_read_cap_is_taken_over_as_unreadable() {
    over_the_read_cap(Server::Moto);
}

#[test]
fn a_lease_object_over_the_read_cap_is_taken_over_as_unreadable_on_rgw() {
    over_the_read_cap(Server::Rgw);
}

fn over_the_read_cap(server: Server) {
    let Some(store) = common::store(server) else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(store);
    let prefix = common::unique_prefix("oversized");
    let key = format!("{prefix}/LEASE");
    let big = vec![b' '; bucket_lease::backends::DEFAULT_MAX_BODY + 1];
    store
        .put(&key, &big, &PutOptions::new(PutMode::Overwrite))
        .unwrap();
    let lease = Lease::acquire(store.clone(), &prefix, LeaseOptions::new(30))
        .expect("an unreadable record is stale, whatever its size");
    assert_eq!(lease.epoch(), 1);
    lease.release().unwrap();
    assert!(released(&*store, &key));
}

/// A TCP proxy on 127.0.0.1 that holds every chunk a client sends for
/// `delay_ms` before passing it on to `upstream`, and counts the
/// connections it accepts in `connections`.
fn delaying_proxy(upstream: &str, delay_ms: Arc<AtomicU64>, connections: Arc<AtomicU64>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let upstream = upstream.trim_start_matches("http://").to_string();
    std::thread::spawn(move || {
        for client in listener.incoming().take(16) {
            let Ok(client) = client else { continue };
            connections.fetch_add(1, Ordering::SeqCst);
            let (upstream, delay_ms) = (upstream.clone(), delay_ms.clone());
            std::thread::spawn(move || {
                let server = TcpStream::connect(upstream).unwrap();
                let (mut from_client, mut to_server) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(n @ 1..) = from_client.read(&mut buf) {
                        std::thread::sleep(Duration::from_millis(delay_ms.load(Ordering::SeqCst)));
                        if to_server.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
                let (mut from_server, mut to_client) = (server, client);
                let _ = std::io::copy(&mut from_server, &mut to_client);
            });
        }
    });
    format!("http://{address}")
}

/// A store on moto through [`delaying_proxy`], with the proxy's knobs.
struct Proxied {
    store: Arc<dyn Store>,
    delay_ms: Arc<AtomicU64>,
    connections: Arc<AtomicU64>,
}

fn moto_behind_a_proxy() -> Option<Proxied> {
    let moto = common::server(Server::Moto)?;
    let (delay_ms, connections) = (Arc::default(), Arc::default());
    let proxy = delaying_proxy(&moto, Arc::clone(&delay_ms), Arc::clone(&connections));
    let store = common::builder(Server::Moto)?
        .endpoint(proxy)
        .build()
        .unwrap();
    Some(Proxied {
        store: Arc::new(store),
        delay_ms,
        connections,
    })
}

#[test]
fn a_slow_upload_is_abandoned_at_the_write_deadline() {
    let Some(Proxied {
        store, delay_ms, ..
    }) = moto_behind_a_proxy()
    else {
        return;
    };
    let prefix = common::unique_prefix("slow");
    // A 3 s TTL: the holder may write for 2 s after the acquire.
    let lease = Arc::new(Lease::acquire(store.clone(), &prefix, LeaseOptions::new(3)).unwrap());
    let deadline = lease.write_deadline().unwrap();
    let writer = FencedWriter::new(lease.clone());
    delay_ms.store(5_000, Ordering::SeqCst);
    let started = Instant::now();
    let err = writer
        .put_new(&format!("{prefix}/slow"), b"late")
        .unwrap_err();
    let gave_up = Instant::now();
    match &err {
        WriteError::Store(e) => assert!(e.is_timeout() && e.may_have_landed(), "{e}"),
        other => panic!("expected a timed-out store error, got {other}"),
    }
    assert!(gave_up >= deadline, "abandoned before the deadline");
    assert!(
        gave_up < deadline + Duration::from_secs(2),
        "abandoned {:?} after the deadline (started {:?} before it)",
        gave_up - deadline,
        deadline.saturating_duration_since(started)
    );
    assert!(!lease.may_write());
    assert!(matches!(
        writer.put_new(&format!("{prefix}/later"), b"x"),
        Err(WriteError::Fenced { .. })
    ));
}

#[test]
fn renewals_reuse_one_kept_alive_connection() {
    let Some(Proxied {
        store, connections, ..
    }) = moto_behind_a_proxy()
    else {
        return;
    };
    let prefix = common::unique_prefix("keep-alive");
    let lease = Lease::acquire(store, &prefix, LeaseOptions::new(30)).unwrap();
    // The probe's four writes go out at once, each on its own connection.
    let acquired = connections.load(Ordering::SeqCst);
    assert!((1..=4).contains(&acquired), "{acquired} connections");
    for _ in 0..10 {
        lease.renew().unwrap();
    }
    lease.release().unwrap();
    assert_eq!(
        connections.load(Ordering::SeqCst),
        acquired,
        "ten renewals and the release on the kept connections"
    );
}

#[test]
fn the_keeper_reports_the_fence_when_the_network_black_holes_a_renewal() {
    let Some(Proxied {
        store, delay_ms, ..
    }) = moto_behind_a_proxy()
    else {
        return;
    };
    let prefix = common::unique_prefix("black-hole");
    // A 3 s TTL: renewal due after 1 s, write deadline 2 s after the acquire.
    let lease = Lease::acquire(store.clone(), &prefix, LeaseOptions::new(3)).unwrap();
    let deadline = lease.write_deadline().unwrap();
    let keeper =
        Keeper::spawn(lease, KeeperOptions::new().release_timeout(Duration::ZERO)).unwrap();
    // From now on nothing reaches the server in time: the renewal's
    // request times out at the write deadline.
    delay_ms.store(60_000, Ordering::SeqCst);
    let mut seen = Vec::new();
    let fenced_at = loop {
        match keeper.events().recv_timeout(Duration::from_secs(10)) {
            Ok(Event::Fenced) => break Instant::now(),
            Ok(event) => seen.push(event),
            Err(_) => panic!("no Fenced event within 10 s; saw {seen:?}"),
        }
    };
    assert!(fenced_at >= deadline, "fenced before the deadline");
    assert!(!keeper.may_write());
    assert!(
        seen.iter()
            .any(|e| matches!(e, Event::RenewalFailed { .. })),
        "{seen:?}"
    );
    drop(keeper);
}

/// Contenders that start together on RGW, each a fresh store (so each
/// learns the spelling in its own probe): exactly one takes the lease and
/// every other is told it is held, whatever RGW answered to the writes
/// that lost (RGW answers a conditional PUT that lost a race inside the
/// service `500`, which the acquire decides by reading). Five rounds, each
/// on a prefix of its own: a race to create the record, then, once it is
/// released, a race to take it over (updates on one ETag).
#[test]
fn contenders_that_start_together_on_rgw_get_one_holder() {
    if common::server(Server::Rgw).is_none() {
        return;
    }
    for round in 0..5 {
        let prefix = common::unique_prefix("together");
        for (race, epoch) in [("create", 1), ("takeover", 2)] {
            let winner = one_winner_of_four(&prefix, &format!("round {round}, {race}"));
            assert_eq!(winner.epoch(), epoch, "round {round}, {race}");
            assert_eq!(winner.release().unwrap(), Released::Freed);
        }
    }
}

/// Four contenders on RGW, each with a fresh store, acquire `prefix` at
/// once: the one that won (every other told it is held by it).
fn one_winner_of_four(prefix: &str, context: &str) -> Lease {
    let barrier = std::sync::Barrier::new(4);
    let outcomes: Vec<Result<Lease, LeaseError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let store: Arc<dyn Store> = Arc::new(common::store(Server::Rgw).unwrap());
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    Lease::acquire(store, prefix, LeaseOptions::new(30))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut winners = Vec::new();
    let mut held = Vec::new();
    for outcome in outcomes {
        match outcome {
            Ok(lease) => winners.push(lease),
            Err(LeaseError::Held { holder, .. }) => held.push(holder),
            Err(e) => panic!("{context}: a contender failed: {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "{context}: held by {held:?}");
    let winner = winners.pop().unwrap();
    assert!(
        held.iter().all(|h| h == winner.instance_id()),
        "{context}: {held:?}"
    );
    winner
}
