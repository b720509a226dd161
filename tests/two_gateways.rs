//! One store behind two gateways (issue 30): a distributed store decides a
//! conditional write below its gateways, so contenders that reach the same
//! Ceph RADOS cluster through two `radosgw` processes
//! (`scripts/test-servers.sh` starts both, `BUCKET_LEASE_TEST_RGW_URL` and
//! `BUCKET_LEASE_TEST_RGW2_URL`) must still see one holder:
//!
//! - contenders that start together, half on each gateway, each with a
//!   store of its own: one takes the lease, every other is told it is held
//!   by that one (or fails on a store error; never a second lease); once it
//!   is released, one of the others takes it over, one epoch up;
//! - below the lease, the store's two conditional writes: concurrent
//!   create-only PUTs of one key, and concurrent PUTs `If-Match` one ETag,
//!   through both gateways: exactly one lands, and both gateways read it.
//!
//! Without the servers' variables each test prints a note and passes,
//! unless `BUCKET_LEASE_REQUIRE_SERVERS=1`. `cli_chaos.rs` runs the command
//! across both gateways through fault proxies.
#![cfg(any(feature = "s3", feature = "r2", feature = "minio"))]

#[path = "../backends/tests/common/mod.rs"]
mod common;

use bucket_lease::{
    store::PutMode, store::PutOptions, store::Version, Contender, Lease, LeaseError, LeaseOptions,
    Released, Store, StoreError,
};
use common::Server;
use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};

/// Rounds of each race.
const ROUNDS: usize = 30;
/// Contenders in each race, half on each gateway.
const CONTENDERS: usize = 6;

/// The gateway of contender `i`: the first for even `i`, the second for odd.
fn gateway(i: usize) -> Server {
    if i.is_multiple_of(2) {
        Server::Rgw
    } else {
        Server::Rgw2
    }
}

/// Whether both gateways are configured (a note and `false` otherwise, a
/// failure under `BUCKET_LEASE_REQUIRE_SERVERS=1`).
fn both_gateways() -> bool {
    common::server(Server::Rgw).is_some() && common::server(Server::Rgw2).is_some()
}

/// A fresh store on `server`; it sends ETags bare in `If-Match` from the
/// start (RGW refuses them quoted), so each conditional write is one PUT.
fn bare_store(server: Server) -> Arc<dyn Store> {
    let store = common::builder(server)
        .expect("the gateway is configured")
        .unquoted_etags(true)
        .build()
        .expect("a valid test store");
    Arc::new(store)
}

/// How the losers of the races failed, by kind, for the summary.
#[derive(Default)]
struct Tally(BTreeMap<String, usize>);

impl Tally {
    fn add(&mut self, what: impl Into<String>) {
        *self.0.entry(what.into()).or_insert(0) += 1;
    }
}

/// Run `attempt(i)` for each contender `i` in a thread of its own, all
/// released at once by a barrier; the outcomes in contender order.
fn at_once<T: Send>(n: usize, attempt: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let barrier = Barrier::new(n);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (barrier, attempt) = (&barrier, &attempt);
                scope.spawn(move || {
                    barrier.wait();
                    attempt(i)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The one lease among `outcomes`; every other outcome is `Held` by its
/// holder or a store error (counted in `tally`). The index of the winner
/// and its lease.
fn one_holder(
    outcomes: Vec<Result<Lease, LeaseError>>,
    context: &str,
    tally: &mut Tally,
) -> (usize, Lease) {
    let mut winners = Vec::new();
    let mut held = Vec::new();
    for (i, outcome) in outcomes.into_iter().enumerate() {
        match outcome {
            Ok(lease) => winners.push((i, lease)),
            Err(LeaseError::Held { holder, .. }) => {
                tally.add("held");
                held.push(holder);
            }
            Err(LeaseError::Store(e)) => tally.add(format!("store error: {:?}", e.kind())),
            Err(e) => panic!("{context}: contender {i} ({:?}) failed: {e}", gateway(i)),
        }
    }
    let holders: Vec<String> = winners
        .iter()
        .map(|(i, l)| {
            format!(
                "{} on {:?} (epoch {})",
                l.instance_id(),
                gateway(*i),
                l.epoch()
            )
        })
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "{context}: holders {holders:?}, the others told held by {held:?}"
    );
    let (i, winner) = winners.pop().unwrap();
    assert!(
        held.iter().all(|h| h == winner.instance_id()),
        "{context}: held by {held:?}, but {} took it",
        winner.instance_id()
    );
    (i, winner)
}

/// `ROUNDS` rounds, each on a fresh prefix: `CONTENDERS` contenders, each
/// with a fresh store (so each runs its own first probe), half on each
/// gateway, acquire at once: one holder (epoch 1). It releases, and the
/// others, the same contenders, race to take it over: one holder, epoch 2.
#[test]
fn contenders_on_two_gateways_get_one_holder() {
    if !both_gateways() {
        return;
    }
    let mut tally = Tally::default();
    let mut wins = [0usize; 2];
    for round in 0..ROUNDS {
        let prefix = common::unique_prefix("two-gateways");
        let contenders: Vec<std::sync::Mutex<Contender>> = (0..CONTENDERS)
            .map(|i| {
                let store: Arc<dyn Store> = Arc::new(common::store(gateway(i)).unwrap());
                std::sync::Mutex::new(Contender::new(store, &prefix, LeaseOptions::new(30)))
            })
            .collect();
        let context = format!("round {round}, create");
        let outcomes = at_once(CONTENDERS, |i| contenders[i].lock().unwrap().try_acquire());
        let (first, lease) = one_holder(outcomes, &context, &mut tally);
        assert_eq!(lease.epoch(), 1, "{context}");
        wins[first % 2] += 1;
        assert_eq!(lease.release().unwrap(), Released::Freed, "{context}");

        let context = format!("round {round}, takeover");
        let others: Vec<usize> = (0..CONTENDERS).filter(|&i| i != first).collect();
        let outcomes = at_once(others.len(), |j| {
            contenders[others[j]].lock().unwrap().try_acquire()
        });
        let (j, next) = one_holder(outcomes, &context, &mut tally);
        assert_eq!(next.epoch(), 2, "{context}");
        wins[others[j] % 2] += 1;
        assert_eq!(next.release().unwrap(), Released::Freed, "{context}");
    }
    eprintln!(
        "two gateways: {ROUNDS} rounds of {CONTENDERS} contenders, each race one holder; \
         won on the first gateway {} times, on the second {}; the others: {:?}",
        wins[0], wins[1], tally.0
    );
}

/// The writers' outcomes, in writer order: the version written or the error.
type Writes = Vec<Result<Version, StoreError>>;

/// The one write among `outcomes` that landed (its index); the object
/// reads as it wrote through both gateways. The losers' errors counted.
fn one_write_landed(
    outcomes: Writes,
    key: &str,
    body: impl Fn(usize) -> Vec<u8>,
    context: &str,
    tally: &mut Tally,
) -> usize {
    let mut landed = Vec::new();
    for (i, outcome) in outcomes.into_iter().enumerate() {
        match outcome {
            Ok(version) => landed.push((i, version)),
            Err(e) => tally.add(format!("{:?}", e.kind())),
        }
    }
    assert_eq!(
        landed.len(),
        1,
        "{context}: writes that landed: {:?}",
        landed
            .iter()
            .map(|(i, v)| format!("writer {i} on {:?}: {v:?}", gateway(*i)))
            .collect::<Vec<_>>()
    );
    let (winner, version) = landed.pop().unwrap();
    for server in [Server::Rgw, Server::Rgw2] {
        let object = bare_store(server).get(key, None).unwrap();
        assert_eq!(object.body, body(winner), "{context}: read on {server:?}");
        assert_eq!(
            object.version.etag, version.etag,
            "{context}: read on {server:?}"
        );
    }
    winner
}

/// `ROUNDS` rounds: `CONTENDERS` writers, half on each gateway, each a
/// store of its own, create one fresh key at once (`If-None-Match: *`):
/// exactly one lands.
#[test]
fn create_only_puts_through_two_gateways_land_once() {
    if !both_gateways() {
        return;
    }
    let mut tally = Tally::default();
    for round in 0..ROUNDS {
        let key = format!("{}/LEASE", common::unique_prefix("two-gateways-create"));
        let stores: Vec<_> = (0..CONTENDERS).map(|i| bare_store(gateway(i))).collect();
        let body = |i: usize| format!("writer {i}").into_bytes();
        let outcomes = at_once(CONTENDERS, |i| {
            stores[i].put(&key, &body(i), &PutOptions::new(PutMode::Create))
        });
        one_write_landed(outcomes, &key, body, &format!("round {round}"), &mut tally);
    }
    eprintln!(
        "two gateways: {ROUNDS} rounds of {CONTENDERS} create-only PUTs, one landed each; \
         the others: {:?}",
        tally.0
    );
}

/// `ROUNDS` rounds: one key written, then `CONTENDERS` writers, half on
/// each gateway, each a store of its own, replace it `If-Match` its one
/// ETag at once: exactly one lands.
#[test]
fn puts_if_match_one_etag_through_two_gateways_land_once() {
    if !both_gateways() {
        return;
    }
    let mut tally = Tally::default();
    for round in 0..ROUNDS {
        let key = format!("{}/LEASE", common::unique_prefix("two-gateways-update"));
        let stores: Vec<_> = (0..CONTENDERS).map(|i| bare_store(gateway(i))).collect();
        let first = stores[round % CONTENDERS]
            .put(&key, b"first", &PutOptions::new(PutMode::Create))
            .unwrap();
        let body = |i: usize| format!("writer {i}").into_bytes();
        let outcomes = at_once(CONTENDERS, |i| {
            let update = PutOptions::new(PutMode::Update(first.clone()));
            stores[i].put(&key, &body(i), &update)
        });
        one_write_landed(outcomes, &key, body, &format!("round {round}"), &mut tally);
    }
    eprintln!(
        "two gateways: {ROUNDS} rounds of {CONTENDERS} PUTs If-Match one ETag, one landed each; \
         the others: {:?}",
        tally.0
    );
}
