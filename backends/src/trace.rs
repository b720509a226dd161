//! What each HTTP request met, for whoever measures: `bucket-lease bench`
//! asks, around one renewal, which requests went out, on a kept or a new
//! connection (and then how long its TCP connect and TLS handshake took),
//! what each was answered, and what the service's `Date` said.
//!
//! What it promises:
//!
//! - **Nothing is recorded unless asked.** [`collect`] records the requests
//!   its closure sends on the calling thread (the stores send on the
//!   caller's thread), and only those; outside it, each request costs one
//!   thread-local check.
//! - **One [`RequestTrace`] per request sent**, retries included, in the
//!   order they went out. A request the store refused before sending (its
//!   deadline already past, no credentials) leaves none.
//! - A store without HTTP (a directory, the memory store) records nothing.

use std::cell::RefCell;
use std::time::{Duration, Instant, SystemTime};

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The service answered with this status.
    Status(u16),
    /// No answer before the request's deadline.
    Timeout,
    /// None of it was sent: the lookup, the connection or the TLS handshake
    /// failed first.
    NotSent,
    /// Another failure without a status (a connection cut mid-answer).
    Failed,
}

/// The connection a request went out on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionUse {
    /// One kept from an earlier request.
    Kept,
    /// One opened for it.
    New {
        /// The TCP connect (to the proxy, through one).
        connect: Duration,
        /// The TLS handshake, over `https://`.
        tls: Option<Duration>,
    },
}

/// One request, as it was met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestTrace {
    /// `GET`, `PUT`, `HEAD`, …
    pub method: &'static str,
    /// How it ended.
    pub outcome: Outcome,
    /// Its connection.
    pub connection: ConnectionUse,
    /// When it began (before the connection was looked for), on the
    /// monotonic clock and on the wall clock.
    pub started: Instant,
    /// See `started`.
    pub started_wall: SystemTime,
    /// When its answer's head arrived, or it failed.
    pub ended: Instant,
    /// See `ended`.
    pub ended_wall: SystemTime,
    /// The answer's `Date`, when it had one that parses.
    pub date: Option<SystemTime>,
}

/// What the calling thread is recording: `None` when nobody asked.
#[derive(Default)]
struct Recording {
    traces: Vec<RequestTrace>,
    /// Set by the connectors during the request in flight.
    #[cfg(http)]
    connect: Option<Duration>,
    #[cfg(http)]
    tls: Option<Duration>,
}

thread_local! {
    static RECORDING: RefCell<Option<Recording>> = const { RefCell::new(None) };
}

/// Run `f`, and return what it returned with the requests it sent on this
/// thread. Nested calls give the inner call its own requests, and leave
/// the outer call's as they were.
pub fn collect<R>(f: impl FnOnce() -> R) -> (R, Vec<RequestTrace>) {
    let outer = RECORDING.with(|r| r.replace(Some(Recording::default())));
    // Restored even if `f` panics.
    struct Restore(Option<Option<Recording>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(outer) = self.0.take() {
                RECORDING.with(|r| *r.borrow_mut() = outer);
            }
        }
    }
    let mut restore = Restore(Some(outer));
    let value = f();
    let ours = RECORDING.with(|r| r.replace(restore.0.take().flatten()));
    (value, ours.map(|r| r.traces).unwrap_or_default())
}

/// A request about to look for its connection: finish it with
/// [`Pending::end`]. Cheap when nothing records.
#[cfg(http)]
pub(crate) fn begin(method: &'static str) -> Option<Pending> {
    let recording = RECORDING.with(|r| {
        let mut r = r.borrow_mut();
        let r = r.as_mut()?;
        r.connect = None;
        r.tls = None;
        Some(())
    });
    recording.map(|()| Pending {
        method,
        started: Instant::now(),
        started_wall: SystemTime::now(),
    })
}

/// A request in flight, recorded once it ends.
#[cfg(http)]
pub(crate) struct Pending {
    method: &'static str,
    started: Instant,
    started_wall: SystemTime,
}

#[cfg(http)]
impl Pending {
    /// The request ended with `outcome`; its answer's `Date` said `date`.
    pub(crate) fn end(self, outcome: Outcome, date: Option<SystemTime>) {
        let (ended, ended_wall) = (Instant::now(), SystemTime::now());
        RECORDING.with(|r| {
            let mut r = r.borrow_mut();
            let Some(r) = r.as_mut() else { return };
            let connection = match r.connect.take() {
                Some(connect) => ConnectionUse::New {
                    connect,
                    tls: r.tls.take(),
                },
                None => ConnectionUse::Kept,
            };
            r.traces.push(RequestTrace {
                method: self.method,
                outcome,
                connection,
                started: self.started,
                started_wall: self.started_wall,
                ended,
                ended_wall,
                date,
            });
        });
    }
}

/// A TCP connection opened in `took`, for the request in flight.
#[cfg(http)]
pub(crate) fn connected(took: Duration) {
    RECORDING.with(|r| {
        if let Some(r) = r.borrow_mut().as_mut() {
            r.connect = Some(took);
        }
    });
}

/// A TLS handshake done in `took`, for the request in flight.
#[cfg(http)]
pub(crate) fn handshook(took: Duration) {
    RECORDING.with(|r| {
        if let Some(r) = r.borrow_mut().as_mut() {
            r.tls = Some(took);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_only_inside_collect_and_nests() {
        // Outside: nothing is kept.
        #[cfg(http)]
        assert!(begin("GET").is_none());
        let ((), outer) = collect(|| {
            #[cfg(http)]
            {
                let p = begin("PUT").unwrap();
                connected(Duration::from_millis(3));
                handshook(Duration::from_millis(5));
                p.end(Outcome::Status(200), None);
            }
            let ((), inner) = collect(|| {
                #[cfg(http)]
                begin("HEAD").unwrap().end(Outcome::Timeout, None);
            });
            #[cfg(http)]
            {
                assert_eq!(inner.len(), 1);
                assert_eq!(inner[0].connection, ConnectionUse::Kept);
                begin("GET").unwrap().end(Outcome::Status(404), None);
            }
            #[cfg(not(http))]
            assert!(inner.is_empty());
        });
        #[cfg(http)]
        {
            let methods: Vec<_> = outer.iter().map(|t| t.method).collect();
            assert_eq!(methods, ["PUT", "GET"]);
            assert_eq!(
                outer[0].connection,
                ConnectionUse::New {
                    connect: Duration::from_millis(3),
                    tls: Some(Duration::from_millis(5))
                }
            );
            assert_eq!(outer[1].connection, ConnectionUse::Kept);
        }
        #[cfg(not(http))]
        assert!(outer.is_empty());
    }
}
