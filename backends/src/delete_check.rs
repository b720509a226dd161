//! Whether a service honours `If-Match` on DELETE, found out before a
//! conditional delete is trusted to it.
//!
//! Some services ignore the condition and delete whatever is there (Ceph
//! RGW 16.2 answers 204 to a wrong ETag and removes the object), so a
//! profile that sends conditional deletes (S3, MinIO) does not take the
//! service's word for it. Before the first [`DeleteMode::IfVersion`] of a
//! store is sent, the store checks once, on a scratch object of its own
//! beside that key (the acquire probe's kind of key, with random digits),
//! its conditional deletes all spelled as ETags are spelled then
//! ([`crate::spelling`], quoted or bare):
//!
//! 1. the object is created;
//! 2. a delete conditional on an ETag it never had must be refused, and
//!    the object must still be there;
//! 3. a delete conditional on its own ETag must be accepted, and the object
//!    must be gone (what a caller of a conditional delete needs).
//!
//! What it promises:
//!
//! - **No conditional delete is sent to a service that was not seen to
//!   honour one.** If the check fails, every conditional delete of the
//!   store answers [`StoreErrorKind::NotImplemented`] from then on, with
//!   nothing sent (as for a profile that does not send them), and one
//!   warning names the service's answer.
//! - **A verdict holds for the spelling it was found in, and no other**
//!   (issue 28): a service may honour a quoted `If-Match` on DELETE and
//!   ignore a bare one, or refuse every quoted one. The verdict names its
//!   [`Spelled`]; a conditional delete is sent only in a spelling whose
//!   check passed, and after the store's spelling changed the next
//!   conditional delete checks again, in the new one (a second warning if
//!   that fails too). Settling a spelling keeps its verdict.
//! - **A check that cannot finish decides nothing**: a failed request or
//!   the caller's deadline fails that delete with the check's error, and
//!   the next conditional delete checks again.
//! - **It costs five requests, once per store and spelling** (a store's
//!   spelling changes at most once on a service that honours one of them),
//!   within the caller's deadline (or the store's timeout), and leaves no
//!   object behind when its requests are answered.

use crate::spelling::Spelled;
use crate::HttpStore;
use bucket_lease_core::mutant::StoreMutant;
use bucket_lease_core::record::probe_key;
use bucket_lease_core::store::{
    DeleteMode, PutMode, PutOptions, Store, StoreError, StoreErrorKind, Version,
};
use std::sync::Mutex;
use std::time::Instant;

/// What a store knows of the service's conditional deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeleteConditions {
    /// The profile does not send them.
    Off,
    /// The profile sends them once the service was seen to honour them.
    Unchecked,
    /// The check passed in that spelling of ETags: they are sent in it.
    Honoured(Spelled),
    /// The check failed in that spelling: none is sent in it.
    Ignored(Spelled),
}

impl DeleteConditions {
    /// The verdict found in `spelled`, if that is the spelling this one
    /// was found in.
    fn for_spelling(self, spelled: Spelled) -> Option<bool> {
        match self {
            DeleteConditions::Honoured(found) if found == spelled => Some(true),
            DeleteConditions::Ignored(found) if found == spelled => Some(false),
            _ => None,
        }
    }
}

/// One store's [`DeleteConditions`], shared by its threads. The lock is
/// never held over a request: two threads may check at once, and either
/// verdict stands.
#[derive(Debug)]
pub(crate) struct DeleteCheck(Mutex<DeleteConditions>);

/// An ETag no object of the service has.
const NEVER_ISSUED: &str = "\"bucket-lease-delete-check-never-issued\"";

impl DeleteCheck {
    /// Off, or unchecked when the profile sends conditional deletes.
    pub(crate) fn new(send: bool) -> Self {
        DeleteCheck(Mutex::new(if send {
            DeleteConditions::Unchecked
        } else {
            DeleteConditions::Off
        }))
    }

    /// What is known now.
    pub(crate) fn state(&self) -> DeleteConditions {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a conditional delete may be sent for `key` in the spelling
    /// `spelled` (the store's now): checks the service in it first when
    /// that has not been done (see the [module docs](self)), by
    /// `deadline`. `Some(spelled)` when it may: the delete is then sent in
    /// that spelling, the one checked, whatever the store's is by then.
    ///
    /// # Errors
    ///
    /// The error of a check request that failed; the check is then tried
    /// again by the next conditional delete.
    pub(crate) fn allows(
        &self,
        store: &HttpStore,
        key: &str,
        spelled: Spelled,
        deadline: Instant,
    ) -> Result<Option<Spelled>, StoreError> {
        let state = self.state();
        if let Some(honoured) = state.for_spelling(spelled) {
            return Ok(honoured.then_some(spelled));
        }
        match state {
            DeleteConditions::Off => return Ok(None),
            DeleteConditions::Unchecked if StoreMutant::DeleteConditionsTrusted.on() => {
                return Ok(Some(spelled))
            }
            DeleteConditions::Honoured(_) | DeleteConditions::Ignored(_)
                if StoreMutant::DeleteVerdictOutlivesSpelling.on() =>
            {
                // Issue 28's defect: the verdict of another spelling is
                // taken for this one.
                return Ok(matches!(state, DeleteConditions::Honoured(_)).then_some(spelled));
            }
            // Unchecked, or checked in another spelling.
            _ => {}
        }
        let verdict = check(store, key, spelled.bare, deadline)?;
        let found = match &verdict {
            Ok(()) => DeleteConditions::Honoured(spelled),
            Err(_) => DeleteConditions::Ignored(spelled),
        };
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // The latest spelling's verdict is kept: this one, unless another
        // thread found one for this spelling first (either stands) or for
        // a later one.
        let kept = match *state {
            DeleteConditions::Honoured(other) | DeleteConditions::Ignored(other) => {
                other.changes >= spelled.changes
            }
            DeleteConditions::Off | DeleteConditions::Unchecked => false,
        };
        if !kept {
            *state = found;
            if let Err(answer) = &verdict {
                log::warn!(
                    "{}: the service does not honour If-Match on DELETE with {} ETags \
                     ({answer}): conditional deletes are not sent to it while ETags are \
                     spelled so (each answers NotImplemented; the lease itself never needs one)",
                    store.target(),
                    spelled.name(),
                );
            }
        }
        let honoured = state
            .for_spelling(spelled)
            .unwrap_or(found == DeleteConditions::Honoured(spelled));
        Ok(honoured.then_some(spelled))
    }
}

/// The check itself, on a scratch object beside `key`, its conditional
/// deletes sent `bare` or quoted: `Ok(Ok(()))` when the service honoured
/// both conditions, `Ok(Err(what it did))` when it did not, `Err` when a
/// request failed.
fn check(
    store: &HttpStore,
    key: &str,
    bare: bool,
    deadline: Instant,
) -> Result<Result<(), String>, StoreError> {
    let scratch = probe_key(key);
    let put = PutOptions::new(PutMode::Create).with_deadline(Some(deadline));
    let version = store.put(&scratch, b"bucket-lease delete check", &put)?;
    let verdict = judge(store, &scratch, &version, bare, deadline);
    if !matches!(verdict, Ok(Ok(()))) {
        // Whatever is left of the scratch object goes.
        if let Err(e) = store.delete(&scratch, &DeleteMode::Unconditional, Some(deadline)) {
            log::error!("{scratch}: could not remove the delete check's object: {e}");
        }
    }
    verdict
}

/// Steps 2 and 3 of the check on `scratch`, created at `version`, its
/// deletes sent `bare` or quoted.
fn judge(
    store: &HttpStore,
    scratch: &str,
    version: &Version,
    bare: bool,
    deadline: Instant,
) -> Result<Result<(), String>, StoreError> {
    let wrong = Version::etag(NEVER_ISSUED);
    match store.delete_if_match(scratch, &wrong, Some(deadline), bare) {
        Err(e) if e.kind() == StoreErrorKind::Precondition => {}
        Err(e) if e.kind() == StoreErrorKind::NotImplemented => {
            return Ok(Err(format!("a delete on a wrong ETag answered: {e}")))
        }
        Err(e) => return Err(e),
        Ok(()) => return Ok(Err("a delete on a wrong ETag was accepted".into())),
    }
    match store.head(scratch, Some(deadline)) {
        Ok(_) => {}
        Err(e) if e.kind() == StoreErrorKind::NotFound => {
            return Ok(Err(
                "a delete on a wrong ETag was refused, but the object was gone".into(),
            ))
        }
        Err(e) => return Err(e),
    }
    match store.delete_if_match(scratch, version, Some(deadline), bare) {
        Ok(()) => {}
        Err(e) if e.is_refusal() || e.kind() == StoreErrorKind::NotImplemented => {
            return Ok(Err(format!(
                "a delete on the object's own ETag answered: {e}"
            )))
        }
        Err(e) => return Err(e),
    }
    match store.head(scratch, Some(deadline)) {
        Err(e) if e.kind() == StoreErrorKind::NotFound => Ok(Ok(())),
        Ok(_) => Ok(Err(
            "a delete on the object's own ETag was accepted, but the object stayed".into(),
        )),
        Err(e) => Err(e),
    }
}
