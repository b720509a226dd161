//! Keeping the next renewal on a warm connection.
//!
//! A renewal comes once every third of a TTL. In between, the service or a
//! load balancer in front of it may close the connection the client kept
//! (nginx after 75 s idle, an AWS ALB after 60 s, some S3-compatible
//! servers after 5 s), and the renewal then pays a TCP connect and a TLS
//! handshake, two round trips or more, before its own.
//!
//! [`IdleWatch`] learns how long the store's connections stay usable: a
//! request that had to open a connection when none of the store's other
//! requests was in flight, after the store had been idle for at least
//! [`MIN_SIGHTING`], shows that a connection idle that long was gone.
//! [`IdleWatch::needs_warming`] then says, before a renewal, whether its
//! connection would have been idle that long by the time it is due; the
//! store's `warm_up` sends one HEAD of the record's key then, which either
//! refreshes the kept connection (the service's idle timer starts again)
//! or opens a new one, so the renewal finds one open.
//!
//! What it promises: a store whose connections were never seen closed
//! while idle sends no warm-up at all; otherwise at most one HEAD per
//! renewal, bounded by the renewal's due time, and never a write.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The shortest idle time taken as evidence: a connection found closed
/// sooner was closed for another reason (a service restart, a cap on
/// requests per connection), and warming for it would send a HEAD before
/// every renewal for nothing.
pub(crate) const MIN_SIGHTING: Duration = Duration::from_secs(1);

/// How early, as a share of the idle time seen, a renewal's connection is
/// taken for gone: a service that closes after exactly the idle time seen
/// may close a little earlier next time.
const MARGIN: f64 = 0.9;

/// See the module.
#[derive(Debug, Default)]
pub(crate) struct IdleWatch {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// When the store's last request ended.
    last_done: Option<Instant>,
    /// Requests in flight now.
    in_flight: u32,
    /// The shortest idle time after which a connection was found gone.
    gone_after: Option<Duration>,
}

/// A request in flight, from [`IdleWatch::begin`].
pub(crate) struct Begun {
    at: Instant,
    /// No other request of the store was in flight when it began.
    alone: bool,
}

impl IdleWatch {
    /// A request begins, before it looks for a connection.
    pub(crate) fn begin(&self) -> Begun {
        let mut s = self.lock();
        let alone = s.in_flight == 0;
        s.in_flight += 1;
        Begun {
            at: Instant::now(),
            alone,
        }
    }

    /// The request from `begun` ended; `opened` says whether it opened a
    /// connection.
    pub(crate) fn end(&self, begun: Begun, opened: bool) {
        let mut s = self.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
        if opened && begun.alone {
            if let Some(idle) = s.last_done.map(|d| begun.at.saturating_duration_since(d)) {
                if idle >= MIN_SIGHTING {
                    s.gone_after = Some(s.gone_after.map_or(idle, |g| g.min(idle)));
                }
            }
        }
        let now = Instant::now();
        s.last_done = Some(s.last_done.map_or(now, |d| d.max(now)));
    }

    /// Whether a request due at `due` would likely find the kept
    /// connection gone, by what was seen so far.
    pub(crate) fn needs_warming(&self, due: Instant) -> bool {
        let s = self.lock();
        match (s.last_done, s.gone_after) {
            (Some(last), Some(gone)) => {
                s.in_flight == 0 && due.saturating_duration_since(last) >= gone.mul_f64(MARGIN)
            }
            _ => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Opened after a long idle and alone: learned; a renewal due after as
    /// long warms, one due sooner does not.
    #[test]
    fn learns_from_a_connection_found_gone_while_idle() {
        let watch = IdleWatch::default();
        // Never seen gone: never warms.
        let first = watch.begin();
        watch.end(first, true);
        assert!(!watch.needs_warming(Instant::now() + Duration::from_secs(3600)));
        // Found gone after 2 s idle (made so by moving `last_done` back).
        watch.lock().last_done = Some(Instant::now() - Duration::from_secs(2));
        let b = watch.begin();
        watch.end(b, true);
        let gone = watch.lock().gone_after.unwrap();
        assert!(gone >= Duration::from_secs(2) && gone < Duration::from_secs(3));
        let now = Instant::now();
        assert!(watch.needs_warming(now + Duration::from_secs(2)));
        assert!(!watch.needs_warming(now + Duration::from_millis(500)));
    }

    /// Neither a connection opened beside another request in flight, nor
    /// one found closed after a short idle, nor a kept one, teaches
    /// anything.
    #[test]
    fn ignores_what_is_no_evidence_of_an_idle_close() {
        let watch = IdleWatch::default();
        let a = watch.begin();
        watch.end(a, false);
        watch.lock().last_done = Some(Instant::now() - Duration::from_secs(5));
        let busy = watch.begin();
        let beside = watch.begin();
        watch.end(beside, true);
        watch.end(busy, false);
        assert_eq!(watch.lock().gone_after, None);
        let short = watch.begin();
        watch.end(short, true);
        assert_eq!(
            watch.lock().gone_after,
            None,
            "{MIN_SIGHTING:?} idle at most"
        );
        watch.lock().last_done = Some(Instant::now() - Duration::from_secs(5));
        let kept = watch.begin();
        watch.end(kept, false);
        assert_eq!(watch.lock().gone_after, None);
    }
}
