//! The requests every step of a lease's life shares: the default call
//! deadline, reading the record, and writes that retry conflicts and count
//! transient failures.

use super::{CONFLICT_RETRIES, DEFAULT_CALL_TIMEOUT, TRANSIENT_WRITE_TRIES};
use crate::clock::{doubling_pause, transient_backoff, Clock};
use crate::record::LeaseRecord;
use crate::store::{
    named_by, Delivery, PutMode, PutOptions, Store, StoreError, StoreErrorKind, Version,
};
use std::time::{Duration, Instant};

/// The one deadline of a call made without one: [`DEFAULT_CALL_TIMEOUT`]
/// after now on `clock` (`None` only where the instant cannot be
/// represented).
pub(crate) fn call_deadline(clock: &dyn Clock) -> Option<Instant> {
    clock.now().checked_add(DEFAULT_CALL_TIMEOUT)
}

/// The record at `key`, parsed when it parses, with its version; `None` when
/// the key is absent. An object too large to read counts as a record that
/// does not parse, with the version its answer named.
pub(crate) fn read_record(
    store: &dyn Store,
    key: &str,
    deadline: Option<Instant>,
) -> Result<Option<(Option<LeaseRecord>, Version)>, StoreError> {
    match store.get(key, deadline) {
        Ok(object) => Ok(Some((LeaseRecord::parse(&object.body), object.version))),
        Err(e) if e.kind() == StoreErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == StoreErrorKind::TooLarge => match e.version() {
            Some(version) => Ok(Some((None, version.clone()))),
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// The record of whoever holds a lease whose record was read as `read`:
/// nobody when it is absent, unreadable or released.
pub(super) fn live_holder(read: Option<(Option<LeaseRecord>, Version)>) -> Option<LeaseRecord> {
    read.and_then(|(rec, _)| rec)
        .filter(|rec| !rec.is_released())
}

/// `version` if it carries an ETag, the condition of the next
/// compare-and-swap; otherwise an error naming the answer that lacked one.
pub(super) fn require_etag(
    store: &dyn Store,
    version: &Version,
    method: &'static str,
    key: &str,
) -> Result<Version, StoreError> {
    if version.etag.is_some() {
        return Ok(version.clone());
    }
    let error = StoreError::new(StoreErrorKind::Rejected, method, key).with_message(
        "the answer carried no ETag, so the next compare-and-swap cannot be sent; a \
         conditional lease needs a service (and any proxy in front of it) that returns the \
         ETag header on GET and PUT",
    );
    Err(named_by(error, store))
}

/// The transient write failures met so far by one acquire, probe check or
/// release; see [`TRANSIENT_WRITE_TRIES`].
#[derive(Debug, Default)]
pub(crate) struct Transient {
    failures: u32,
}

impl Transient {
    /// Whether to try again after `error`: a transient failure of a request
    /// that was sent (one not sent is the store's to retry), with tries
    /// left and room before `deadline` for a jittered pause (at least the
    /// `Retry-After` of a throttled answer) and a request. If so, the
    /// pause has been slept.
    pub(crate) fn pause_before_another(
        &mut self,
        error: &StoreError,
        clock: &dyn Clock,
        deadline: Option<Instant>,
    ) -> bool {
        if error.kind() != StoreErrorKind::Transport
            || error.delivery() == Delivery::NotSent
            || self.failures + 1 >= TRANSIENT_WRITE_TRIES
        {
            return false;
        }
        self.failures += 1;
        let backoff = clock.jitter(transient_backoff(self.failures));
        // A throttled answer's Retry-After is honoured.
        let pause = error
            .retry_after()
            .map_or(backoff, |wait| wait.max(backoff));
        if deadline.is_some_and(|d| clock.now() + pause + backoff >= d) {
            return false;
        }
        log::debug!(
            "{}: {error}; reading and trying again in {pause:?} ({} of {TRANSIENT_WRITE_TRIES})",
            error.key(),
            self.failures + 1
        );
        clock.sleep(pause);
        true
    }
}

/// [`put_retrying`], sent again after a transient failure: for the probe's
/// writes, which carry our own record and are meant to be refused, so that
/// a second copy can do no harm the first could not.
pub(super) fn put_resending(
    store: &dyn Store,
    clock: &dyn Clock,
    key: &str,
    body: &[u8],
    mode: PutMode,
    deadline: Option<Instant>,
) -> Result<Version, StoreError> {
    let mut transient = Transient::default();
    loop {
        match put_retrying(store, clock, key, body, mode.clone(), deadline) {
            Err(e) if transient.pause_before_another(&e, clock, deadline) => {}
            answer => return answer,
        }
    }
}

/// A write that retries conflict answers after a jittered, growing pause,
/// at most [`CONFLICT_RETRIES`] times and never past `deadline`.
pub(crate) fn put_retrying(
    store: &dyn Store,
    clock: &dyn Clock,
    key: &str,
    body: &[u8],
    mode: PutMode,
    deadline: Option<Instant>,
) -> Result<Version, StoreError> {
    let options = PutOptions::new(mode).with_deadline(deadline);
    let mut retries = 0;
    loop {
        match store.put(key, body, &options) {
            Err(e) if e.kind() == StoreErrorKind::Conflict && retries < CONFLICT_RETRIES => {
                retries += 1;
                let pause = clock.jitter(doubling_pause(
                    Duration::from_millis(25),
                    retries,
                    Duration::MAX,
                ));
                if deadline.is_some_and(|d| clock.now() + pause >= d) {
                    return Err(e);
                }
                log::debug!("{key}: conflicting write, retry {retries} after {pause:?}");
                clock.sleep(pause);
            }
            answer => return answer,
        }
    }
}
