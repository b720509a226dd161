//! The requests behind [`Store`]'s methods on one object: GET, HEAD, PUT
//! and DELETE (those methods name their errors with the store's URL, by
//! `named`).
//!
//! What it promises: until the spelling of ETags is settled (or set on the
//! builder), a PUT whose `If-Match` was refused while the object still has
//! that very ETag (one HEAD tells) is sent once more with the ETag in the
//! other spelling, quoted or bare, and an accepted `If-Match` write
//! settles the spelling it went out in ([`crate::spelling`]). A
//! conditional DELETE is sent only once the service was seen to honour one
//! in the spelling in use ([`crate::delete_check`]): one the profile does
//! not send, or the service failed that check for, is
//! [`StoreErrorKind::NotImplemented`], nothing sent. A version without an
//! ETag, or a mode this client does not know, is refused with nothing sent.

use super::answers::{object_of, version_of};
use super::{unknown_mode, Answer, HttpStore, Op};
use crate::delete_check::DeleteConditions;
use crate::spelling::{same_etag, Now};
use bucket_lease_core::store::{
    DeleteMode, Object, PutMode, PutOptions, Store, StoreError, StoreErrorKind, Version,
};
use std::sync::Arc;
use std::time::Instant;

/// The requests behind [`Store`]'s methods, whose errors those name with
/// the store's URL.
impl HttpStore {
    /// `error`, naming this store ([`Store::store_url`]).
    pub(super) fn named(&self, error: StoreError) -> StoreError {
        error.with_store_url(Arc::clone(&self.store_url))
    }

    pub(super) fn get_object(
        &self,
        key: &str,
        deadline: Option<Instant>,
    ) -> Result<Object, StoreError> {
        let request = self.request(Op::Get, key, None, &[])?;
        let answer = self.execute(Op::Get, key, request, &[], deadline)?;
        object_of(key, answer)
    }

    pub(super) fn head_object(
        &self,
        key: &str,
        deadline: Option<Instant>,
    ) -> Result<Object, StoreError> {
        let request = self.request(Op::Head, key, None, &[])?;
        let answer = self.execute(Op::Head, key, request, &[], deadline)?;
        object_of(key, answer)
    }

    pub(super) fn put_object(
        &self,
        key: &str,
        body: &[u8],
        options: &PutOptions,
    ) -> Result<Version, StoreError> {
        let (op, condition) = match &options.mode {
            PutMode::Create => (Op::Create, None),
            PutMode::Update(version) => (Op::Update, Some(version)),
            PutMode::Overwrite => (Op::Overwrite, None),
            _ => return Err(unknown_mode("PUT", key)),
        };
        // One bound for the write, and for the HEAD and second write a
        // refusal of a right ETag may cost.
        let deadline = Some(
            options
                .deadline
                .unwrap_or_else(|| Instant::now() + self.timeout),
        );
        // The spelling the write goes out in, and any switch is decided
        // against.
        let sent = self.spelling.now();
        let bare = sent.bare();
        let request = self.request_spelled(op, key, condition, &options.metadata, bare)?;
        let (answer, spelled) = match (self.execute(op, key, request, body, deadline), condition) {
            (Ok(answer), _) => (answer, bare),
            (Err(e), Some(version))
                if e.kind() == StoreErrorKind::Precondition
                    && self.spelling.open()
                    && self.refused_a_right_etag(key, version, deadline) =>
            {
                let answer = self.put_respelled(key, body, options, sent, deadline, e)?;
                (answer, !bare)
            }
            (Err(e), _) => return Err(e),
        };
        if op == Op::Update {
            self.spelling.accepted(spelled);
        }
        Ok(version_of(&answer.headers))
    }

    pub(super) fn delete_object(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        let version = match mode {
            DeleteMode::Unconditional => {
                let request = self.request(Op::Delete, key, None, &[])?;
                self.execute(Op::Delete, key, request, &[], deadline)?;
                return Ok(());
            }
            DeleteMode::IfVersion(version) if version.etag.is_none() => {
                // Refused without a request, whatever the service does.
                return self.delete_if_match(key, version, deadline, self.spelling.bare());
            }
            DeleteMode::IfVersion(version) => version,
            _ => return Err(unknown_mode("DELETE", key)),
        };
        // One bound for the check a first conditional delete costs, and
        // for the delete.
        let bound = deadline.unwrap_or_else(|| Instant::now() + self.timeout);
        // Sent in the spelling of ETags the service's conditional deletes
        // were checked in.
        let spelled = self.spelling.now().spelled();
        let Some(checked) = self.delete_conditions.allows(self, key, spelled, bound)? else {
            let why = match self.delete_conditions.state() {
                DeleteConditions::Off => format!(
                    "the {} profile does not send conditional deletes (turn them on with \
                     conditional_delete(true))",
                    self.profile
                ),
                _ => format!(
                    "the service was seen to ignore If-Match on DELETE with {} ETags, the \
                     spelling in use, so conditional deletes are not sent to it",
                    spelled.name()
                ),
            };
            return Err(
                StoreError::new(StoreErrorKind::NotImplemented, "DELETE", key).with_message(why),
            );
        };
        self.delete_if_match(key, version, Some(bound), checked.bare)
    }
}

impl HttpStore {
    /// A DELETE conditional on `version`, its ETag sent `bare` or quoted,
    /// whatever is known of the service's conditional deletes (the caller
    /// checked, in that spelling).
    pub(crate) fn delete_if_match(
        &self,
        key: &str,
        version: &Version,
        deadline: Option<Instant>,
        bare: bool,
    ) -> Result<(), StoreError> {
        let request = self.request_spelled(Op::DeleteIfMatch, key, Some(version), &[], bare)?;
        self.execute(Op::DeleteIfMatch, key, request, &[], deadline)?;
        Ok(())
    }

    /// `host:port` the requests go to, for messages.
    pub(crate) fn target(&self) -> &str {
        &self.target
    }
}

impl HttpStore {
    /// Whether `key` still has the ETag of `version`, which a write
    /// conditional on it was just refused for: one HEAD, within
    /// `deadline`. (A failed HEAD answers no: the refusal stands.)
    fn refused_a_right_etag(
        &self,
        key: &str,
        version: &Version,
        deadline: Option<Instant>,
    ) -> bool {
        let (Some(sent), Ok(object)) = (&version.etag, self.head(key, deadline)) else {
            return false;
        };
        object
            .version
            .etag
            .as_deref()
            .is_some_and(|now| same_etag(now, sent))
    }

    /// Send the `If-Match` write refused in the spelling `sent` once more
    /// in the other one, by `deadline` (see [`crate::spelling`]): its
    /// answer, or `refused` when the other spelling is refused too, or when
    /// the spelling `sent` settled since (another thread's write on a
    /// right ETag was accepted in it: it is not questioned any more).
    fn put_respelled(
        &self,
        key: &str,
        body: &[u8],
        options: &PutOptions,
        sent: Now,
        deadline: Option<Instant>,
        refused: StoreError,
    ) -> Result<Answer, StoreError> {
        let PutMode::Update(version) = &options.mode else {
            return Err(refused);
        };
        let bare = sent.bare();
        let switched = self.spelling.switch_from(sent);
        if switched.is_none() && self.spelling.bare() == bare {
            // Settled in the spelling the write was refused in (or switched
            // and back by others): the refusal stands, and nothing goes
            // out in a spelling the store does not use.
            return Err(refused);
        }
        // This call switched, or another thread did first.
        let request =
            self.request_spelled(Op::Update, key, Some(version), &options.metadata, !bare)?;
        match self.execute(Op::Update, key, request, body, deadline) {
            Ok(answer) => {
                if switched.is_some() {
                    log::warn!(
                        "{}: the service refused If-Match with the object's own ETag in \
                         {} and accepted it {}; ETags are sent that way from now on (set \
                         BUCKET_LEASE_UNQUOTED_ETAGS={} to start so)",
                        self.profile,
                        if bare { "bare" } else { "quotes" },
                        if bare { "in quotes" } else { "bare" },
                        if bare { "off" } else { "on" },
                    );
                }
                Ok(answer)
            }
            Err(e) if e.kind() == StoreErrorKind::Precondition => {
                // Neither spelling, if the object still has that ETag: keep
                // the first, and its refusal (unless the new one settled
                // meanwhile: then it stays). If it changed meanwhile, the
                // second write lost a race, which says nothing against the
                // new spelling (switching back then could leave a busy key
                // refused in the wrong spelling for good).
                if let Some(switched) = switched {
                    if self.refused_a_right_etag(key, version, deadline) {
                        self.spelling.switch_from(switched);
                    }
                }
                Err(refused)
            }
            Err(e) => Err(e),
        }
    }
}
