//! The conformance suite every [`Store`] must pass (feature `conformance`).
//!
//! Each check is a public function taking the store and a key prefix. It
//! sends its requests to keys under that prefix, and panics when the store
//! breaks a promise of the [`store`](crate::store) module, with a message
//! naming the check, the request, what the store answered and what it should
//! have. A check that passes removes the keys it wrote. [`run_all`] runs every
//! check and reports what the store can do as [`Capabilities`].
//!
//! Give every run a prefix no other run uses (against a real bucket, a random
//! one): the checks expect their keys to start absent.
//!
//! ```
//! # extern crate bucket_lease_core as bucket_lease;
//! use bucket_lease::{conformance, memory::MemoryStore};
//!
//! let store = MemoryStore::new();
//! let capabilities = conformance::run_all(&store, "conformance/doc");
//! assert!(capabilities.conditional_delete);
//! ```
//!
//! What the checks assume of a service, and what they do not:
//!
//! - ETags are compared only as the opaque strings a service returns. S3's
//!   ETag is the MD5 of the body, so two writes of the same bytes may share
//!   one; every write here sends bytes the key has not held before, and a
//!   repeated ETag is a failure.
//! - A conditional delete ([`DeleteMode::IfVersion`]) may be answered
//!   [`StoreErrorKind::NotImplemented`], provided nothing is deleted; the
//!   report says so. A store on a service that ignores `If-Match` on DELETE
//!   (Ceph RGW 16.2) deletes on a stale version: [`run_all`] reports that
//!   too ([`Capabilities::ignores_delete_conditions`]) rather than failing,
//!   because a lease never deletes conditionally; [`delete_if_version`] on
//!   its own fails it. Deleting an absent key, with or without a
//!   condition, must succeed.
//! - Every request carries a deadline [`REQUEST_TIMEOUT`] away, so a
//!   service that never answers fails the run rather than hanging it.

use crate::store::{
    DeleteMode, Object, PutMode, PutOptions, Store, StoreError, StoreErrorKind, Version,
};
use std::collections::HashSet;
use std::fmt::Debug;
use std::time::{Duration, Instant};

/// The deadline each request of the suite carries, from when it is sent.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How many times one increment of [`compare_and_swap_race`] may be refused
/// before the check gives up on the store making progress.
const MAX_ATTEMPTS: usize = 1000;

/// What [`run_all`] found the store can do, beyond what every store must.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Whether the store honours [`DeleteMode::IfVersion`]; `false` when it
    /// answers [`StoreErrorKind::NotImplemented`] (and deletes nothing), or
    /// when it ignores the condition.
    pub conditional_delete: bool,
    /// Whether a [`DeleteMode::IfVersion`] with a stale version deleted the
    /// object: the store sends the condition and the service ignores it.
    /// Nothing in a lease deletes conditionally (a release rewrites the
    /// record); code of your own that does must not run on such a store.
    pub ignores_delete_conditions: bool,
}

/// Run every check, each under its own key below `prefix`, and report what
/// the store can do. The race runs 5 workers × 10 increments. Conditional
/// deletes are checked by [`delete_condition`]: a store whose service
/// ignores their condition is reported, not failed.
///
/// # Panics
///
/// When the store fails a check; the message names the check.
pub fn run_all(store: &dyn Store, prefix: &str) -> Capabilities {
    absent_keys(store, prefix);
    create_only(store, prefix);
    update_if_version(store, prefix);
    update_on_absent_key(store, prefix);
    overwrite(store, prefix);
    versions_round_trip(store, prefix);
    metadata_round_trip(store, prefix);
    delete_unconditional(store, prefix);
    let delete = delete_condition(store, prefix);
    compare_and_swap_race(store, prefix, 5, 10);
    Capabilities {
        conditional_delete: delete == DeleteCondition::Honoured,
        ignores_delete_conditions: delete == DeleteCondition::Ignored,
    }
}

/// A read of a key never written answers [`StoreErrorKind::NotFound`]; an
/// unconditional delete of it succeeds and creates nothing.
///
/// # Panics
///
/// When the store answers otherwise.
pub fn absent_keys(store: &dyn Store, prefix: &str) {
    let c = Check::new("absent_keys", store, prefix, "absent");
    c.expect_absent("of a key never written");
    c.expect_delete(
        &DeleteMode::Unconditional,
        "an unconditional delete of an absent key",
    );
    c.expect_absent("after deleting an absent key");
}

/// A create-only write ([`PutMode::Create`]) lands on an absent key and is
/// refused with [`StoreErrorKind::AlreadyExists`] on an existing one, which
/// keeps its bytes and version.
///
/// # Panics
///
/// When the store answers otherwise.
pub fn create_only(store: &dyn Store, prefix: &str) {
    let c = Check::new("create_only", store, prefix, "create");
    let v1 = c.expect_put(b"first", PutMode::Create, "a create on an absent key");
    c.expect_object(b"first", &v1, "after the create");
    c.expect_refused(
        b"second",
        PutMode::Create,
        StoreErrorKind::AlreadyExists,
        "a create over an existing object",
    );
    c.expect_object(b"first", &v1, "after the refused create");
    c.clean_up();
}

/// An update ([`PutMode::Update`]) with the current version lands and
/// returns a new version; one with a stale or made-up version is refused
/// with [`StoreErrorKind::Precondition`] and changes nothing.
///
/// # Panics
///
/// When the store answers otherwise.
pub fn update_if_version(store: &dyn Store, prefix: &str) {
    let c = Check::new("update_if_version", store, prefix, "update");
    let v1 = c.expect_put(b"one", PutMode::Create, "the first write");
    let v2 = c.expect_put(
        b"two",
        PutMode::Update(v1.clone()),
        "an update with the current version",
    );
    c.expect_object(b"two", &v2, "after the update");
    c.expect_refused(
        b"three",
        PutMode::Update(v1),
        StoreErrorKind::Precondition,
        "an update with a stale version",
    );
    c.expect_refused(
        b"four",
        PutMode::Update(made_up_version()),
        StoreErrorKind::Precondition,
        "an update with a version never issued",
    );
    c.expect_object(b"two", &v2, "after the refused updates");
    c.clean_up();
}

/// An update of an absent key is refused with
/// [`StoreErrorKind::Precondition`] and does not create it, whether the
/// version is made up or one the key had before it was deleted.
///
/// # Panics
///
/// When the store answers otherwise.
pub fn update_on_absent_key(store: &dyn Store, prefix: &str) {
    let c = Check::new("update_on_absent_key", store, prefix, "update-absent");
    c.expect_refused(
        b"made up",
        PutMode::Update(made_up_version()),
        StoreErrorKind::Precondition,
        "an update of an absent key",
    );
    c.expect_absent("after the refused update of an absent key");
    let v1 = c.expect_put(b"before", PutMode::Create, "a create");
    c.expect_delete(&DeleteMode::Unconditional, "the delete of that object");
    c.expect_refused(
        b"after",
        PutMode::Update(v1),
        StoreErrorKind::Precondition,
        "an update of a deleted key with the version it had",
    );
    c.expect_absent("after the refused update of a deleted key");
}

/// An unconditional write ([`PutMode::Overwrite`]) lands on an absent key and
/// replaces an existing one, with a new version each time.
///
/// # Panics
///
/// When the store answers otherwise.
pub fn overwrite(store: &dyn Store, prefix: &str) {
    let c = Check::new("overwrite", store, prefix, "overwrite");
    let v1 = c.expect_put(
        b"first",
        PutMode::Overwrite,
        "an overwrite of an absent key",
    );
    c.expect_object(b"first", &v1, "after the first overwrite");
    let v2 = c.expect_put(b"second", PutMode::Overwrite, "an overwrite of an object");
    c.expect_fresh(std::slice::from_ref(&v1), &v2, "the second overwrite");
    c.expect_object(b"second", &v2, "after the second overwrite");
    c.clean_up();
}

/// Each write, in every mode, returns the version a read then returns, and
/// no two writes share a version.
///
/// # Panics
///
/// When the store answers otherwise.
pub fn versions_round_trip(store: &dyn Store, prefix: &str) {
    let c = Check::new("versions_round_trip", store, prefix, "versions");
    let mut seen: Vec<Version> = Vec::new();
    for round in 0..6 {
        let mode = match seen.last() {
            None => PutMode::Create,
            Some(last) if round % 2 == 1 => PutMode::Update(last.clone()),
            Some(_) => PutMode::Overwrite,
        };
        let body = format!("round {round}");
        let what = format!("write {round} ({})", mode_name(&mode));
        let version = c.expect_put(body.as_bytes(), mode, &what);
        c.expect_fresh(&seen, &version, &what);
        c.expect_object(body.as_bytes(), &version, &format!("after {what}"));
        seen.push(version);
    }
    c.clean_up();
    let v = c.expect_put(b"recreated", PutMode::Create, "a create after a delete");
    c.expect_fresh(&seen, &v, "the create after a delete");
    c.clean_up();
}

/// User metadata written with an object is read back with it, and the next
/// write replaces it (rather than merging).
///
/// # Panics
///
/// When the store answers otherwise.
pub fn metadata_round_trip(store: &dyn Store, prefix: &str) {
    let c = Check::new("metadata_round_trip", store, prefix, "metadata");
    let options = PutOptions::new(PutMode::Create)
        .with_metadata("owner", "conformance-suite")
        .with_metadata("note", "two words");
    c.expect_put_with(b"with metadata", &options, "a create with metadata");
    c.expect_metadata(&[("note", "two words"), ("owner", "conformance-suite")]);
    let options = PutOptions::new(PutMode::Overwrite).with_metadata("owner", "second");
    c.expect_put_with(
        b"other metadata",
        &options,
        "an overwrite with other metadata",
    );
    c.expect_metadata(&[("owner", "second")]);
    c.expect_put(
        b"no metadata",
        PutMode::Overwrite,
        "an overwrite without metadata",
    );
    c.expect_metadata(&[]);
    c.clean_up();
}

/// An unconditional delete removes the object: a read then answers
/// [`StoreErrorKind::NotFound`], a second delete succeeds, and a create-only
/// write lands again.
///
/// # Panics
///
/// When the store answers otherwise.
pub fn delete_unconditional(store: &dyn Store, prefix: &str) {
    let c = Check::new("delete_unconditional", store, prefix, "delete");
    c.expect_put(b"doomed", PutMode::Create, "a create");
    c.expect_delete(&DeleteMode::Unconditional, "an unconditional delete");
    c.expect_absent("after the delete");
    c.expect_delete(&DeleteMode::Unconditional, "a second unconditional delete");
    let v = c.expect_put(b"reborn", PutMode::Create, "a create after the delete");
    c.expect_object(b"reborn", &v, "after the create");
    c.clean_up();
}

/// A conditional delete ([`DeleteMode::IfVersion`]) with a stale version is
/// refused with [`StoreErrorKind::Precondition`] and one with the current
/// version removes the object; once absent, a conditional delete succeeds.
///
/// Returns `false` when the store answers [`StoreErrorKind::NotImplemented`]
/// to both the stale and the current version and deletes nothing, which a
/// store may do; `true` when it honours the condition.
///
/// # Panics
///
/// When the store ignores the condition, or answers otherwise.
pub fn delete_if_version(store: &dyn Store, prefix: &str) -> bool {
    match delete_condition(store, prefix) {
        DeleteCondition::Honoured => true,
        DeleteCondition::NotImplemented => false,
        DeleteCondition::Ignored => Check::new("delete_if_version", store, prefix, "delete-if")
            .fail(format_args!(
                "a conditional delete with a stale version answered Ok(()) and deleted the \
                 object; expected a Precondition refusal (or NotImplemented, deleting nothing)"
            )),
    }
}

/// What a store does with a [`DeleteMode::IfVersion`], as
/// [`delete_condition`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteCondition {
    /// A stale version is refused with [`StoreErrorKind::Precondition`],
    /// the current one deletes.
    Honoured,
    /// Both are answered [`StoreErrorKind::NotImplemented`], and nothing is
    /// deleted.
    NotImplemented,
    /// A stale version deletes the object: the condition is ignored.
    Ignored,
}

/// The checks of [`delete_if_version`], telling a store that ignores the
/// condition ([`DeleteCondition::Ignored`]: a delete with a stale version
/// answered success and the object is gone) from one that breaks the
/// contract otherwise.
///
/// # Panics
///
/// When the store answers otherwise than one of the three
/// [`DeleteCondition`]s: a stale conditional delete that succeeds and
/// leaves the object, a `NotImplemented` that deleted, a refusal that is
/// not `Precondition`, a current version refused.
pub fn delete_condition(store: &dyn Store, prefix: &str) -> DeleteCondition {
    let c = Check::new("delete_if_version", store, prefix, "delete-if");
    let v1 = c.expect_put(b"one", PutMode::Create, "a create");
    let v2 = c.expect_put(b"two", PutMode::Update(v1.clone()), "an update");
    let stale = DeleteMode::IfVersion(v1);
    let current = DeleteMode::IfVersion(v2.clone());
    match c.delete(&stale) {
        Err(e) if e.kind() == StoreErrorKind::NotImplemented => {
            c.expect_object(
                b"two",
                &v2,
                "after a conditional delete answered NotImplemented",
            );
            match c.delete(&current) {
                Err(e) if e.kind() == StoreErrorKind::NotImplemented => {}
                other => c.fail(format_args!(
                    "a conditional delete with the current version answered {}, but one with a \
                     stale version answered NotImplemented; a store that cannot send the \
                     condition must say so for both",
                    answered(&other)
                )),
            }
            c.expect_object(
                b"two",
                &v2,
                "after a conditional delete answered NotImplemented",
            );
            c.clean_up();
            return DeleteCondition::NotImplemented;
        }
        Err(e) if e.kind() == StoreErrorKind::Precondition => {}
        Ok(()) => match c.store.get(&c.key, deadline()) {
            Err(e) if e.kind() == StoreErrorKind::NotFound => {
                c.expect_delete(&current, "a conditional delete of an absent key");
                c.expect_absent("after the conditional delete of an absent key");
                return DeleteCondition::Ignored;
            }
            other => c.fail(format_args!(
                "a conditional delete with a stale version answered Ok(()), and a read after it \
                 answered {}; expected a Precondition refusal (or NotImplemented, deleting \
                 nothing)",
                answered(&other)
            )),
        },
        other => c.fail(format_args!(
            "a conditional delete with a stale version answered {}; expected a Precondition \
             refusal (or NotImplemented, deleting nothing)",
            answered(&other)
        )),
    }
    c.expect_object(b"two", &v2, "after the refused conditional delete");
    c.expect_delete(&current, "a conditional delete with the current version");
    c.expect_absent("after the conditional delete");
    c.expect_delete(&current, "a conditional delete of an absent key");
    c.expect_absent("after the conditional delete of an absent key");
    DeleteCondition::Honoured
}

/// `workers` threads each add 1 to one counter object `increments` times,
/// each increment a read then an update with the version read: re-read on a
/// [`StoreErrorKind::Precondition`] refusal, retry after a short jittered
/// pause on [`StoreErrorKind::Conflict`], and decide by reading after a
/// [`StoreErrorKind::Transport`] answer (a 5xx, or no answer: the write may
/// have landed), as a lease does. Each increment adds a token of its own
/// to the counter, so a read tells whether a write whose answer was an
/// error landed: counted once if it did, tried again if not. The counter
/// must end at exactly `workers × increments`, and every write known to
/// have landed by its answer must have returned a version no other write
/// returned.
///
/// # Panics
///
/// When an increment is lost or duplicated, when a request fails otherwise,
/// or when one increment is refused 1000 times in a row.
pub fn compare_and_swap_race(store: &dyn Store, prefix: &str, workers: usize, increments: usize) {
    let c = Check::new("compare_and_swap_race", store, prefix, "counter");
    let start = c.expect_put(b"0", PutMode::Overwrite, "the counter's first write");
    let accepted: Vec<Option<Version>> = std::thread::scope(|scope| {
        let c = &c;
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                scope.spawn(move || {
                    (0..increments)
                        .map(|i| c.increment(&format!("w{w}.{i}")))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let total = workers * increments;
    let end = c.read("the final read");
    let count = c.counter(&end).0;
    if count != total {
        c.fail(format_args!(
            "{workers} workers × {increments} increments ended at {count}, not {total}: the \
             store lost or duplicated compare-and-swap writes"
        ));
    }
    let known: Vec<&Version> = accepted.iter().flatten().collect();
    let mut distinct: HashSet<&Version> = known.iter().copied().collect();
    distinct.insert(&start);
    if distinct.len() != known.len() + 1 {
        c.fail(format_args!(
            "{} accepted writes returned only {} distinct versions",
            known.len() + 1,
            distinct.len()
        ));
    }
    c.clean_up();
}

/// A version no store issues.
/// What a store may do to a request, as [`deadline_kept`] sees it: the
/// instants at which bytes of requests reached the service, as seen by a
/// recorder the caller puts in front of it (a loopback server or proxy).
/// A store that has no wire (a local directory) passes a recorder that saw
/// nothing.
pub trait Arrivals {
    /// Every instant at which bytes of a request reached the service since
    /// the last call (the recorder forgets them once returned).
    fn take(&self) -> Vec<Instant>;
}

/// A recorder for a store with no wire: it never saw a byte.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoWire;

impl Arrivals for NoWire {
    fn take(&self) -> Vec<Instant> {
        Vec::new()
    }
}

/// The deadline rule of the [`store`](crate::store) module, under a
/// condition the caller has set up to make the store slow (a credentials
/// source that hangs, a connection that is never accepted, a TLS handshake
/// that never ends, a lock another process holds): each kind of request,
/// sent with a deadline `budget` away, returns by its deadline plus
/// [`DEADLINE_SLACK`](crate::store::DEADLINE_SLACK), and
/// `arrivals` saw no byte of it reach the service after its deadline.
/// Returns what each request (named by its method) got, for the caller to
/// check: a request the condition does not hinder (a local directory's
/// reads take no lock) may succeed.
///
/// # Panics
///
/// When a request returns late or reached the service after its deadline.
pub fn deadline_kept(
    store: &dyn Store,
    prefix: &str,
    budget: Duration,
    arrivals: &dyn Arrivals,
) -> Vec<(&'static str, Result<(), StoreError>)> {
    use crate::store::DEADLINE_SLACK;
    let check = Check::new("deadline_kept", store, prefix, "deadline");
    let _ = arrivals.take();
    let stale = made_up_version();
    let key = check.key.as_str();
    let put = |mode: PutMode| {
        move |deadline: Instant| {
            let options = PutOptions::new(mode.clone()).with_deadline(Some(deadline));
            store.put(key, b"deadline_kept", &options).map(|_| ())
        }
    };
    type Request<'r> = Box<dyn Fn(Instant) -> Result<(), StoreError> + 'r>;
    let requests: Vec<(&'static str, Request<'_>)> = vec![
        ("GET", Box::new(|d| store.get(key, Some(d)).map(|_| ()))),
        ("HEAD", Box::new(|d| store.head(key, Some(d)).map(|_| ()))),
        ("PUT (create-only)", Box::new(put(PutMode::Create))),
        (
            "PUT (if-match)",
            Box::new(put(PutMode::Update(stale.clone()))),
        ),
        ("PUT (overwrite)", Box::new(put(PutMode::Overwrite))),
        (
            "DELETE",
            Box::new(|d| store.delete(key, &DeleteMode::Unconditional, Some(d))),
        ),
    ];
    let mut outcomes = Vec::new();
    for (what, request) in &requests {
        let deadline = Instant::now() + budget;
        let result = request(deadline);
        let returned = Instant::now();
        if returned > deadline + DEADLINE_SLACK {
            check.fail(format_args!(
                "{what} with a deadline {budget:?} away returned {:?} after it ({}); the \
                 store must return by its deadline plus {DEADLINE_SLACK:?}",
                returned - deadline,
                answered(&result)
            ));
        }
        let late: Vec<Duration> = arrivals
            .take()
            .into_iter()
            .filter(|&at| at > deadline)
            .map(|at| at - deadline)
            .collect();
        if !late.is_empty() {
            check.fail(format_args!(
                "{what}: bytes reached the service {late:?} after the request's deadline \
                 ({}); nothing may leave after it",
                answered(&result)
            ));
        }
        outcomes.push((*what, result));
    }
    // A write the condition did not stop left the key: remove it, bounded
    // as the checks were (the condition may stop this too).
    let _ = store.delete(
        key,
        &DeleteMode::Unconditional,
        Some(Instant::now() + budget),
    );
    outcomes
}

fn made_up_version() -> Version {
    Version::etag("\"bucket-lease-conformance-never-issued\"")
}

fn mode_name(mode: &PutMode) -> &'static str {
    match mode {
        PutMode::Create => "create",
        PutMode::Update(_) => "update",
        PutMode::Overwrite => "overwrite",
    }
}

/// The race's counter, `COUNT TOKEN…` (`0` at first): its count and its
/// tokens, one per increment, when the count is theirs.
fn parse_counter(body: &[u8]) -> Option<(usize, Vec<&str>)> {
    let mut words = std::str::from_utf8(body).ok()?.split(' ');
    let count: usize = words.next()?.parse().ok()?;
    let tokens: Vec<&str> = words.collect();
    (tokens.len() == count).then_some((count, tokens))
}

/// How a request was answered, for a failure message.
fn answered<T: Debug>(result: &Result<T, StoreError>) -> String {
    match result {
        Ok(value) => format!("Ok({value:?})"),
        Err(e) => format!("{:?} ({e})", e.kind()),
    }
}

fn deadline() -> Option<Instant> {
    Some(Instant::now() + REQUEST_TIMEOUT)
}

/// One check's requests on its one key, and its failure messages.
struct Check<'a> {
    name: &'static str,
    store: &'a dyn Store,
    key: String,
}

impl<'a> Check<'a> {
    fn new(name: &'static str, store: &'a dyn Store, prefix: &str, leaf: &str) -> Self {
        let prefix = prefix.trim_end_matches('/');
        let key = if prefix.is_empty() {
            leaf.to_string()
        } else {
            format!("{prefix}/{leaf}")
        };
        Check { name, store, key }
    }

    fn fail(&self, message: std::fmt::Arguments<'_>) -> ! {
        panic!(
            "store conformance check `{}` failed on key {:?}: {message}",
            self.name, self.key
        )
    }

    fn put(&self, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        let options = options.clone().with_deadline(deadline());
        self.store.put(&self.key, body, &options)
    }

    fn delete(&self, mode: &DeleteMode) -> Result<(), StoreError> {
        self.store.delete(&self.key, mode, deadline())
    }

    fn expect_put_with(&self, body: &[u8], options: &PutOptions, what: &str) -> Version {
        match self.put(body, options) {
            Ok(version) => version,
            other => self.fail(format_args!(
                "{what} answered {}; expected the write to land",
                answered(&other)
            )),
        }
    }

    fn expect_put(&self, body: &[u8], mode: PutMode, what: &str) -> Version {
        self.expect_put_with(body, &PutOptions::new(mode), what)
    }

    fn expect_refused(&self, body: &[u8], mode: PutMode, kind: StoreErrorKind, what: &str) {
        match self.put(body, &PutOptions::new(mode)) {
            Err(e) if e.kind() == kind => {}
            other => self.fail(format_args!(
                "{what} answered {}; expected a {kind:?} refusal",
                answered(&other)
            )),
        }
    }

    fn expect_delete(&self, mode: &DeleteMode, what: &str) {
        if let Err(e) = self.delete(mode) {
            self.fail(format_args!(
                "{what} answered {:?} ({e}); expected success",
                e.kind()
            ));
        }
    }

    fn read(&self, what: &str) -> Object {
        match self.store.get(&self.key, deadline()) {
            Ok(object) => object,
            other => self.fail(format_args!(
                "a read {what} answered {}; expected the object",
                answered(&other)
            )),
        }
    }

    fn expect_object(&self, body: &[u8], version: &Version, what: &str) {
        let object = self.read(what);
        if object.body != body || object.version != *version {
            self.fail(format_args!(
                "a read {what} returned {:?} at {:?}; expected {:?} at {version:?}, the version \
                 the write returned",
                String::from_utf8_lossy(&object.body),
                object.version,
                String::from_utf8_lossy(body),
            ));
        }
    }

    fn expect_absent(&self, what: &str) {
        match self.store.get(&self.key, deadline()) {
            Err(e) if e.kind() == StoreErrorKind::NotFound => {}
            other => self.fail(format_args!(
                "a read {what} answered {}; expected NotFound",
                answered(&other)
            )),
        }
    }

    fn expect_fresh(&self, earlier: &[Version], version: &Version, what: &str) {
        if version.etag.is_none() || earlier.contains(version) {
            self.fail(format_args!(
                "{what} returned version {version:?}, not a fresh ETag (earlier: {earlier:?})"
            ));
        }
    }

    fn expect_metadata(&self, expected: &[(&str, &str)]) {
        let mut got = self.read("for its metadata").metadata;
        got.sort();
        let mut want: Vec<(String, String)> = expected
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        want.sort();
        if got != want {
            self.fail(format_args!(
                "a read returned metadata {got:?}; expected {want:?} from the last write"
            ));
        }
    }

    /// Remove the check's key, so a passing check leaves nothing behind.
    fn clean_up(&self) {
        self.expect_delete(&DeleteMode::Unconditional, "the clean-up delete");
    }

    /// The count and tokens of the race's counter as read in `object`.
    fn counter<'o>(&self, object: &'o Object) -> (usize, Vec<&'o str>) {
        parse_counter(&object.body).unwrap_or_else(|| {
            self.fail(format_args!(
                "the counter holds {:?}, not a count and as many tokens",
                String::from_utf8_lossy(&object.body)
            ))
        })
    }

    /// One increment of the race, adding `token`: the version of the write
    /// that landed, when its answer or a read after it tells.
    fn increment(&self, token: &str) -> Option<Version> {
        // A write of ours was answered with an error and may have landed.
        let mut unknown = false;
        for _ in 0..MAX_ATTEMPTS {
            let current = self.read("in the race");
            let (count, tokens) = self.counter(&current);
            if unknown && tokens.contains(&token) {
                // It landed: the version read is its own if nobody wrote
                // since.
                return (tokens.last() == Some(&token)).then_some(current.version);
            }
            let mut next = (count + 1).to_string();
            for t in tokens.iter().chain([&token]) {
                next.push(' ');
                next.push_str(t);
            }
            match self.put(
                next.as_bytes(),
                &PutOptions::new(PutMode::Update(current.version)),
            ) {
                Ok(version) => return Some(version),
                Err(e) if e.kind() == StoreErrorKind::Precondition => {}
                Err(e) if e.kind() == StoreErrorKind::Conflict => {
                    let jitter = getrandom::u32().unwrap_or(0) % 10;
                    std::thread::sleep(Duration::from_millis(1 + u64::from(jitter)));
                }
                Err(e) if e.kind() == StoreErrorKind::Transport => unknown = true,
                Err(e) => self.fail(format_args!(
                    "an update in the race answered {:?} ({e}); expected success, a \
                     Precondition refusal, a Conflict or a transient error",
                    e.kind()
                )),
            }
        }
        self.fail(format_args!(
            "one increment was refused {MAX_ATTEMPTS} times in a row"
        ))
    }
}

/// Fail when `error`'s `source()` chain says something twice: one level's
/// text holds another's, or `cause` (the wrapped error's text) is not said
/// exactly once along the chain. Every error type of a store crate is
/// checked with it: each level says its cause once (see
/// [`crate::error`]'s convention).
///
/// # Panics
///
/// When the chain repeats itself, or `cause` is missing or said twice.
pub fn assert_said_once(error: &(dyn std::error::Error + 'static), cause: &str) {
    let mut texts = Vec::new();
    let mut level = Some(error);
    while let Some(e) = level {
        texts.push(e.to_string());
        level = e.source();
    }
    for (i, outer) in texts.iter().enumerate() {
        for inner in &texts[i + 1..] {
            assert!(
                !outer.contains(inner.as_str()),
                "said twice: {outer:?} holds its source's {inner:?}"
            );
        }
    }
    let told: usize = texts.iter().map(|t| t.matches(cause).count()).sum();
    assert_eq!(told, 1, "{cause:?} is said {told} times along {texts:?}");
}
