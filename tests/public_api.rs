//! What a program depending on `bucket-lease` alone can name: the events'
//! channel (and `select!`) through `bucket_lease::channel`, and spans of
//! time as `std::time::Duration`, with no crossbeam or `time` dependency
//! of its own (this crate has neither as a dev-dependency).

use bucket_lease::channel::{select, Receiver};
use bucket_lease::inspect::{inspect, Expiry};
use bucket_lease::memory::MemoryStore;
use bucket_lease::KeptLease;
use bucket_lease::{Contender, Event, Keeper, KeeperOptions, LeaseOptions, SystemClock};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

#[test]
fn events_are_selected_on_through_the_reexported_channel() {
    let store = Arc::new(MemoryStore::new());
    let lease = Contender::new(store.clone(), "api", LeaseOptions::new(3))
        .try_acquire()
        .unwrap();
    let keeper = Keeper::spawn(lease, KeeperOptions::new()).unwrap();
    let events: &Receiver<Event> = keeper.events();
    let timeout = bucket_lease::channel::after(Duration::from_secs(10));
    select! {
        recv(events) -> event => assert!(
            matches!(event, Ok(Event::Renewed { .. })),
            "{event:?}"
        ),
        recv(timeout) -> _ => panic!("no renewal within 10 s of a 3 s lease"),
    }

    let seen = inspect(&*store, "api", &SystemClock).unwrap().unwrap();
    match seen.expires_in() {
        Some(Expiry::In(left)) => assert!(left <= Duration::from_secs(3), "{left:?}"),
        other => panic!("a fresh record expires in the future, got {other:?}"),
    }
    let renewed: SystemTime = seen.record.as_ref().unwrap().renewed().unwrap();
    assert!(renewed <= SystemTime::now());
    keeper.stop().unwrap();
}
