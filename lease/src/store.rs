//! The blocking object-store interface the lease is built on.
//!
//! A [`Store`] is a flat key space with these operations: read an object
//! with its [`Version`] (or only its version and metadata), write one under
//! a [`PutMode`], delete one, and delete one only while it still has a given
//! version. Every backend (the in-memory
//! store, the local directory, the signed-HTTP services) promises the same
//! meaning for each answer:
//!
//! - a write returns the [`Version`] it produced, which is the token for the
//!   next compare-and-swap;
//! - a refused condition is an answer ([`StoreErrorKind::AlreadyExists`],
//!   [`StoreErrorKind::Precondition`]): somebody else acted, nothing was
//!   written;
//! - [`StoreErrorKind::Transport`] is no answer: the request may or may not
//!   have taken effect, and the caller must find out by reading;
//! - [`StoreErrorKind::NotImplemented`] means this client or service cannot
//!   express the condition at all; nothing was written.
//!
//! # Deadlines
//!
//! Each request may carry a deadline on the monotonic clock, and every store
//! keeps one rule about it: **no byte of a request leaves after its
//! deadline, and no call returns later than its deadline plus
//! [`DEADLINE_SLACK`]**, whatever the credentials, the host name lookup, the
//! connection, the TLS handshake, a lock, a child process or another thread
//! do meanwhile. A store therefore takes a request's timeout from the time
//! left right before its bytes go out, after everything it waited for; a
//! deadline that passes first is answered [`StoreErrorKind::Transport`],
//! [`Delivery::NotSent`], with `timed_out` set. The lease's fence rests on
//! this rule: a write sent after the holder's write deadline could land
//! while a successor holds the lease.
//!
//! A call without a deadline is bounded as a whole by the store's own
//! limit (the HTTP stores: their timeout, 30 s by default, for the call and
//! its retries together), never by a limit per attempt.
//!
//! The conformance suite checks the rule under conditions that make a store
//! slow (`conformance::deadline_kept`).

use crate::multipart::{
    AbortUpload, BeginUpload, CompleteUpload, ObjectReader, UploadConditions, UploadPart,
    UploadedPart,
};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How late a store call may return after its deadline: the time to notice
/// that a timeout fired, stop a child process, and hand the answer back.
/// Nothing is sent in that time.
pub const DEADLINE_SLACK: Duration = Duration::from_millis(200);

/// Which version of an object a write or a delete is conditional on.
///
/// `etag` is sent exactly as the service returned it (quotes included);
/// `version_id` is the service's object version, where it keeps versions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Version {
    /// The entity tag the service returned for this version.
    pub etag: Option<String>,
    /// The service's version id, on a bucket that keeps versions.
    pub version_id: Option<String>,
}

impl Version {
    /// A version known by its ETag alone.
    pub fn etag(etag: impl Into<String>) -> Self {
        Version {
            etag: Some(etag.into()),
            version_id: None,
        }
    }

    /// Whether `other` is another version than this one, as a conditional
    /// read judges it ([`Store::get_if_changed`]): another ETag or another
    /// version id. Without an ETag on either side nothing says they are the
    /// same, so they count as changed.
    pub fn is_changed(&self, other: &Version) -> bool {
        self.etag.is_none() || self.etag != other.etag || self.version_id != other.version_id
    }
}

/// How a write treats an object that is already there.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PutMode {
    /// Write only if the key is absent (`If-None-Match: *`).
    Create,
    /// Write only if the object still has this version (`If-Match`). An
    /// absent key refuses the write.
    Update(Version),
    /// Write whatever is there.
    Overwrite,
}

/// One write: its mode, the user metadata to store with the object, and the
/// moment by which the request must have been answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PutOptions {
    /// What the write may replace.
    pub mode: PutMode,
    /// User metadata (`x-amz-meta-{name}` on S3), names in lower case.
    pub metadata: Vec<(String, String)>,
    /// Give up on the request at this instant of the monotonic clock.
    pub deadline: Option<Instant>,
}

impl PutOptions {
    /// A write in `mode`, with no metadata and no deadline.
    pub fn new(mode: PutMode) -> Self {
        PutOptions {
            mode,
            metadata: Vec::new(),
            deadline: None,
        }
    }

    /// The same write, abandoned at `deadline`.
    pub fn with_deadline(mut self, deadline: Option<Instant>) -> Self {
        self.deadline = deadline;
        self
    }

    /// The same write, storing `value` under the metadata `name`.
    pub fn with_metadata(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.push((name.into(), value.into()));
        self
    }

    /// The same write, storing each `(name, value)` of `metadata` too.
    pub fn with_metadata_list(mut self, metadata: Vec<(String, String)>) -> Self {
        self.metadata.extend(metadata);
        self
    }
}

/// Which objects a delete may remove.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeleteMode {
    /// Remove whatever is there.
    Unconditional,
    /// Remove the object only while it has this version (`If-Match`).
    /// A store that cannot express this answers
    /// [`StoreErrorKind::NotImplemented`] and deletes nothing.
    IfVersion(Version),
}

/// An object as read: its bytes, its version and its user metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Object {
    /// The object's contents.
    pub body: Vec<u8>,
    /// The version these bytes belong to.
    pub version: Version,
    /// User metadata, names in lower case without the `x-amz-meta-` prefix.
    pub metadata: Vec<(String, String)>,
}

impl Object {
    /// `body` at `version`, without user metadata.
    pub fn new(body: Vec<u8>, version: Version) -> Self {
        Object {
            body,
            version,
            metadata: Vec::new(),
        }
    }

    /// This object with `metadata` (names in lower case).
    #[must_use]
    pub fn with_metadata(mut self, metadata: Vec<(String, String)>) -> Self {
        self.metadata = metadata;
        self
    }
}

/// A blocking object store with conditional writes. See the [module
/// docs](self) for what each answer means.
///
/// Implementations are shared between threads (the renewal thread and the
/// application's writers), so every method takes `&self`.
pub trait Store: Send + Sync + fmt::Debug {
    /// Read `key`.
    ///
    /// # Errors
    ///
    /// [`StoreErrorKind::NotFound`] when the key is absent; any other kind
    /// when the request failed.
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError>;

    /// Read `key`'s version and metadata; the body is left empty. The
    /// default reads the whole object with [`get`](Self::get); HTTP stores
    /// send a HEAD, so objects of any size can be inspected.
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get).
    fn head(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        let mut object = self.get(key, deadline)?;
        object.body = Vec::new();
        Ok(object)
    }

    /// Read `key` unless it still has the version `known`: `Ok(None)` when
    /// it does (unchanged, no body), else the object as [`get`](Self::get)
    /// reads it. For a watcher polling one object: HTTP stores send a GET
    /// with `If-None-Match: <etag>`, so an unchanged object costs a `304 Not
    /// Modified` and no body (and compare the versions of a `200` too, for a
    /// service that ignores the header). The default reads the whole object
    /// with `get` and compares versions. Unchanged means the same ETag (and
    /// the same version id, when either names one); a `known` without an
    /// ETag is never unchanged.
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get): [`StoreErrorKind::NotFound`] when the key is
    /// absent.
    fn get_if_changed(
        &self,
        key: &str,
        known: &Version,
        deadline: Option<Instant>,
    ) -> Result<Option<Object>, StoreError> {
        let object = self.get(key, deadline)?;
        Ok(known.is_changed(&object.version).then_some(object))
    }

    /// Get ready for a write of `key` due at `due` (a renewal): a store
    /// whose kept connection may have been closed while idle (by the
    /// service or a load balancer) opens or refreshes one now, so that the
    /// write costs one round trip rather than a TCP and a TLS handshake
    /// more. Best effort and read-only: it changes nothing in the store,
    /// reports nothing, and returns by `due` (every request it sends is
    /// bounded by it). The default does nothing. A [`Keeper`] and a
    /// [`KeeperPool`] call it shortly before each renewal.
    ///
    /// [`Keeper`]: crate::Keeper
    /// [`KeeperPool`]: crate::KeeperPool
    fn warm_up(&self, key: &str, due: Instant) {
        let _ = (key, due);
    }

    /// Whether independent requests may be sent at once, from several
    /// threads (an acquire's four probe writes, so that it costs about
    /// three round trips instead of six). `false`, the default, sends them
    /// one after another, as stores whose calls a test or the deterministic
    /// simulation orders need, and as stores that answer at once (memory, a
    /// local directory) lose nothing by; network stores say `true`.
    fn concurrent_requests(&self) -> bool {
        false
    }

    /// Whether every call answers at once, waiting on nothing: no network,
    /// no lock another thread or process may hold, no disk to sync. Only
    /// such a store's leases are renewed on a [`KeeperPool`]'s scheduler
    /// thread itself (`renewal_threads(0)`), where a call that waits would
    /// hold every other lease's renewals and fence. `false`, the default,
    /// for every store that can wait, the directory store included (it
    /// waits for its bucket's lock up to the deadline); the memory store
    /// says `true`. A store wrapping another that adds no wait of its own
    /// may answer for it.
    ///
    /// [`KeeperPool`]: crate::KeeperPool
    fn answers_at_once(&self) -> bool {
        false
    }

    /// How many times the store has changed how it spells conditions since
    /// it was made: the HTTP store learns whether a service wants the ETag
    /// in `If-Match` with its quotes or without. The default, 0, is a store
    /// that never changes. An acquire's probe that sees the count change
    /// while it runs checks its refusals again in the new spelling, since a
    /// refusal in the old one proves nothing about the new.
    fn condition_spelling(&self) -> u64 {
        0
    }

    /// The store's URL up to a key, as a user writes it (`s3://bucket/`,
    /// `file:///srv/bkt//`, `memory:///`): what its errors carry
    /// ([`StoreError::with_store_url`]) to name the object in full, and
    /// what the lease puts on an error it makes itself about this store's
    /// objects. `None`, the default, for a store that does not say (its
    /// errors name the bare key); a store wrapping another answers for it.
    fn store_url(&self) -> Option<&str> {
        None
    }

    /// The longest key, in bytes, the service accepts (S3, R2 and MinIO:
    /// 1024), or `None`, the default, for no limit worth checking. An
    /// acquire whose keys (its probe's included) would not fit fails before
    /// any request with [`LeaseError::KeyTooLong`](crate::LeaseError::KeyTooLong).
    fn max_key_bytes(&self) -> Option<usize> {
        None
    }

    /// The shortest time the service allows between two writes of one key
    /// (Cloudflare R2: one a second), or `None`, the default, for no such
    /// limit. A store with one spaces its own writes of a key by it (a
    /// write waits its turn within its deadline, and fails not sent when
    /// the turn comes after it), and the lease plans for it: an acquire's
    /// probe writes other keys, and a TTL whose renewal interval (a third
    /// of it) is shorter is refused
    /// ([`LeaseError::TtlTooShort`](crate::LeaseError::TtlTooShort)).
    fn write_interval(&self) -> Option<Duration> {
        None
    }

    /// Wait until a write of `key` would go out at once, or until
    /// `deadline`: for a caller that takes the time a write starts before
    /// sending it (an acquire dates the new lease's fence from then), so
    /// that a store with a [`write_interval`](Self::write_interval) does
    /// not spend the fence waiting for the key's turn. The default, for a
    /// store without one, returns at once.
    fn await_write_turn(&self, key: &str, deadline: Option<Instant>) {
        let _ = (key, deadline);
    }

    /// Write `body` to `key` as `options` say, and return the new version.
    ///
    /// # Errors
    ///
    /// [`StoreErrorKind::AlreadyExists`] when a [`PutMode::Create`] found the
    /// key taken; [`StoreErrorKind::Precondition`] when a
    /// [`PutMode::Update`] found another version or no object;
    /// [`StoreErrorKind::Conflict`] when a concurrent conditional write got
    /// in the way (read again and retry); [`StoreErrorKind::NotImplemented`]
    /// when the condition cannot be sent; [`StoreErrorKind::Transport`] when
    /// the write may or may not have landed.
    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError>;

    /// Remove `key` as `mode` says. Removing an absent key succeeds.
    ///
    /// # Errors
    ///
    /// [`StoreErrorKind::Precondition`] when a [`DeleteMode::IfVersion`]
    /// found another version; [`StoreErrorKind::NotImplemented`] when the
    /// store cannot delete conditionally; any other kind when the request
    /// failed.
    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError>;

    /// Read `key` as a stream: its version and metadata once the answer
    /// begins, its bytes as they arrive, for objects of any size. The
    /// deadline bounds the whole read, body included (`None`: the answer's
    /// start is bounded by the store's own limit, the body by nothing). The
    /// default reads the whole object with [`get`](Self::get).
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get); a failure while reading the body is an
    /// [`std::io::Error`] from the stream.
    fn open(&self, key: &str, deadline: Option<Instant>) -> Result<ObjectReader, StoreError> {
        let mut object = self.get(key, deadline)?;
        let body = std::mem::take(&mut object.body);
        Ok(ObjectReader {
            object,
            body: Box::new(std::io::Cursor::new(body)),
        })
    }

    /// The store's verdict on whether its service honours the condition of
    /// a completion ([`CompletionCondition`]), kept for the store's life:
    /// `None`, the default, for a store that keeps none, whose fenced
    /// uploads check it for each writer. See [`crate::multipart`].
    ///
    /// [`CompletionCondition`]: crate::multipart::CompletionCondition
    fn upload_conditions(&self) -> Option<&UploadConditions> {
        None
    }

    /// Begin a multipart upload of `begin.key`, whose object will carry
    /// `begin.metadata`, and return the upload's id. See
    /// [`crate::multipart`]. The default: [`StoreErrorKind::Rejected`]
    /// (permanent), nothing sent.
    ///
    /// # Errors
    ///
    /// [`StoreErrorKind::Rejected`] when the store takes no uploads in
    /// parts; any other kind when the request failed.
    fn begin_upload(&self, begin: &BeginUpload<'_>) -> Result<String, StoreError> {
        Err(no_uploads("begin an upload of", begin.key))
    }

    /// Send part `part.number` (from 1) of the upload `part.upload` of
    /// `part.key`. A part is not a write of the key: nothing is visible at
    /// the key until the completion.
    ///
    /// # Errors
    ///
    /// [`StoreErrorKind::NotFound`] when the store no longer knows the
    /// upload; any other kind when the request failed.
    fn upload_part(&self, part: &UploadPart<'_>) -> Result<UploadedPart, StoreError> {
        Err(no_uploads("upload a part of", part.key))
    }

    /// Make the upload `complete.upload` of `complete.key` the object at
    /// the key, from `complete.parts` in order, as `complete.mode` says
    /// ([`PutMode::Create`]: only if the key is absent), and return its
    /// version.
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put) for the condition;
    /// [`StoreErrorKind::NotFound`] when the store no longer knows the
    /// upload (completed or aborted already).
    fn complete_upload(&self, complete: &CompleteUpload<'_>) -> Result<Version, StoreError> {
        Err(no_uploads("complete an upload of", complete.key))
    }

    /// Drop the upload `abort.upload` of `abort.key` and its parts.
    /// Aborting an upload the store no longer knows succeeds.
    ///
    /// # Errors
    ///
    /// Any kind when the request failed.
    fn abort_upload(&self, abort: &AbortUpload<'_>) -> Result<(), StoreError> {
        Err(no_uploads("abort an upload of", abort.key))
    }
}

/// The answer of a store that takes no uploads in parts: refused for
/// good, nothing sent.
fn no_uploads(what: &str, key: &str) -> StoreError {
    StoreError::new(StoreErrorKind::Rejected, "POST", key)
        .with_message(format!(
            "cannot {what} the object in parts: this store takes whole objects only; write \
             objects of at most one part (FencedWriter::put_new)"
        ))
        .permanent()
}

/// `error`, naming `store` when it says its URL ([`Store::store_url`]): for
/// errors the lease makes itself about a store's object.
pub(crate) fn named_by(error: StoreError, store: &dyn Store) -> StoreError {
    match store.store_url() {
        Some(url) => error.with_store_url(url),
        None => error,
    }
}

/// What kind of answer a failed store request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The key is absent.
    NotFound,
    /// A create-only write found the key taken.
    AlreadyExists,
    /// A conditional write or delete found another version, or no object.
    Precondition,
    /// A concurrent conditional write on the same key won; read again and
    /// retry after a short, jittered pause.
    Conflict,
    /// The client or the service cannot express this condition; nothing was
    /// written.
    NotImplemented,
    /// The service refused the credentials or the request's permissions.
    PermissionDenied,
    /// No usable answer (timeout, reset connection, 5xx): a write may or may
    /// not have landed.
    Transport,
    /// The service rejected the request as malformed or unsupported, or
    /// answered something this client does not understand; nothing landed.
    Rejected,
    /// The object is larger than the client reads. The error carries the
    /// object's version when the answer gave one
    /// ([`StoreError::version`]), so the object can still be replaced
    /// conditionally without reading its bytes.
    TooLarge,
}

impl StoreErrorKind {
    fn describe(self) -> &'static str {
        match self {
            StoreErrorKind::NotFound => "not found",
            StoreErrorKind::AlreadyExists => "already exists",
            StoreErrorKind::Precondition => "precondition failed",
            StoreErrorKind::Conflict => "conflicting concurrent write",
            StoreErrorKind::NotImplemented => "condition not supported",
            StoreErrorKind::PermissionDenied => "permission denied",
            StoreErrorKind::Transport => "no answer",
            StoreErrorKind::Rejected => "rejected",
            StoreErrorKind::TooLarge => "object larger than the read cap",
        }
    }
}

/// How far a failed request got, which decides what a
/// [`StoreErrorKind::Transport`] error may have done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Delivery {
    /// Sent, or perhaps sent, and no answer came (a timeout, a connection
    /// reset or closed after sending): it may have taken effect.
    #[default]
    Unknown,
    /// Nothing was sent (the host name lookup, the connection or the TLS
    /// handshake failed; the deadline passed first): it took no effect.
    NotSent,
    /// The service answered with an error (5xx, 429, 408): a write may or
    /// may not have taken effect.
    Answered,
}

/// A failed store request: what kind of answer it got, which request it
/// was, and what the service said.
///
/// `Display` reads "`METHOD url`: kind (service code: message; request id
/// …); what to do", where `url` names the object as a user writes it
/// ([`StoreError::url`]: `s3://bucket/p/LEASE`, `file:///srv/bkt//p/LEASE`,
/// `memory:///p/LEASE`), or is the bare key when the store did not name
/// itself. It never contains credentials. It is the whole story: a
/// `StoreError` has no [`source`](std::error::Error::source).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError {
    kind: StoreErrorKind,
    method: &'static str,
    key: String,
    /// The store's URL up to the key (`s3://bucket/`), when it named itself.
    store_url: Option<Arc<str>>,
    // Boxed, as the request id, to keep the error small.
    code: Option<Box<str>>,
    message: Option<Box<str>>,
    // Boxed to keep the error small: most errors carry no request id.
    request_id: Option<Box<str>>,
    timed_out: bool,
    delivery: Delivery,
    version: Option<Box<Version>>,
    permanent: bool,
    /// Whether the service said to slow down (429, `SlowDown`), and the
    /// wait it asked for (`Retry-After`), in one word to keep the error
    /// small: 0, not throttled; 1, throttled without a wait; `1 + ms`,
    /// throttled with a wait of `ms` milliseconds.
    throttle: u32,
}

impl StoreError {
    /// A `kind` answer to `method` on `key`, with nothing more said.
    pub fn new(kind: StoreErrorKind, method: &'static str, key: impl Into<String>) -> Self {
        StoreError {
            kind,
            method,
            key: key.into(),
            store_url: None,
            code: None,
            message: None,
            request_id: None,
            timed_out: false,
            delivery: Delivery::Unknown,
            version: None,
            permanent: false,
            throttle: 0,
        }
    }

    /// The same error, naming the store it came from: `store_url` is the
    /// store's URL up to the key, as a user writes it (`s3://bucket/`,
    /// `r2://bucket/`, `file:///srv/bkt//`, `memory:///`), so that
    /// [`url`](Self::url) and `Display` name the object in full while
    /// [`key`](Self::key) stays the plain key. Every store of this
    /// workspace names itself on the errors it returns.
    pub fn with_store_url(mut self, store_url: impl Into<Arc<str>>) -> Self {
        self.store_url = Some(store_url.into());
        self
    }

    /// The object the request was for, as a user writes it: the store's
    /// URL ([`with_store_url`](Self::with_store_url)) followed by the key,
    /// with `%`, `?`, `#` and `@` percent-encoded as a store URL needs
    /// them (`s3://bucket/jobs%3Fnightly/LEASE`); the bare key when the
    /// store did not name itself. An empty key names the store itself.
    pub fn url(&self) -> String {
        let Some(base) = self.store_url.as_deref() else {
            return self.key.clone();
        };
        if self.key.is_empty() {
            return base.to_string();
        }
        let mut url = String::with_capacity(base.len() + self.key.len());
        url.push_str(base);
        for c in self.key.chars() {
            match c {
                '%' => url.push_str("%25"),
                '?' => url.push_str("%3F"),
                '#' => url.push_str("%23"),
                '@' => url.push_str("%40"),
                c => url.push(c),
            }
        }
        url
    }

    /// The store's URL up to the key, when the store named itself
    /// ([`with_store_url`](Self::with_store_url)).
    pub fn store_url(&self) -> Option<&str> {
        self.store_url.as_deref()
    }

    /// The same error, carrying the service's error code (`PreconditionFailed`,
    /// `SignatureDoesNotMatch`, an HTTP status for a bodiless answer).
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into().into_boxed_str());
        self
    }

    /// The same error, carrying the service's message or a transport detail.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into().into_boxed_str());
        self
    }

    /// The same error, carrying the service's request id.
    pub fn with_request_id(mut self, request_id: impl Into<String>) -> Self {
        self.request_id = Some(request_id.into().into_boxed_str());
        self
    }

    /// The same error, marked as a request that ran out of time.
    pub fn timed_out(mut self) -> Self {
        self.timed_out = true;
        self
    }

    /// The same error, marked as a request of which nothing was sent, so
    /// it took no effect (its kind stays as given: a not-sent request is
    /// still a [`StoreErrorKind::Transport`] failure, retried as one).
    pub fn not_sent(mut self) -> Self {
        self.delivery = Delivery::NotSent;
        self
    }

    /// The same error, marked as one that no retry can cure until someone
    /// changes the configuration (a server certificate this client does
    /// not trust, a proxy that refuses): [`StoreError::is_permanent`].
    pub fn permanent(mut self) -> Self {
        self.permanent = true;
        self
    }

    /// The same error, marked as the service's own answer (a 5xx).
    pub fn answered(mut self) -> Self {
        self.delivery = Delivery::Answered;
        self
    }

    /// The same error, marked as the service's request to slow down (a
    /// 429, or S3's `503 SlowDown`), with the wait it asked for
    /// (`Retry-After`) when it gave one. Its kind stays
    /// [`StoreErrorKind::Transport`], [`Delivery::Answered`]: no service
    /// documents that a throttled write took no effect, so it is settled as
    /// any unanswered write is, by reading.
    /// A wait over `u32::MAX` milliseconds (49 days) is kept as that.
    pub fn throttled(mut self, retry_after: Option<Duration>) -> Self {
        let ms = retry_after.map_or(0, |wait| wait.as_millis());
        self.throttle = u32::try_from(ms).unwrap_or(u32::MAX).min(u32::MAX - 1) + 1;
        self
    }

    /// Whether the service asked the client to slow down
    /// ([`throttled`](Self::throttled)).
    pub fn is_throttled(&self) -> bool {
        self.throttle > 0
    }

    /// How long the service asked the client to wait before the next
    /// request, when it said (`Retry-After`).
    pub fn retry_after(&self) -> Option<Duration> {
        (self.throttle > 1).then(|| Duration::from_millis(u64::from(self.throttle - 1)))
    }

    /// How far the request got.
    pub fn delivery(&self) -> Delivery {
        self.delivery
    }

    /// The same error, carrying the version of the object it is about (for
    /// [`StoreErrorKind::TooLarge`]: the version of the object not read).
    pub fn with_version(mut self, version: Version) -> Self {
        self.version = Some(Box::new(version));
        self
    }

    /// The version of the object the error is about, when the answer gave one.
    pub fn version(&self) -> Option<&Version> {
        self.version.as_deref()
    }

    /// What kind of answer the request got.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// The HTTP method, or the operation's name for a non-HTTP store.
    pub fn method(&self) -> &'static str {
        self.method
    }

    /// The object key the request was for.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The service's error code, when it gave one.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// The service's message or the transport's detail, when there is one.
    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    /// The service's request id, when it gave one.
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// Whether the request was abandoned at its deadline or timeout.
    pub fn is_timeout(&self) -> bool {
        self.timed_out
    }

    /// Whether the request may have taken effect although it failed: a
    /// [`StoreErrorKind::Transport`] failure of a request that was sent.
    pub fn may_have_landed(&self) -> bool {
        self.kind == StoreErrorKind::Transport && self.delivery != Delivery::NotSent
    }

    /// Whether a condition was refused: another writer acted.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self.kind,
            StoreErrorKind::AlreadyExists | StoreErrorKind::Precondition
        )
    }

    /// Whether retrying the same request cannot help until someone changes
    /// the configuration: refused credentials or permissions, a bucket
    /// that does not exist, or an error the store marked so
    /// ([`StoreError::permanent`]).
    pub fn is_permanent(&self) -> bool {
        self.permanent
            || self.kind == StoreErrorKind::PermissionDenied
            || self.code.as_deref() == Some("NoSuchBucket")
    }

    fn hint(&self) -> Option<&'static str> {
        match self.kind {
            StoreErrorKind::Transport if self.is_throttled() => Some(
                "the service is throttling requests (too many of this key or prefix): the \
                 request may or may not have taken effect; retry after a pause",
            ),
            StoreErrorKind::Transport => Some(match self.delivery {
                Delivery::Unknown => {
                    "the request may have taken effect; check the endpoint and network, then retry"
                }
                Delivery::NotSent => {
                    "nothing was sent, so the request took no effect and is safe to retry"
                }
                Delivery::Answered if matches!(self.method, "GET" | "HEAD") => {
                    "the service answered with an error (a read changes nothing); retry later"
                }
                Delivery::Answered => {
                    "the service answered with an error: the request may or may not have taken \
                     effect; retry later"
                }
            }),
            StoreErrorKind::PermissionDenied => {
                Some("check the credentials and the permissions granted on this key")
            }
            StoreErrorKind::Conflict => Some("another conditional write raced this one; retry"),
            StoreErrorKind::NotImplemented => Some(
                "this service or client cannot send the condition; use a service with \
                 conditional writes, or ask for a best-effort lease (BUCKET_LEASE_CONDITIONAL=off)",
            ),
            StoreErrorKind::Rejected if self.code.as_deref() == Some("NoSuchBucket") => {
                Some("the bucket does not exist: check its name in the URL, or create it")
            }
            _ => None,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match (self.kind, self.delivery) {
            (StoreErrorKind::Transport, Delivery::NotSent) => "not sent",
            (StoreErrorKind::Transport, Delivery::Answered) => "service error",
            (kind, _) => kind.describe(),
        };
        write!(f, "{} {}: {kind}", self.method, self.url())?;
        if self.timed_out {
            f.write_str(" (timed out)")?;
        }
        let mut details = Vec::new();
        match (&self.code, &self.message) {
            (Some(code), Some(message)) => details.push(format!("{code}: {message}")),
            (Some(code), None) => details.push(code.to_string()),
            (None, Some(message)) => details.push(message.to_string()),
            (None, None) => {}
        }
        if let Some(id) = &self.request_id {
            details.push(format!("request id {id}"));
        }
        if let Some(wait) = self.retry_after() {
            details.push(format!("retry after {wait:?}"));
        }
        if !details.is_empty() {
            write!(f, " ({})", details.join("; "))?;
        }
        if let Some(hint) = self.hint() {
            write!(f, "; {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for StoreError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_request_the_code_and_what_to_do() {
        let e = StoreError::new(StoreErrorKind::PermissionDenied, "PUT", "a/LEASE")
            .with_code("SignatureDoesNotMatch")
            .with_message("The request signature we calculated does not match")
            .with_request_id("R1");
        assert_eq!(
            e.to_string(),
            "PUT a/LEASE: permission denied (SignatureDoesNotMatch: The request signature we \
             calculated does not match; request id R1); check the credentials and the \
             permissions granted on this key"
        );
        let t = StoreError::new(StoreErrorKind::Transport, "GET", "k").timed_out();
        assert!(t.to_string().starts_with("GET k: no answer (timed out); "));
        assert!(t.may_have_landed() && t.is_timeout() && !t.is_refusal());
        let n = StoreError::new(StoreErrorKind::Transport, "PUT", "k")
            .with_message("could not connect to h:1")
            .not_sent();
        assert_eq!(
            n.to_string(),
            "PUT k: not sent (could not connect to h:1); nothing was sent, so the request took \
             no effect and is safe to retry"
        );
        assert!(!n.may_have_landed() && n.kind() == StoreErrorKind::Transport);
        let a = StoreError::new(StoreErrorKind::Transport, "PUT", "k")
            .with_code("SlowDown")
            .answered();
        assert_eq!(
            a.to_string(),
            "PUT k: service error (SlowDown); the service answered with an error: the request \
             may or may not have taken effect; retry later"
        );
        let read = StoreError::new(StoreErrorKind::Transport, "GET", "k")
            .with_code("SlowDown")
            .answered();
        assert_eq!(
            read.to_string(),
            "GET k: service error (SlowDown); the service answered with an error (a read changes \
             nothing); retry later"
        );
        assert!(a.may_have_landed());
    }

    #[test]
    fn a_store_named_on_the_error_is_named_in_its_message_and_the_key_stays_plain() {
        let e = StoreError::new(StoreErrorKind::Rejected, "GET", "jobs?x/LEASE")
            .with_code("NoSuchBucket")
            .with_store_url("s3://b/");
        assert_eq!(e.key(), "jobs?x/LEASE");
        assert_eq!(e.store_url(), Some("s3://b/"));
        assert_eq!(e.url(), "s3://b/jobs%3Fx/LEASE");
        assert_eq!(
            e.to_string(),
            "GET s3://b/jobs%3Fx/LEASE: rejected (NoSuchBucket); the bucket does not exist: \
             check its name in the URL, or create it"
        );
        let open =
            StoreError::new(StoreErrorKind::Rejected, "OPEN", "").with_store_url("file:///d");
        assert_eq!(open.url(), "file:///d");
        assert_eq!(
            StoreError::new(StoreErrorKind::NotFound, "GET", "k").url(),
            "k"
        );
        // The whole story, once: no source to repeat it.
        assert!(std::error::Error::source(&e).is_none());
    }

    #[test]
    fn refusals_are_the_two_refused_conditions() {
        for (kind, refusal) in [
            (StoreErrorKind::AlreadyExists, true),
            (StoreErrorKind::Precondition, true),
            (StoreErrorKind::Conflict, false),
            (StoreErrorKind::NotFound, false),
        ] {
            assert_eq!(StoreError::new(kind, "PUT", "k").is_refusal(), refusal);
        }
    }
}
