//! A renewal on a warm connection: a service (here a proxy in front of
//! moto) that closes connections idle for 1.5 s, and a keeper renewing
//! every 2 s. Once the store has seen one of its connections found closed
//! after an idle time, the keeper's warm-up before each renewal opens (or
//! refreshes) one, so the renewal itself never waits for a new connection.
//! The proxy's log says, for each request, which client connection it came
//! on and the how-manieth of that connection it was.

#![cfg(feature = "s3")]

mod cli_common;
mod s3_proxy;

use bucket_lease::KeptLease;
use bucket_lease::{Event, Keeper, KeeperOptions, Lease, LeaseOptions};
use cli_common::Target;
use s3_proxy::FaultProxy;
use std::time::{Duration, Instant};

#[test]
fn renewals_after_the_first_go_out_on_a_connection_already_open() {
    let Some(moto) = Target::moto("warm-renewals") else {
        return;
    };
    let upstream = std::env::var("BUCKET_LEASE_TEST_MOTO_URL").unwrap();
    let proxy = FaultProxy::start(&upstream);
    proxy.close_idle(Some(Duration::from_millis(1500)));
    let t = moto.through(&proxy.endpoint());
    let url = t.url("warm");
    let (store, prefix) = t.store(&url);
    let lease = Lease::acquire(store, &prefix, LeaseOptions::new(6)).unwrap();
    let key = lease.key().to_string();
    let kept_from = Instant::now();
    let keeper = Keeper::spawn(lease, KeeperOptions::new()).unwrap();
    let mut renewed = 0;
    while renewed < 4 {
        match keeper.events().recv_timeout(Duration::from_secs(10)) {
            Ok(Event::Renewed { .. }) => renewed += 1,
            other => panic!("expected renewals, got {other:?}"),
        }
    }
    keeper.stop().unwrap();
    let log = proxy.log();
    let renewals: Vec<_> = log
        .iter()
        .filter(|s| s.method == "PUT" && s.path.ends_with(&key) && s.arrived > kept_from)
        .take(4)
        .collect();
    assert_eq!(renewals.len(), 4, "{log:#?}");
    // The first renewal finds the kept connection closed: what teaches the
    // store. Each later one comes on a connection that carried the
    // warm-up's HEAD first.
    for renewal in &renewals[1..] {
        assert!(
            renewal.nth > 0,
            "a renewal opened its own connection: {renewal:?}\n{log:#?}"
        );
        let before = log
            .iter()
            .find(|s| s.connection == renewal.connection && s.nth == renewal.nth - 1)
            .unwrap();
        assert_eq!(before.method, "HEAD", "{log:#?}");
    }
    // The proxy did close idle connections: without the warm-ups, each
    // renewal would have been the first request of its connection.
    assert!(renewals[0].nth == 0, "{log:#?}");
}
