//! Time as an input: the monotonic and the wall clock the lease reads.
//!
//! Every timing rule of the lease (freshness, the self-fence, the renewal
//! schedule, how long a suspect record has sat unchanged) reads time only
//! through a [`Clock`]. Programs use [`SystemClock`]; tests use
//! [`TestClock`], which moves only when told to, so no test has to sleep to
//! check a timing rule, and can step the wall clock back or forward alone to
//! model an NTP correction.

use crossbeam_channel::{Receiver, Sender};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

/// A source of monotonic and wall time, and of waits on the monotonic clock.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The monotonic clock: never steps, never goes back.
    fn now(&self) -> Instant;

    /// The wall clock: comparable across machines, but may step either way.
    fn wall(&self) -> SystemTime;

    /// Block the calling thread for `duration` of this clock's time.
    fn sleep(&self, duration: Duration);

    /// A channel that receives one message once the monotonic clock reaches
    /// `at` (at once if it already has). For use in `select!` beside other
    /// channels.
    fn timer(&self, at: Instant) -> Receiver<Instant>;

    /// `base` scaled by a random factor between one half and three halves:
    /// the pause before a retry, so that contenders that failed together do
    /// not retry together. The default draws from the operating system; a
    /// simulation draws from its seed, so that one seed replays one run.
    fn jitter(&self, base: Duration) -> Duration {
        jittered(base)
    }
}

/// `base` scaled by a random factor between one half and three halves,
/// drawn from the operating system.
pub fn jittered(base: Duration) -> Duration {
    let mut bytes = [0u8; 2];
    // Without randomness the pause is merely not jittered.
    let _ = getrandom::fill(&mut bytes);
    let permille = 500 + u32::from(u16::from_le_bytes(bytes)) % 1000;
    base * permille / 1000
}

/// The pause, before jitter, after the `failures`-th transient failure of
/// a request: 50 ms, then 100 ms, doubling (capped at 3.2 s). The HTTP
/// client's retries and the lease's reads after a transient write failure
/// pause alike.
pub fn transient_backoff(failures: u32) -> Duration {
    doubling_pause(
        Duration::from_millis(50),
        failures,
        Duration::from_millis(3200),
    )
}

/// The most doublings of a [`doubling_pause`]: from the 16th failure on the
/// pause stays at `first` × 2^15 (before its cap).
pub const MAX_DOUBLINGS: u32 = 15;

/// The pause, before jitter, after the `failures`-th failure in a row of a
/// retried step (a renewal, a held set's attempt): `first`, doubled with
/// each further failure, never more than `cap`. The doubling stops after
/// [`MAX_DOUBLINGS`] (the 16th failure), so a long streak neither overflows
/// nor grows past `first` × 2^15: a 10 ms first pause under a one-hour cap
/// reaches about 328 s and stays there. `failures` 0 is taken as the
/// first. The keeper's and the pool's renewals (`RenewalSchedule`), the
/// held set's attempts, a request's transient retries
/// ([`transient_backoff`]), a write's conflict retries and the HTTP
/// stores' credential refreshes pause by it: one rule.
pub fn doubling_pause(first: Duration, failures: u32, cap: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(MAX_DOUBLINGS);
    first.saturating_mul(1 << doublings).min(cap)
}

/// The operating system's clocks.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }

    fn timer(&self, at: Instant) -> Receiver<Instant> {
        crossbeam_channel::at(at)
    }
}

/// The clock every lease uses unless told otherwise: one shared value, so
/// that a lease on it allocates nothing for its clock (a pool keeps
/// thousands).
pub fn system_clock() -> Arc<dyn Clock> {
    static SYSTEM: std::sync::OnceLock<Arc<dyn Clock>> = std::sync::OnceLock::new();
    Arc::clone(SYSTEM.get_or_init(|| Arc::new(SystemClock)))
}

/// A clock that moves only when a test moves it.
///
/// [`advance`](TestClock::advance) moves both clocks together;
/// [`step_wall`](TestClock::step_wall) moves only the wall clock, either way.
/// [`sleep`](Clock::sleep) advances the clock by the time slept, so code that
/// waits finishes at once. Clones share one time.
#[derive(Clone)]
pub struct TestClock {
    inner: Arc<Mutex<TestTime>>,
}

struct TestTime {
    monotonic: Instant,
    wall: SystemTime,
    timers: Vec<(Instant, Sender<Instant>)>,
}

impl TestClock {
    /// A clock whose wall time starts at `wall`.
    pub fn starting_at(wall: SystemTime) -> Self {
        TestClock {
            inner: Arc::new(Mutex::new(TestTime {
                monotonic: Instant::now(),
                wall,
                timers: Vec::new(),
            })),
        }
    }

    /// A clock whose wall time starts at the real time now.
    pub fn new() -> Self {
        Self::starting_at(SystemTime::now())
    }

    /// Move both clocks forward by `by`, firing every timer that comes due.
    pub fn advance(&self, by: Duration) {
        let mut t = self.lock();
        t.monotonic += by;
        t.wall += by;
        let now = t.monotonic;
        t.timers.retain(|(at, tx)| {
            if *at <= now {
                let _ = tx.try_send(now);
                false
            } else {
                true
            }
        });
    }

    /// Step the wall clock alone: forward by `by` when `forward`, else back.
    /// The monotonic clock does not move.
    pub fn step_wall(&self, by: Duration, forward: bool) {
        let mut t = self.lock();
        t.wall = if forward { t.wall + by } else { t.wall - by };
    }

    /// How many timers are waiting to fire: lets a test wait until a thread
    /// under test has gone to sleep before it advances the clock.
    pub fn pending_timers(&self) -> usize {
        self.lock().timers.len()
    }

    fn lock(&self) -> MutexGuard<'_, TestTime> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for TestClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for TestClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.lock();
        f.debug_struct("TestClock")
            .field("wall", &t.wall)
            .field("pending_timers", &t.timers.len())
            .finish()
    }
}

impl Clock for TestClock {
    fn now(&self) -> Instant {
        self.lock().monotonic
    }

    fn wall(&self) -> SystemTime {
        self.lock().wall
    }

    fn sleep(&self, duration: Duration) {
        self.advance(duration);
    }

    fn timer(&self, at: Instant) -> Receiver<Instant> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let mut t = self.lock();
        if at <= t.monotonic {
            let _ = tx.try_send(t.monotonic);
        } else {
            t.timers.push((at, tx));
        }
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_moves_both_clocks_and_fires_due_timers_only() {
        let clock = TestClock::new();
        let (m0, w0) = (clock.now(), clock.wall());
        let soon = clock.timer(m0 + Duration::from_secs(5));
        let later = clock.timer(m0 + Duration::from_secs(50));
        let past = clock.timer(m0);
        assert!(past.try_recv().is_ok(), "a timer already due fires at once");
        clock.advance(Duration::from_secs(5));
        assert_eq!(clock.now() - m0, Duration::from_secs(5));
        assert_eq!(
            clock.wall().duration_since(w0).unwrap(),
            Duration::from_secs(5)
        );
        assert!(soon.try_recv().is_ok());
        assert!(later.try_recv().is_err());
        assert_eq!(clock.pending_timers(), 1);
    }

    /// A request's transient retries pause by the one rule, as they paused
    /// before it: 50 ms, doubling, 3.2 s from the 7th failure on.
    #[test]
    fn a_transient_retry_pauses_as_it_did() {
        for failures in [0, 1, 2, 3, 6, 7, 8, 16, 17, 100, u32::MAX] {
            let before = Duration::from_millis(50u64 << failures.saturating_sub(1).min(6));
            assert_eq!(transient_backoff(failures), before, "failure {failures}");
        }
    }

    #[test]
    fn a_doubling_pause_doubles_from_its_first_and_saturates() {
        let ms = Duration::from_millis;
        let hour = Duration::from_secs(3600);
        assert_eq!(doubling_pause(ms(200), 0, hour), ms(200));
        assert_eq!(doubling_pause(ms(200), 1, hour), ms(200));
        assert_eq!(doubling_pause(ms(200), 2, hour), ms(400));
        assert_eq!(doubling_pause(ms(200), 3, hour), ms(800));
        // The 16th failure doubles for the last time; none after it.
        let top = ms(10) * (1 << 15);
        assert_eq!(doubling_pause(ms(10), 15, hour), top / 2);
        for failures in [16, 17, 18, 32, 1000, u32::MAX] {
            assert_eq!(
                doubling_pause(ms(10), failures, hour),
                top,
                "failure {failures}"
            );
        }
        // A held set's 10 ms pause under a one-hour TTL: about 328 s, not
        // 655 s, however long the streak.
        assert_eq!(doubling_pause(ms(10), u32::MAX, hour).as_secs(), 327);
        // The cap, and no overflow with the longest first pause.
        assert_eq!(
            doubling_pause(ms(200), 40, Duration::from_secs(10)),
            Duration::from_secs(10)
        );
        assert_eq!(
            doubling_pause(Duration::MAX, u32::MAX, Duration::MAX),
            Duration::MAX
        );
        assert_eq!(doubling_pause(Duration::MAX, 2, hour), hour);
        assert_eq!(
            doubling_pause(Duration::ZERO, u32::MAX, hour),
            Duration::ZERO
        );
    }

    #[test]
    fn stepping_the_wall_clock_leaves_the_monotonic_clock_alone() {
        let clock = TestClock::new();
        let (m0, w0) = (clock.now(), clock.wall());
        clock.step_wall(Duration::from_secs(60), false);
        assert_eq!(clock.now(), m0);
        assert_eq!(
            w0.duration_since(clock.wall()).unwrap(),
            Duration::from_secs(60)
        );
        clock.step_wall(Duration::from_secs(90), true);
        assert_eq!(
            clock.wall().duration_since(w0).unwrap(),
            Duration::from_secs(30)
        );
    }
}
