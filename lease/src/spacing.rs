//! Spacing a store's own writes of each key by the service's write
//! interval ([`Store::write_interval`]):
//! Cloudflare R2 takes one write of an object name a second, and answers
//! `429` to the next one inside that second.
//!
//! A store with a write interval keeps one [`WriteSpacing`]. Before a write
//! of a key goes out it takes its turn ([`WriteSpacing::take_turn`]): the
//! interval after the key's last write this store sent, or longer when the
//! service asked for more (`Retry-After`). The wait is bounded by the
//! write's deadline: a turn that comes after it is not waited for, and the
//! write fails as not sent. After the write, whatever its answer, the store
//! settles the turn ([`Taken::wrote`]); the interval counts from the
//! answer, which is after the service took the write, so the next write is
//! never early by the service's count. A write the service may not have
//! received counts too (it may have landed), and so does one that
//! panicked (its turn is settled when dropped).
//!
//! [`SpacedStore`] wraps any store in one: for a store of your own on a
//! service with such a limit, and for tests, where each wrapper is one
//! client of a limited [`MemoryStore`](crate::memory::MemoryStore).
//!
//! Writes of one key by two threads of the store are taken in turn: a turn
//! is held from [`take_turn`](WriteSpacing::take_turn) until its write is
//! noted. Writes of the key by other processes are not known here; the
//! service's `429` to them is a throttled answer, settled and retried by
//! the lease as any answer that may have landed.

use crate::clock::Clock;
use crate::multipart::{
    AbortUpload, BeginUpload, CompleteUpload, ObjectReader, UploadConditions, UploadPart,
    UploadedPart,
};
use crate::store::{DeleteMode, Object, PutOptions, Store, StoreError, StoreErrorKind, Version};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The turns of each key's writes. See the [module docs](self).
#[derive(Debug)]
pub struct WriteSpacing {
    interval: Duration,
    keys: Mutex<HashMap<String, Turn>>,
}

/// When a key may next be written, and whether a write of it is on its way.
#[derive(Debug, Clone, Copy)]
struct Turn {
    not_before: Instant,
    in_flight: bool,
}

/// A turn taken ([`WriteSpacing::take_turn`]), to settle once its write
/// was sent or not.
#[must_use = "settle the turn once the write was sent or not"]
pub struct Taken<'a> {
    spacing: &'a WriteSpacing,
    key: &'a str,
    clock: &'a dyn Clock,
    settled: bool,
}

impl Taken<'_> {
    /// The write was answered, or failed after it may have been sent: the
    /// next write of the key waits an interval from now, or `retry_after`
    /// when the service asked for longer.
    pub fn wrote(mut self, retry_after: Option<Duration>) {
        self.settled = true;
        self.spacing.wrote(self.key, self.clock, retry_after);
    }

    /// The write was not sent: the turn goes back, nothing new to wait for.
    pub fn not_sent(mut self) {
        self.settled = true;
        self.spacing.not_sent(self.key, self.clock);
    }
}

impl Drop for Taken<'_> {
    /// An unsettled turn (its write panicked) counts as written.
    fn drop(&mut self) {
        if !self.settled && !crate::mutant::StoreMutant::TurnUnsettledOnPanic.on() {
            self.spacing.wrote(self.key, self.clock, None);
        }
    }
}

/// A write whose turn came after its deadline: it was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnTooLate {
    /// When the key may be written next.
    pub not_before: Instant,
}

impl TurnTooLate {
    /// The error of the write of `key` by `method` that was not sent, for
    /// a store that spaces its writes by `interval`, at `now`.
    pub fn error(
        self,
        method: &'static str,
        key: &str,
        interval: Duration,
        now: Instant,
    ) -> StoreError {
        StoreError::new(StoreErrorKind::Transport, method, key)
            .not_sent()
            .timed_out()
            .with_message(format!(
                "the service takes one write of a key every {interval:?}, and this key's next \
                 write may go in {:?}, after the request's deadline",
                self.not_before.saturating_duration_since(now)
            ))
    }
}

impl WriteSpacing {
    /// Writes of each key at least `interval` apart.
    pub fn new(interval: Duration) -> Self {
        WriteSpacing {
            interval,
            keys: Mutex::new(HashMap::new()),
        }
    }

    /// The interval between two writes of one key.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Wait on `clock` until `key` may be written, and take the turn: the
    /// caller sends its write and then settles the turn it holds
    /// ([`Taken::wrote`], [`Taken::not_sent`]). A turn dropped unsettled (the
    /// write panicked) counts as written: it may have gone out.
    ///
    /// # Errors
    ///
    /// [`TurnTooLate`], without waiting, when the turn comes after
    /// `deadline`.
    pub fn take_turn<'a>(
        &'a self,
        key: &'a str,
        clock: &'a dyn Clock,
        deadline: Option<Instant>,
    ) -> Result<Taken<'a>, TurnTooLate> {
        self.wait_turn(key, clock, deadline)?;
        Ok(Taken {
            spacing: self,
            key,
            clock,
            settled: false,
        })
    }

    fn wait_turn(
        &self,
        key: &str,
        clock: &dyn Clock,
        deadline: Option<Instant>,
    ) -> Result<(), TurnTooLate> {
        let mut slept = false;
        loop {
            let now = clock.now();
            // Woken at or past the deadline (a clock's sleep may last
            // longer than asked): the turn, even if it came, is too late.
            if slept
                && deadline.is_some_and(|d| now >= d)
                && !crate::mutant::StoreMutant::TurnTakenAfterDeadline.on()
            {
                return Err(TurnTooLate { not_before: now });
            }
            let wait = {
                let mut keys = self.lock();
                match keys.get_mut(key) {
                    Some(turn) if turn.in_flight || turn.not_before > now => {
                        // Another thread's write of the key is on its way:
                        // its turn ends an interval after its answer at the
                        // earliest.
                        let not_before = if turn.in_flight {
                            turn.not_before.max(now + self.interval)
                        } else {
                            turn.not_before
                        };
                        if deadline.is_some_and(|d| not_before >= d) {
                            return Err(TurnTooLate { not_before });
                        }
                        turn.not_before - now.min(turn.not_before)
                    }
                    _ => {
                        keys.retain(|_, turn| turn.in_flight || turn.not_before > now);
                        keys.insert(
                            key.to_string(),
                            Turn {
                                not_before: now,
                                in_flight: true,
                            },
                        );
                        return Ok(());
                    }
                }
            };
            // A write in flight is waited for in short steps, as its answer
            // may come at any moment.
            clock.sleep(if wait.is_zero() {
                self.interval.min(Duration::from_millis(10))
            } else {
                wait
            });
            slept = true;
        }
    }

    /// Wait on `clock` until `key`'s turn has come, or until `deadline`,
    /// without taking the turn: see [`Store::await_write_turn`].
    pub fn await_turn(&self, key: &str, clock: &dyn Clock, deadline: Option<Instant>) {
        loop {
            let now = clock.now();
            let open = match self.lock().get(key) {
                Some(turn) if turn.in_flight => now + self.interval.min(Duration::from_millis(10)),
                Some(turn) if turn.not_before > now => turn.not_before,
                _ => return,
            };
            let until = deadline.map_or(open, |d| d.min(open));
            if until <= now {
                return;
            }
            clock.sleep(until - now);
            if deadline.is_some_and(|d| clock.now() >= d) {
                return;
            }
        }
    }

    /// The write of `key` whose turn was taken was answered (or failed
    /// after it may have been sent) now: the next waits an interval, or
    /// `retry_after` when the service asked for longer.
    fn wrote(&self, key: &str, clock: &dyn Clock, retry_after: Option<Duration>) {
        let wait = retry_after.map_or(self.interval, |r| r.max(self.interval));
        self.lock().insert(
            key.to_string(),
            Turn {
                not_before: clock.now() + wait,
                in_flight: false,
            },
        );
    }

    /// The write of `key` whose turn was taken was not sent after all: the
    /// turn goes back as it was before, with nothing new to wait for.
    fn not_sent(&self, key: &str, clock: &dyn Clock) {
        let mut keys = self.lock();
        if let Some(turn) = keys.get_mut(key) {
            turn.in_flight = false;
            turn.not_before = turn.not_before.min(clock.now());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Turn>> {
        self.keys
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

/// A store whose writes of each key are spaced by an interval on a clock,
/// and that says the interval ([`Store::write_interval`]); everything else
/// is the inner store's.
#[derive(Debug)]
pub struct SpacedStore {
    inner: Arc<dyn Store>,
    spacing: WriteSpacing,
    clock: Arc<dyn Clock>,
}

impl SpacedStore {
    /// `inner`, its writes of each key at least `interval` apart by `clock`.
    pub fn new(inner: Arc<dyn Store>, interval: Duration, clock: Arc<dyn Clock>) -> Self {
        SpacedStore {
            inner,
            spacing: WriteSpacing::new(interval),
            clock,
        }
    }

    /// `write` of `key` by `method`, in its turn; not sent when the turn
    /// comes after `deadline`.
    fn in_turn<T>(
        &self,
        method: &'static str,
        key: &str,
        deadline: Option<Instant>,
        write: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let clock = &*self.clock;
        let turn = match self.spacing.take_turn(key, clock, deadline) {
            Ok(turn) => turn,
            Err(late) => {
                let error = late.error(method, key, self.spacing.interval(), clock.now());
                return Err(match self.inner.store_url() {
                    Some(url) => error.with_store_url(url),
                    None => error,
                });
            }
        };
        let answer = write();
        match &answer {
            Err(e) if e.delivery() == crate::store::Delivery::NotSent => turn.not_sent(),
            Err(e) => turn.wrote(e.retry_after()),
            Ok(_) => turn.wrote(None),
        }
        answer
    }
}

impl Store for SpacedStore {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.get(key, deadline)
    }

    fn head(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.inner.head(key, deadline)
    }

    fn get_if_changed(
        &self,
        key: &str,
        known: &Version,
        deadline: Option<Instant>,
    ) -> Result<Option<Object>, StoreError> {
        self.inner.get_if_changed(key, known, deadline)
    }

    fn concurrent_requests(&self) -> bool {
        self.inner.concurrent_requests()
    }

    fn warm_up(&self, key: &str, due: Instant) {
        self.inner.warm_up(key, due);
    }

    fn condition_spelling(&self) -> u64 {
        self.inner.condition_spelling()
    }

    fn store_url(&self) -> Option<&str> {
        self.inner.store_url()
    }

    fn max_key_bytes(&self) -> Option<usize> {
        self.inner.max_key_bytes()
    }

    fn write_interval(&self) -> Option<Duration> {
        Some(self.spacing.interval())
    }

    fn await_write_turn(&self, key: &str, deadline: Option<Instant>) {
        self.spacing.await_turn(key, &*self.clock, deadline);
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        self.in_turn("PUT", key, options.deadline, || {
            self.inner.put(key, body, options)
        })
    }

    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        self.in_turn("DELETE", key, deadline, || {
            self.inner.delete(key, mode, deadline)
        })
    }

    fn open(&self, key: &str, deadline: Option<Instant>) -> Result<ObjectReader, StoreError> {
        self.inner.open(key, deadline)
    }

    fn upload_conditions(&self) -> Option<&UploadConditions> {
        self.inner.upload_conditions()
    }

    fn begin_upload(&self, begin: &BeginUpload<'_>) -> Result<String, StoreError> {
        self.inner.begin_upload(begin)
    }

    /// Parts are not writes of the key: only the completion makes the
    /// object, and waits its turn.
    fn upload_part(&self, part: &UploadPart<'_>) -> Result<UploadedPart, StoreError> {
        self.inner.upload_part(part)
    }

    fn complete_upload(&self, complete: &CompleteUpload<'_>) -> Result<Version, StoreError> {
        self.in_turn("POST", complete.key, complete.deadline, || {
            self.inner.complete_upload(complete)
        })
    }

    fn abort_upload(&self, abort: &AbortUpload<'_>) -> Result<(), StoreError> {
        self.inner.abort_upload(abort)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::TestClock;

    #[test]
    fn a_second_write_of_a_key_waits_an_interval_after_the_first_answer() {
        let clock = TestClock::new();
        let spacing = WriteSpacing::new(Duration::from_secs(1));
        let start = clock.now();
        let turn = spacing.take_turn("k", &clock, None).unwrap();
        clock.advance(Duration::from_millis(100));
        turn.wrote(None);
        // Another key goes at once.
        spacing
            .take_turn("other", &clock, None)
            .unwrap()
            .wrote(None);
        assert_eq!(clock.now(), start + Duration::from_millis(100));
        spacing.take_turn("k", &clock, None).unwrap().wrote(None);
        assert_eq!(clock.now(), start + Duration::from_millis(1100));
    }

    #[test]
    fn a_turn_after_the_deadline_is_refused_without_waiting() {
        let clock = TestClock::new();
        let spacing = WriteSpacing::new(Duration::from_secs(1));
        let turn = spacing.take_turn("k", &clock, None).unwrap();
        turn.wrote(Some(Duration::from_secs(5)));
        let now = clock.now();
        let late = spacing
            .take_turn("k", &clock, Some(now + Duration::from_secs(4)))
            .err()
            .unwrap();
        assert_eq!(late.not_before, now + Duration::from_secs(5));
        assert_eq!(clock.now(), now, "nothing was waited");
        spacing
            .take_turn("k", &clock, Some(now + Duration::from_secs(6)))
            .unwrap()
            .wrote(None);
        assert_eq!(clock.now(), now + Duration::from_secs(5));
    }

    #[test]
    fn a_write_not_sent_gives_its_turn_back() {
        let clock = TestClock::new();
        let spacing = WriteSpacing::new(Duration::from_secs(1));
        spacing.take_turn("k", &clock, None).unwrap().not_sent();
        let now = clock.now();
        spacing.take_turn("k", &clock, None).unwrap().wrote(None);
        assert_eq!(clock.now(), now);
    }
}

#[cfg(test)]
mod forwarding {
    use super::*;
    use crate::testing::{Reads, Wrapped};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Counts conditional reads, and refuses a plain read: a conditional
    /// read that fell back to one (the trait's default) fails.
    #[derive(Debug, Default)]
    struct ConditionalOnly {
        conditional_reads: AtomicU32,
    }

    impl Reads for ConditionalOnly {
        fn before_plain_read(&self, key: &str) -> Result<(), StoreError> {
            Err(StoreError::new(StoreErrorKind::Rejected, "GET", key)
                .with_message("only conditional reads are expected"))
        }

        fn before_conditional_read(&self, _: &str, _: Option<Instant>) -> Result<(), StoreError> {
            self.conditional_reads.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    type Counting = Wrapped<ConditionalOnly>;

    #[test]
    fn a_conditional_read_goes_to_the_wrapped_store_as_one() {
        let inner = Arc::new(Counting::default());
        let version = inner.inner.insert("k", b"v");
        let spaced = SpacedStore::new(
            inner.clone(),
            Duration::from_secs(1),
            crate::clock::system_clock(),
        );
        assert_eq!(spaced.get_if_changed("k", &version, None).unwrap(), None);
        assert_eq!(inner.reads.conditional_reads.load(Ordering::SeqCst), 1);
    }
}
