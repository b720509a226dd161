//! A strict in-memory [`Store`] that answers as AWS S3 does, and can be told
//! to misbehave as real services and networks do.
//!
//! Strict means: a create over an existing key is refused, an update whose
//! version differs or whose key is absent is refused, every write gets an
//! ETag never seen before, and a conditional delete checks the version.
//! Each [`Misbehaviour`] switch breaks exactly one of these promises, or
//! injects one kind of failure, so tests can show what the lease does on a
//! service that deviates.
//!
//! [`MemoryStore::versioned`] models a bucket with versioning on: every
//! answer then carries the object's version id as well as its ETag.
//!
//! It takes multipart uploads as S3 does (parts in any order, a part sent
//! twice keeps the last, a completion decided as a PUT in its mode), and
//! [`MemoryStore::uploads_open`] counts those neither completed nor
//! aborted.
//!
//! It is for unit and simulation tests; nothing persists.

use crate::clock::Clock;
use crate::multipart::{
    AbortUpload, BeginUpload, CompleteUpload, ObjectReader, UploadConditions, UploadPart,
    UploadedPart,
};
use crate::store::{
    DeleteMode, Object, PutMode, PutOptions, Store, StoreError, StoreErrorKind, Version,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod uploads;

/// One way the store can deviate from S3. Switches are set with
/// [`MemoryStore::set`] and stay on until cleared, except the counted
/// failures, which count down per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Misbehaviour {
    /// Accept `If-None-Match: *` writes over an existing key.
    IgnoreIfNoneMatch,
    /// Accept `If-Match` writes whatever the object's version.
    IgnoreIfMatch,
    /// Create the key when an `If-Match` write finds it absent (MinIO before
    /// its 2025 fix).
    CreateOnIfMatchAbsent,
    /// Refuse a create over an existing key with `304 Not Modified` rather
    /// than 412 (MinIO RELEASE.2023-11-20).
    NotModifiedOnCreate,
    /// The client cannot send conditions: every conditional write or delete
    /// answers [`StoreErrorKind::NotImplemented`].
    NoConditions,
    /// Conditional deletes answer [`StoreErrorKind::NotImplemented`]; writes
    /// stay strict.
    NoConditionalDelete,
    /// Accept `If-Match` on DELETE whatever the object's version: the
    /// delete removes the object (some services do; PUT stays strict).
    IgnoreIfMatchOnDelete,
    /// Answers carry no ETag: reads and writes return versions without one,
    /// as a service or proxy that strips the header does.
    NoEtags,
    /// Refuse every `If-Match` write, a right ETag too (wrong ones stay
    /// refused): Ceph RGW 16.2 answers 412 to an ETag sent with its quotes.
    RefuseOwnEtag,
    /// Complete a multipart upload whatever its condition says (PUT stays
    /// strict): a service that fences single writes but not uploads.
    IgnoreConditionOnCompletion,
}

/// A service's limit on the writes of one key: Cloudflare R2 takes "1 per
/// second" and answers `429 Too Many Requests` beyond it
/// ([`MemoryStore::limit_writes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteLimit {
    /// The shortest time between two counted writes of a key.
    pub interval: Duration,
    /// Which writes start a new interval.
    pub counts: WriteCount,
}

/// Which writes of a key start its [`WriteLimit`]'s interval: the two
/// readings of R2's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteCount {
    /// Only writes that took effect.
    Accepted,
    /// Every write the service decided, a refused condition's too; a write
    /// answered 429 does not (it was turned away before it was decided).
    Every,
}

/// The in-memory store. See the [module docs](self).
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
    next_etag: AtomicU64,
    /// Whether every write gets a version id too (a versioned bucket).
    versioned: bool,
    upload_conditions: UploadConditions,
}

/// The service's side of a [`WriteLimit`]: the last counted write of each
/// key, by the limit's clock.
#[derive(Debug)]
struct Limited {
    limit: WriteLimit,
    clock: Arc<dyn Clock>,
    last: HashMap<String, Instant>,
    throttled: u64,
}

#[derive(Debug, Default)]
struct State {
    objects: BTreeMap<String, Object>,
    switches: Vec<Misbehaviour>,
    lose_answers: usize,
    fail_requests: usize,
    conflicts: usize,
    requests: u64,
    puts: u64,
    read_cap: Option<usize>,
    limited: Option<Limited>,
    /// Multipart uploads begun and neither completed nor aborted, by id.
    uploads: HashMap<String, uploads::Pending>,
}

impl MemoryStore {
    /// An empty, strict store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty, strict store on a bucket with versioning on: every write
    /// gets a fresh version id (`mem-v…`) beside its fresh ETag, and the
    /// answers to writes and reads carry it, as S3's `x-amz-version-id`
    /// does. Only the current version is kept.
    pub fn versioned() -> Self {
        MemoryStore {
            versioned: true,
            ..Self::default()
        }
    }

    /// Turn `switch` on.
    pub fn set(&self, switch: Misbehaviour) {
        let mut s = self.lock();
        if !s.switches.contains(&switch) {
            s.switches.push(switch);
        }
    }

    /// Turn `switch` off.
    pub fn clear(&self, switch: Misbehaviour) {
        self.lock().switches.retain(|s| *s != switch);
    }

    /// The next `n` writes or deletes take effect, but their answers are
    /// lost: each returns [`StoreErrorKind::Transport`].
    pub fn lose_next_answers(&self, n: usize) {
        self.lock().lose_answers = n;
    }

    /// The next `n` requests of any kind fail with
    /// [`StoreErrorKind::Transport`] without taking effect.
    pub fn fail_next_requests(&self, n: usize) {
        self.lock().fail_requests = n;
    }

    /// The next `n` conditional writes answer [`StoreErrorKind::Conflict`]
    /// without taking effect, as S3 does under concurrent conditional writes.
    pub fn conflict_next_writes(&self, n: usize) {
        self.lock().conflicts = n;
    }

    /// Answer reads of objects larger than `bytes` with
    /// [`StoreErrorKind::TooLarge`] (carrying the object's version), as an
    /// HTTP client with a read cap does; `None` reads everything.
    pub fn set_read_cap(&self, bytes: Option<usize>) {
        self.lock().read_cap = bytes;
    }

    /// Answer as a service with `limit` does, by `clock`: a write of a key
    /// within the interval of its last counted write is answered as R2
    /// answers it (429, code `TooManyRequests`, `Retry-After` the time
    /// left), a throttled [`StoreErrorKind::Transport`] error, and takes no
    /// effect. The store does not space its own writes for it: wrap it in a
    /// [`SpacedStore`](crate::spacing::SpacedStore) per client for that.
    pub fn limit_writes(&self, limit: WriteLimit, clock: Arc<dyn Clock>) {
        self.lock().limited = Some(Limited {
            limit,
            clock,
            last: HashMap::new(),
            throttled: 0,
        });
    }

    /// How many writes the [`limit_writes`](Self::limit_writes) limit
    /// turned away.
    pub fn throttled(&self) -> u64 {
        self.lock().limited.as_ref().map_or(0, |l| l.throttled)
    }

    /// How many requests the store has answered (or failed).
    pub fn requests(&self) -> u64 {
        self.lock().requests
    }

    /// How many writes the store has been asked for.
    pub fn puts(&self) -> u64 {
        self.lock().puts
    }

    /// The bytes under `key`, bypassing every switch: for test assertions.
    pub fn peek(&self, key: &str) -> Option<Vec<u8>> {
        self.lock().objects.get(key).map(|o| o.body.clone())
    }

    /// The keys present, in order: for test assertions.
    pub fn keys(&self) -> Vec<String> {
        self.lock().objects.keys().cloned().collect()
    }

    /// Write `body` under `key` unconditionally, bypassing every switch and
    /// failure: for setting up a test.
    pub fn insert(&self, key: &str, body: &[u8]) -> Version {
        let version = self.fresh_version();
        self.lock().objects.insert(
            key.to_string(),
            Object {
                body: body.to_vec(),
                version: version.clone(),
                metadata: Vec::new(),
            },
        );
        version
    }

    /// A number never given before, for ETags and upload ids.
    fn fresh_number(&self) -> u64 {
        self.next_etag.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn fresh_version(&self) -> Version {
        let n = self.fresh_number();
        Version {
            etag: Some(format!("\"mem-{n:08x}\"")),
            version_id: self.versioned.then(|| format!("mem-v{n:08x}")),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    fn on(&self, switch: Misbehaviour) -> bool {
        self.switches.contains(&switch)
    }

    /// A throttled answer when the write limit turns this write of `key`
    /// away.
    fn turned_away(&mut self, method: &'static str, key: &str) -> Result<(), StoreError> {
        let Some(limited) = &mut self.limited else {
            return Ok(());
        };
        let now = limited.clock.now();
        let Some(open) = limited
            .last
            .get(key)
            .map(|last| *last + limited.limit.interval)
            .filter(|open| *open > now)
        else {
            return Ok(());
        };
        limited.throttled += 1;
        let wait = open - now;
        Err(StoreError::new(StoreErrorKind::Transport, method, key)
            .answered()
            .throttled(Some(wait))
            .with_code("TooManyRequests")
            .with_message(format!(
                "one write of a key per {:?}: this key was written {:?} ago",
                limited.limit.interval,
                limited.limit.interval - wait
            )))
    }

    /// Count a decided write of `key` (`applied` when it took effect)
    /// against the write limit.
    fn decided(&mut self, key: &str, applied: bool) {
        if let Some(limited) = &mut self.limited {
            if applied || limited.limit.counts == WriteCount::Every {
                let now = limited.clock.now();
                limited.last.insert(key.to_string(), now);
            }
        }
    }

    /// Count the request, and fail it if a failure is queued.
    fn begin(&mut self, method: &'static str, key: &str) -> Result<(), StoreError> {
        self.requests += 1;
        if self.fail_requests > 0 {
            self.fail_requests -= 1;
            return Err(StoreError::new(StoreErrorKind::Transport, method, key)
                .with_message("injected failure: the request did not arrive"));
        }
        Ok(())
    }

    /// Turn a success into a lost answer if one is queued.
    fn answer<T>(&mut self, method: &'static str, key: &str, ok: T) -> Result<T, StoreError> {
        if self.lose_answers > 0 {
            self.lose_answers -= 1;
            return Err(StoreError::new(StoreErrorKind::Transport, method, key)
                .timed_out()
                .with_message("injected lost answer: the request took effect"));
        }
        Ok(ok)
    }
}

fn matches(current: &Version, wanted: &Version) -> bool {
    current.etag == wanted.etag
        && (wanted.version_id.is_none() || current.version_id == wanted.version_id)
}

/// How a memory store names itself on its errors ([`StoreError::url`]):
/// `memory:///p/LEASE`. It has no bucket, only keys.
const MEMORY_URL: &str = "memory:///";

/// `error`, naming the memory store.
fn named(error: StoreError) -> StoreError {
    error.with_store_url(MEMORY_URL)
}

impl Store for MemoryStore {
    /// Every call answers at once: nothing here waits.
    fn answers_at_once(&self) -> bool {
        true
    }

    fn store_url(&self) -> Option<&str> {
        Some(MEMORY_URL)
    }

    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.get_object(key, deadline).map_err(named)
    }

    /// The version and metadata of an object of any size: the read cap
    /// bounds bodies read, as an HTTP client's does, not a HEAD.
    fn head(&self, key: &str, _deadline: Option<Instant>) -> Result<Object, StoreError> {
        let mut object = self.read_uncapped("HEAD", key).map_err(named)?;
        object.body = Vec::new();
        Ok(object)
    }

    /// A stream of an object of any size: the read cap does not apply.
    fn open(&self, key: &str, _deadline: Option<Instant>) -> Result<ObjectReader, StoreError> {
        let mut object = self.read_uncapped("GET", key).map_err(named)?;
        let body = std::mem::take(&mut object.body);
        Ok(ObjectReader {
            object,
            body: Box::new(std::io::Cursor::new(body)),
        })
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        self.put_object(key, body, options).map_err(named)
    }

    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        self.delete_object(key, mode, deadline).map_err(named)
    }

    fn upload_conditions(&self) -> Option<&UploadConditions> {
        Some(&self.upload_conditions)
    }

    fn begin_upload(&self, begin: &BeginUpload<'_>) -> Result<String, StoreError> {
        self.begin_upload_in(begin)
    }

    fn upload_part(&self, part: &UploadPart<'_>) -> Result<UploadedPart, StoreError> {
        self.upload_part_in(part)
    }

    fn complete_upload(&self, complete: &CompleteUpload<'_>) -> Result<Version, StoreError> {
        self.complete_upload_in(complete)
    }

    fn abort_upload(&self, abort: &AbortUpload<'_>) -> Result<(), StoreError> {
        self.abort_upload_in(abort)
    }
}

impl MemoryStore {
    /// The object at `key`, whatever its size, as the switches show it.
    fn read_uncapped(&self, method: &'static str, key: &str) -> Result<Object, StoreError> {
        let mut s = self.lock();
        s.begin(method, key)?;
        let strip = s.on(Misbehaviour::NoEtags);
        let mut object = s.objects.get(key).cloned().ok_or_else(|| {
            StoreError::new(StoreErrorKind::NotFound, method, key).with_code("NoSuchKey")
        })?;
        if strip {
            object.version.etag = None;
        }
        Ok(object)
    }

    fn get_object(&self, key: &str, _deadline: Option<Instant>) -> Result<Object, StoreError> {
        let mut s = self.lock();
        s.begin("GET", key)?;
        let strip = s.on(Misbehaviour::NoEtags);
        match s.objects.get(key) {
            Some(o) if s.read_cap.is_some_and(|cap| o.body.len() > cap) => {
                let mut version = o.version.clone();
                if strip {
                    version.etag = None;
                }
                Err(StoreError::new(StoreErrorKind::TooLarge, "GET", key)
                    .with_message(format!("{} bytes, over the read cap", o.body.len()))
                    .with_version(version))
            }
            Some(o) => {
                let mut object = o.clone();
                if strip {
                    object.version.etag = None;
                }
                Ok(object)
            }
            None => {
                Err(StoreError::new(StoreErrorKind::NotFound, "GET", key).with_code("NoSuchKey"))
            }
        }
    }

    fn put_object(
        &self,
        key: &str,
        body: &[u8],
        options: &PutOptions,
    ) -> Result<Version, StoreError> {
        let version = self.fresh_version();
        let mut s = self.lock();
        s.puts += 1;
        s.begin("PUT", key)?;
        s.turned_away("PUT", key)?;
        let decided = Self::put_in(&mut s, "PUT", key, body, options, version);
        s.decided(key, decided.is_ok());
        s.answer("PUT", key, decided?)
    }

    /// The write itself, decided on the locked state; `Ok` when it took
    /// effect.
    fn put_in(
        s: &mut State,
        method: &'static str,
        key: &str,
        body: &[u8],
        options: &PutOptions,
        version: Version,
    ) -> Result<Version, StoreError> {
        let refuse = |kind, code: &str| Err(StoreError::new(kind, method, key).with_code(code));
        let existing = s.objects.get(key).map(|o| o.version.clone());
        match &options.mode {
            PutMode::Overwrite => {}
            _ if s.on(Misbehaviour::NoConditions) => {
                return Err(StoreError::new(StoreErrorKind::NotImplemented, method, key)
                    .with_message("conditional writes are switched off"));
            }
            _ if s.conflicts > 0 => {
                s.conflicts -= 1;
                return refuse(StoreErrorKind::Conflict, "ConditionalRequestConflict");
            }
            PutMode::Create => {
                if existing.is_some() && !s.on(Misbehaviour::IgnoreIfNoneMatch) {
                    return if s.on(Misbehaviour::NotModifiedOnCreate) {
                        refuse(StoreErrorKind::AlreadyExists, "304 Not Modified")
                    } else {
                        refuse(StoreErrorKind::AlreadyExists, "PreconditionFailed")
                    };
                }
            }
            PutMode::Update(wanted) => match &existing {
                None if !s.on(Misbehaviour::CreateOnIfMatchAbsent)
                    && !s.on(Misbehaviour::IgnoreIfMatch) =>
                {
                    return refuse(StoreErrorKind::Precondition, "NoSuchKey");
                }
                Some(current)
                    if (!matches(current, wanted) || s.on(Misbehaviour::RefuseOwnEtag))
                        && !s.on(Misbehaviour::IgnoreIfMatch) =>
                {
                    return refuse(StoreErrorKind::Precondition, "PreconditionFailed");
                }
                _ => {}
            },
        }
        s.objects.insert(
            key.to_string(),
            Object {
                body: body.to_vec(),
                version: version.clone(),
                metadata: options.metadata.clone(),
            },
        );
        Ok(if s.on(Misbehaviour::NoEtags) {
            Version::default()
        } else {
            version
        })
    }

    fn delete_object(
        &self,
        key: &str,
        mode: &DeleteMode,
        _deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        let mut s = self.lock();
        s.begin("DELETE", key)?;
        s.turned_away("DELETE", key)?;
        let decided = Self::delete_in(&mut s, key, mode);
        s.decided(key, decided.is_ok());
        decided?;
        s.answer("DELETE", key, ())
    }

    /// The delete itself, decided on the locked state; `Ok` when it took
    /// effect (or the key was already absent).
    fn delete_in(s: &mut State, key: &str, mode: &DeleteMode) -> Result<(), StoreError> {
        if let DeleteMode::IfVersion(wanted) = mode {
            if s.on(Misbehaviour::NoConditions) || s.on(Misbehaviour::NoConditionalDelete) {
                return Err(
                    StoreError::new(StoreErrorKind::NotImplemented, "DELETE", key)
                        .with_message("conditional deletes are switched off"),
                );
            }
            if let Some(current) = s.objects.get(key) {
                if !matches(&current.version, wanted) && !s.on(Misbehaviour::IgnoreIfMatchOnDelete)
                {
                    return Err(StoreError::new(StoreErrorKind::Precondition, "DELETE", key)
                        .with_code("PreconditionFailed"));
                }
            }
        }
        s.objects.remove(key);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_memory_store_and_keep_the_plain_key() {
        let store = MemoryStore::new();
        let e = store.get("p/LEASE", None).unwrap_err();
        assert_eq!(
            (e.key(), e.url().as_str()),
            ("p/LEASE", "memory:///p/LEASE")
        );
        assert!(
            e.to_string()
                .starts_with("GET memory:///p/LEASE: not found"),
            "{e}"
        );
        assert_eq!(store.store_url(), Some("memory:///"));
    }

    fn put(store: &MemoryStore, mode: PutMode) -> Result<Version, StoreErrorKind> {
        store
            .put("k", b"v", &PutOptions::new(mode))
            .map_err(|e| e.kind())
    }

    #[test]
    fn strict_store_refuses_every_false_condition() {
        let store = MemoryStore::new();
        let fake = Version::etag("\"never\"");
        assert_eq!(
            put(&store, PutMode::Update(fake.clone())),
            Err(StoreErrorKind::Precondition)
        );
        assert!(
            store.keys().is_empty(),
            "If-Match on an absent key creates nothing"
        );
        let v1 = put(&store, PutMode::Create).unwrap();
        assert_eq!(
            put(&store, PutMode::Create),
            Err(StoreErrorKind::AlreadyExists)
        );
        assert_eq!(
            put(&store, PutMode::Update(fake.clone())),
            Err(StoreErrorKind::Precondition)
        );
        let v2 = put(&store, PutMode::Update(v1.clone())).unwrap();
        assert_ne!(v1, v2, "every write gets a fresh ETag");
        let del = |v: &Version| {
            store
                .delete("k", &DeleteMode::IfVersion(v.clone()), None)
                .map_err(|e| e.kind())
        };
        assert_eq!(del(&v1), Err(StoreErrorKind::Precondition));
        assert_eq!(del(&v2), Ok(()));
        assert_eq!(del(&v2), Ok(()), "deleting an absent key succeeds");
    }

    #[test]
    fn each_switch_breaks_its_own_promise() {
        let store = MemoryStore::new();
        let v1 = put(&store, PutMode::Create).unwrap();
        let fake = PutMode::Update(Version::etag("\"never\""));

        store.set(Misbehaviour::NotModifiedOnCreate);
        let e = store
            .put("k", b"v", &PutOptions::new(PutMode::Create))
            .unwrap_err();
        assert_eq!(
            (e.kind(), e.code()),
            (StoreErrorKind::AlreadyExists, Some("304 Not Modified"))
        );
        store.clear(Misbehaviour::NotModifiedOnCreate);

        store.set(Misbehaviour::IgnoreIfNoneMatch);
        assert!(put(&store, PutMode::Create).is_ok());
        assert_eq!(put(&store, fake.clone()), Err(StoreErrorKind::Precondition));
        store.clear(Misbehaviour::IgnoreIfNoneMatch);

        store.set(Misbehaviour::IgnoreIfMatch);
        assert!(put(&store, fake.clone()).is_ok());
        assert_eq!(
            put(&store, PutMode::Create),
            Err(StoreErrorKind::AlreadyExists)
        );
        store.clear(Misbehaviour::IgnoreIfMatch);
        assert_eq!(
            put(&store, PutMode::Update(v1)),
            Err(StoreErrorKind::Precondition)
        );

        store.set(Misbehaviour::CreateOnIfMatchAbsent);
        let absent = store.put("other", b"v", &PutOptions::new(fake.clone()));
        assert!(absent.is_ok() && store.peek("other").is_some());
        store.clear(Misbehaviour::CreateOnIfMatchAbsent);

        store.set(Misbehaviour::IgnoreIfMatchOnDelete);
        let stale = DeleteMode::IfVersion(Version::etag("\"never\""));
        assert!(store.delete("other", &stale, None).is_ok() && store.peek("other").is_none());
        store.clear(Misbehaviour::IgnoreIfMatchOnDelete);

        store.set(Misbehaviour::NoEtags);
        let written = store.put("k", b"v", &PutOptions::new(PutMode::Overwrite));
        assert_eq!(written.unwrap().etag, None);
        assert_eq!(store.get("k", None).unwrap().version.etag, None);
        store.clear(Misbehaviour::NoEtags);

        store.set_read_cap(Some(0));
        let e = store.get("k", None).unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::TooLarge);
        assert!(e.version().is_some_and(|v| v.etag.is_some()));
        store.set_read_cap(None);

        store.set(Misbehaviour::NoConditions);
        assert_eq!(
            put(&store, PutMode::Create),
            Err(StoreErrorKind::NotImplemented)
        );
        assert!(put(&store, PutMode::Overwrite).is_ok());
    }

    #[test]
    fn injected_failures_count_down() {
        let store = MemoryStore::new();
        store.fail_next_requests(1);
        assert_eq!(put(&store, PutMode::Create), Err(StoreErrorKind::Transport));
        assert!(store.keys().is_empty(), "a failed request does not land");

        store.lose_next_answers(1);
        assert_eq!(put(&store, PutMode::Create), Err(StoreErrorKind::Transport));
        assert!(store.peek("k").is_some(), "a lost answer's write landed");

        store.conflict_next_writes(2);
        let current = store.get("k", None).unwrap().version;
        assert_eq!(
            put(&store, PutMode::Update(current.clone())),
            Err(StoreErrorKind::Conflict)
        );
        assert_eq!(
            put(&store, PutMode::Update(current.clone())),
            Err(StoreErrorKind::Conflict)
        );
        assert!(put(&store, PutMode::Update(current)).is_ok());
        assert_eq!(store.puts(), 5);
    }
}
