//! The `LEASE` object: its JSON, its key, and how a reader judges it.
//!
//! The record is JSON with four fields every implementation of this lease
//! reads and writes, plus an `epoch` and an `instance_nonce` that older
//! implementations ignore:
//!
//! ```json
//! {"instance_id":"4f…","acquired_at":"2026-11-29T19:00:00.123Z",
//!  "renewed_at":"2026-11-29T19:00:20.456Z","ttl_s":30,"epoch":3,
//!  "instance_nonce":"9c…"}
//! ```
//!
//! - **Who wrote a record is its name and its nonce together.**
//!   `instance_id` is the name the user gives (or a random one);
//!   `instance_nonce` is drawn once when the process starts
//!   ([`process_nonce`]) and never chosen by anyone. A process counts a
//!   record as its own only when both match its own
//!   ([`LeaseRecord::is_written_by`]); a record with its name and another
//!   nonce, or none (the async reference and older versions write none),
//!   is another process's, however alike the names. Two processes started
//!   under one name therefore never both hold the lease, and a restarted
//!   process is a new holder: it waits out the record its previous life
//!   left, like any contender.
//! - **Which lease of that process is its `claim`.** Each acquire call
//!   draws a random `claim` that its record carries for the life of the
//!   `Lease` it returns: renewals, reconciling reads and the release touch
//!   only a record with their own claim ([`LeaseRecord::is_claimed_by`]),
//!   so one process's old `Lease` never changes a newer one's record. Of a
//!   record of this process with another claim, an acquire asks whether a
//!   live `Lease` of the process still holds it (see `crate::lease`).
//! - Stamps are RFC 3339 on the writer's wall clock.
//! - `ttl_s` is the writer's TTL, and it governs: a reader with a different
//!   TTL of its own still judges the record by `ttl_s`.
//! - `epoch` counts holders: every acquire that is not a holder taking back
//!   its own record, and every break, writes one more than the record it
//!   replaces (a record without the field counts as 0). This project never
//!   deletes the record, so on a key it alone writes epochs only grow. Two
//!   cases restart the count at 1: a key that is absent (never taken, or
//!   deleted by another implementation, such as the async reference, which
//!   deletes on release) and a record that cannot be read (not JSON, or
//!   larger than the read cap). Readers that trust epochs across such a
//!   reset must also compare `acquired_at`.
//! - `released_at` is set when the holder gave the lease up: a released
//!   record keeps its holder and epoch, has `ttl_s` 0 and `renewed_at` at
//!   the Unix epoch, so every reader (the reference included, which knows
//!   nothing of `released_at`) finds it stale and may take it over at once.
//! - `holder_name` is for people: who holds the lease, in words
//!   (`host:pid` by default, [`default_holder_name`]; the caller's choice
//!   with `Contender::with_holder_name`). It is informational only: it is
//!   never part of who a record's writer is ([`LeaseRecord::is_written_by`]
//!   reads the instance id and the nonce alone), so two records that
//!   differ only in it are the same holder's. A name is at most
//!   [`MAX_HOLDER_NAME_BYTES`] bytes with no control or invisible
//!   characters ([`check_holder_name`]); a record whose `holder_name` is
//!   anything else (too long, escapes, not a string) is read as having
//!   none, and is otherwise read as it is, so the field can never make a
//!   record unreadable. Older readers (the async reference among them,
//!   which does not deny unknown fields) ignore it.
//! - `payload` is the holder's data for followers (the DynamoDB lock
//!   client's "data in the lock"): the leader's address, a generation, a
//!   short JSON object. It is chosen at acquire
//!   (`Contender::with_payload`), written in the acquire's record and kept
//!   by every renewal and the release, and absent when none was given. It
//!   is at most [`MAX_PAYLOAD_BYTES`] bytes of printable text on one line
//!   ([`check_payload`]: no control or invisible characters); bytes, or
//!   text with line breaks, go in as base64. Like `holder_name` it never
//!   decides anything, and a record whose `payload` is anything else (too
//!   long, escapes, not a string) is read as having none, and is otherwise
//!   read as it is. The async reference, which does not deny unknown
//!   fields, ignores it.
//! - Unknown fields are ignored, so a newer writer's record stays readable.
//!
//! A record is **fresh** while the reader's wall clock is strictly less than
//! `ttl_s` past `renewed_at`. A stamp in the future is fresh (the writer's
//! clock runs ahead); a stamp that does not parse is stale. A record is
//! **suspect** when it was renewed more than its own TTL in the future or
//! carries a TTL over [`MAX_SANE_TTL_S`]: it might otherwise block the
//! prefix for as long as a clock stays wrong.

use serde::{Deserialize, Serialize};
use std::time::SystemTime;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// The longest TTL, in seconds, a record is trusted with: one hour. A
/// lease is never taken with a longer one.
pub const MAX_SANE_TTL_S: u64 = 3600;

/// The `renewed_at` of a released record: the Unix epoch, stale to every
/// reader whatever its clock.
pub const RELEASED_STAMP: &str = "1970-01-01T00:00:00Z";

/// The lease object's key for `prefix`: `{prefix}/LEASE`, or `LEASE` for the
/// empty prefix. Trailing slashes on the prefix are ignored.
pub fn lease_key(prefix: &str) -> String {
    match prefix.trim_end_matches('/') {
        "" => "LEASE".to_string(),
        p => format!("{p}/LEASE"),
    }
}

/// The prefix of the lease object `key` ([`lease_key`]'s inverse):
/// `shards/7` for `shards/7/LEASE`, empty for `LEASE`.
pub(crate) fn prefix_of(key: &str) -> &str {
    key.strip_suffix("/LEASE").unwrap_or("")
}

/// How many bytes longer than the lease key the acquire probe's key is:
/// `{lease key}.probe-` and 32 hex digits ([`probe_key`]).
pub const PROBE_KEY_EXTRA_BYTES: usize = ".probe-".len() + 32;

/// A key beside `lease_key` for the acquire probe's write against an absent
/// key: `{lease_key}.probe-{32 random hex digits}`, exactly
/// [`PROBE_KEY_EXTRA_BYTES`] longer.
pub fn probe_key(lease_key: &str) -> String {
    format!("{lease_key}.probe-{}", new_instance_id())
}

/// The longest key, in bytes, an acquire of `lease_key` writes: the probe's
/// when it sends one (a conditional lease), else the lease key itself.
pub fn longest_key_bytes(lease_key: &str, probe: bool) -> usize {
    lease_key.len() + if probe { PROBE_KEY_EXTRA_BYTES } else { 0 }
}

/// The longest prefix, in bytes, whose keys ([`longest_key_bytes`]) fit in
/// a store's limit of `limit` bytes per key: 979 for S3's 1024 with the
/// probe, 1018 without.
pub fn max_prefix_bytes(limit: usize, probe: bool) -> usize {
    limit.saturating_sub(longest_key_bytes("/LEASE", probe))
}

/// A fresh random instance id: 128 bits from the operating system, as 32
/// lower-case hex digits.
///
/// # Panics
///
/// When the operating system has no random source to offer, which leaves no
/// way to tell two holders apart.
pub fn new_instance_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    hex_digits(&bytes)
        .iter()
        .map(|&digit| char::from(digit))
        .collect()
}

/// 128 bits as the 32 lower-case hex digits ids are written in.
pub(crate) fn hex_digits(bits: &[u8; 16]) -> [u8; 32] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (pair, byte) in out.chunks_exact_mut(2).zip(bits) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0xf)];
    }
    out
}

/// The 128 bits that [`hex_digits`] wrote as `text`; `None` for any other
/// spelling (upper case, another length, anything not a hex digit).
pub(crate) fn parse_hex_digits(text: &str) -> Option<[u8; 16]> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let text = text.as_bytes();
    if text.len() != 32 {
        return None;
    }
    let mut bits = [0u8; 16];
    for (byte, pair) in bits.iter_mut().zip(text.chunks_exact(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(bits)
}

/// This process's instance nonce: 128 random bits as 32 lower-case hex
/// digits, drawn the first time it is asked for and the same for the rest
/// of the process's life. Every record and fenced object this process
/// writes carries it beside the instance id (see the [module docs](self)).
///
/// # Panics
///
/// As [`new_instance_id`], the first time, when the operating system has
/// no random source.
pub fn process_nonce() -> &'static str {
    static NONCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NONCE.get_or_init(new_instance_id)
}

/// A wall-clock instant as the record writes it: RFC 3339 in UTC.
pub fn format_stamp(at: SystemTime) -> String {
    OffsetDateTime::from(at)
        .format(&Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_string())
}

/// The longest `holder_name`, in bytes, a record carries.
pub const MAX_HOLDER_NAME_BYTES: usize = 128;

/// Why a holder name was refused ([`check_holder_name`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidHolderName {
    /// The name is empty.
    Empty,
    /// The name is longer than [`MAX_HOLDER_NAME_BYTES`].
    TooLong {
        /// Its length in bytes.
        bytes: usize,
    },
    /// The name holds a control character or one that reorders or hides
    /// text (a bidirectional override, a zero-width mark).
    Unprintable {
        /// The first such character.
        character: char,
    },
}

impl std::fmt::Display for InvalidHolderName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InvalidHolderName::Empty => f.write_str("invalid holder name: it is empty"),
            InvalidHolderName::TooLong { bytes } => write!(
                f,
                "invalid holder name: {bytes} bytes, over the maximum of {MAX_HOLDER_NAME_BYTES}"
            ),
            InvalidHolderName::Unprintable { character } => write!(
                f,
                "invalid holder name: it holds the character {character:?}, which a terminal \
                 could act on or which hides text; use printable characters"
            ),
        }
    }
}

impl std::error::Error for InvalidHolderName {}

/// Whether `name` may stand in a record's `holder_name`: 1 to
/// [`MAX_HOLDER_NAME_BYTES`] bytes, none of them a control character or
/// one that reorders or hides text.
///
/// # Errors
///
/// What is wrong with the name.
pub fn check_holder_name(name: &str) -> Result<(), InvalidHolderName> {
    if name.is_empty() {
        return Err(InvalidHolderName::Empty);
    }
    if name.len() > MAX_HOLDER_NAME_BYTES {
        return Err(InvalidHolderName::TooLong { bytes: name.len() });
    }
    match name.chars().find(|c| unprintable(*c)) {
        Some(character) => Err(InvalidHolderName::Unprintable { character }),
        None => Ok(()),
    }
}

/// A control character, or one that reorders or hides text.
fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}'
        )
}

/// The longest `payload`, in bytes, a record carries: 1 KiB.
///
/// Why this bound: every renewal rewrites the whole record (three times a
/// TTL) and every contender, `inspect` and watcher reads it, so each byte
/// of the payload is paid on every one of those requests, for the life of
/// the lease; 1 KiB keeps a record under 2 KiB, one small request, far
/// below the 64 KiB a store client reads of a record. What a payload is
/// for (the leader's address, a generation, a short JSON object) fits in
/// tens of bytes; data larger than that belongs in an object under the
/// lease's prefix ([`crate::fence`]), which the payload can name.
pub const MAX_PAYLOAD_BYTES: usize = 1024;

/// Why a payload was refused ([`check_payload`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidPayload {
    /// The payload is longer than [`MAX_PAYLOAD_BYTES`].
    TooLong {
        /// Its length in bytes.
        bytes: usize,
    },
    /// The payload holds a control character (a line break or a tab
    /// included) or one that reorders or hides text.
    Unprintable {
        /// The first such character.
        character: char,
    },
}

impl std::fmt::Display for InvalidPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InvalidPayload::TooLong { bytes } => write!(
                f,
                "invalid payload: {bytes} bytes, over the maximum of {MAX_PAYLOAD_BYTES}; put \
                 larger data in an object under the lease's prefix and the object's key in the \
                 payload"
            ),
            InvalidPayload::Unprintable { character } => write!(
                f,
                "invalid payload: it holds the character {character:?}, which a terminal could \
                 act on or which hides text; use printable text on one line (encode bytes, or \
                 text with line breaks, as base64)"
            ),
        }
    }
}

impl std::error::Error for InvalidPayload {}

/// Whether `payload` may stand in a record's `payload`: at most
/// [`MAX_PAYLOAD_BYTES`] bytes of printable text on one line (the empty
/// string included), none of them a control character or one that
/// reorders or hides text. Bytes, or text with line breaks, go in as
/// base64 (which is printable).
///
/// # Errors
///
/// What is wrong with the payload.
pub fn check_payload(payload: &str) -> Result<(), InvalidPayload> {
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Err(InvalidPayload::TooLong {
            bytes: payload.len(),
        });
    }
    match payload.chars().find(|c| unprintable(*c)) {
        Some(character) => Err(InvalidPayload::Unprintable { character }),
        None => Ok(()),
    }
}

/// This process's holder name unless the caller gives one: `host:pid`,
/// the host name read from `/proc/sys/kernel/hostname`, else from the
/// `HOSTNAME` environment variable; `None` when neither gives a name
/// (or the result would not pass [`check_holder_name`]). Read once.
pub fn default_holder_name() -> Option<&'static str> {
    static NAME: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .or_else(|| {
                std::env::var("HOSTNAME")
                    .ok()
                    .map(|h| h.trim().to_string())
                    .filter(|h| !h.is_empty())
            })?;
        let name = format!("{host}:{}", std::process::id());
        check_holder_name(&name).is_ok().then_some(name)
    })
    .as_deref()
}

/// `holder_name` as read: a string that passes [`check_holder_name`], or
/// nothing, whatever the JSON held (so the field never makes a record
/// unreadable).
fn lenient_holder_name<'de, D>(deserializer: D) -> Result<Option<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(match value {
        serde_json::Value::String(name) if check_holder_name(&name).is_ok() => Some(name),
        _ => None,
    })
}

/// `payload` as read: a string that passes [`check_payload`], or nothing,
/// whatever the JSON held (so the field never makes a record unreadable).
fn lenient_payload<'de, D>(deserializer: D) -> Result<Option<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(match value {
        serde_json::Value::String(payload) if check_payload(&payload).is_ok() => Some(payload),
        _ => None,
    })
}

/// A record's `claim` as it reads: a string, or none for anything else.
fn lenient_claim<'de, D>(deserializer: D) -> Result<Option<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(match value {
        serde_json::Value::String(claim) => Some(claim),
        _ => None,
    })
}

/// The contents of `{prefix}/LEASE`. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LeaseRecord {
    /// The holder's instance id.
    pub instance_id: String,
    /// When the holder took the lease, RFC 3339 on its wall clock.
    pub acquired_at: String,
    /// When the holder last renewed, RFC 3339 on its wall clock.
    pub renewed_at: String,
    /// How long after `renewed_at` the lease stays the holder's, in seconds.
    pub ttl_s: u64,
    /// How many holders the key has had, this one included; absent in
    /// older records (0).
    #[serde(default)]
    pub epoch: u64,
    /// When the holder released the lease, RFC 3339 on its wall clock;
    /// absent while the lease is held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_at: Option<String>,
    /// The nonce of the process that wrote the record ([`process_nonce`]);
    /// absent in records of the async reference, of older versions and of
    /// a break. Without it a record is nobody's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_nonce: Option<String>,
    /// Who holds the lease, for people (`host:pid` by default); never part
    /// of who the holder is. `None` when absent or not a valid name (see
    /// the [module docs](self)).
    #[serde(
        default,
        deserialize_with = "lenient_holder_name",
        skip_serializing_if = "Option::is_none"
    )]
    pub holder_name: Option<String>,
    /// The acquire call that wrote the record: random, drawn anew by each
    /// acquire and kept by its lease's renewals and release
    /// ([`LeaseRecord::is_claimed_by`]); absent in records of the async
    /// reference, of older versions and of a break. Anything but a string
    /// is read as none, so the field never makes a record unreadable.
    #[serde(
        default,
        deserialize_with = "lenient_claim",
        skip_serializing_if = "Option::is_none"
    )]
    pub claim: Option<String>,
    /// The holder's payload ([`MAX_PAYLOAD_BYTES`] of printable text at
    /// most), written at acquire and kept by every renewal and the
    /// release, for followers to read; `None` when absent or not a valid
    /// payload (see the [module docs](self)).
    #[serde(
        default,
        deserialize_with = "lenient_payload",
        skip_serializing_if = "Option::is_none"
    )]
    pub payload: Option<String>,
}

impl LeaseRecord {
    /// A held record of `instance_id` at `epoch`, taken at `acquired_at`
    /// and renewed at `renewed_at` (RFC 3339, see [`format_stamp`]) with a
    /// TTL of `ttl_s`; no nonce (nobody's own) until
    /// [`with_nonce`](Self::with_nonce).
    pub fn new(
        instance_id: impl Into<String>,
        acquired_at: impl Into<String>,
        renewed_at: impl Into<String>,
        ttl_s: u64,
        epoch: u64,
    ) -> Self {
        LeaseRecord {
            instance_id: instance_id.into(),
            acquired_at: acquired_at.into(),
            renewed_at: renewed_at.into(),
            ttl_s,
            epoch,
            released_at: None,
            instance_nonce: None,
            holder_name: None,
            claim: None,
            payload: None,
        }
    }

    /// This record with the payload `payload`, unchecked (see
    /// [`check_payload`]).
    #[must_use]
    pub fn with_payload(mut self, payload: impl Into<String>) -> Self {
        self.payload = Some(payload.into());
        self
    }

    /// This record with the holder name `name` (for people only; see the
    /// [module docs](self)).
    #[must_use]
    pub fn with_holder_name(mut self, name: impl Into<String>) -> Self {
        self.holder_name = Some(name.into());
        self
    }

    /// This record written by the process whose nonce is `nonce`.
    #[must_use]
    pub fn with_nonce(mut self, nonce: impl Into<String>) -> Self {
        self.instance_nonce = Some(nonce.into());
        self
    }

    /// Parse a record; `None` when the bytes are not a lease record.
    pub fn parse(bytes: &[u8]) -> Option<LeaseRecord> {
        serde_json::from_slice(bytes).ok()
    }

    /// The record as JSON bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Strings and integers: serialising cannot fail. Room for a
        // record's usual size at once, rather than growing from empty.
        let mut bytes = Vec::with_capacity(512);
        match serde_json::to_writer(&mut bytes, self) {
            Ok(()) => bytes,
            Err(_) => Vec::new(),
        }
    }

    /// The same holder's record marked released at `at`: stale at once for
    /// every reader, holder and epoch kept.
    pub fn released(&self, at: SystemTime) -> LeaseRecord {
        LeaseRecord {
            renewed_at: RELEASED_STAMP.to_string(),
            ttl_s: 0,
            released_at: Some(format_stamp(at)),
            ..self.clone()
        }
    }

    /// Whether this record was written by the process that goes by
    /// `instance_id` and was started with `nonce`: both must match. A
    /// record without a nonce was written by no process this one can be.
    pub fn is_written_by(&self, instance_id: &str, nonce: &str) -> bool {
        self.instance_id == instance_id
            && (self.instance_nonce.as_deref() == Some(nonce)
                || crate::mutant::on(crate::mutant::Mutant::SameNameIsOurs))
    }

    /// Whether this record was written by the one acquire call of the
    /// process `instance_id` and `nonce` name that drew `claim`, or by the
    /// lease that call returned: the record of one `Lease` value, not of
    /// any value of that process.
    pub fn is_claimed_by(&self, instance_id: &str, nonce: &str, claim: &str) -> bool {
        self.is_written_by(instance_id, nonce)
            && (self.claim.as_deref() == Some(claim)
                || crate::mutant::on(crate::mutant::Mutant::IdentityByProcess))
    }

    /// Whether this record carries the name `instance_id` but was written
    /// by another process than the one started with `nonce` (another
    /// nonce, or none): two processes were given one instance id.
    pub fn is_namesake_of(&self, instance_id: &str, nonce: &str) -> bool {
        self.instance_id == instance_id && !self.is_written_by(instance_id, nonce)
    }

    /// Whether the holder gave the lease up.
    pub fn is_released(&self) -> bool {
        self.released_at.is_some()
    }

    /// The epoch of whoever takes this record over; `None` when the count
    /// is exhausted (`u64::MAX`): it never wraps.
    pub fn next_epoch(&self) -> Option<u64> {
        self.epoch.checked_add(1)
    }

    /// How long a contender with its own TTL of `own_ttl_s` watches this
    /// record, when suspect, before taking it over: its own TTL, or the
    /// record's TTL when that is longer and sane, so that a live holder
    /// renews (and so changes the record) at least once meanwhile.
    pub fn suspect_watch_s(&self, own_ttl_s: u64) -> u64 {
        if self.ttl_s <= MAX_SANE_TTL_S {
            own_ttl_s.max(self.ttl_s)
        } else {
            own_ttl_s
        }
    }

    /// `renewed_at` as an instant, when it parses.
    pub fn renewed(&self) -> Option<SystemTime> {
        self.renewed_stamp().map(SystemTime::from)
    }

    /// `renewed_at` parsed.
    fn renewed_stamp(&self) -> Option<OffsetDateTime> {
        OffsetDateTime::parse(&self.renewed_at, &Rfc3339).ok()
    }

    /// How long ago, by `now`, the record was renewed (negative when it is
    /// stamped in the future); `None` when the stamp does not parse.
    pub(crate) fn age(&self, now: SystemTime) -> Option<time::Duration> {
        self.renewed_stamp()
            .map(|renewed| OffsetDateTime::from(now) - renewed)
    }

    /// Whether the lease is still its holder's at the reader's `now`. A
    /// released record never is.
    pub fn is_fresh(&self, now: SystemTime) -> bool {
        if self.is_released() {
            return false;
        }
        match self.age(now) {
            Some(age) => age < ttl(self.ttl_s),
            None => false,
        }
    }

    /// Whether the record cannot be trusted to expire on time at the
    /// reader's `now`.
    pub fn is_suspect(&self, now: SystemTime) -> bool {
        if self.is_released() {
            return false;
        }
        if self.ttl_s > MAX_SANE_TTL_S {
            return true;
        }
        match self.age(now) {
            Some(age) => -age > ttl(self.ttl_s),
            None => false,
        }
    }
}

fn ttl(ttl_s: u64) -> time::Duration {
    time::Duration::seconds(i64::try_from(ttl_s).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn record(renewed: SystemTime, ttl_s: u64) -> LeaseRecord {
        LeaseRecord {
            instance_id: "holder".into(),
            acquired_at: format_stamp(renewed),
            renewed_at: format_stamp(renewed),
            ttl_s,
            epoch: 0,
            released_at: None,
            instance_nonce: None,
            holder_name: None,
            claim: None,
            payload: None,
        }
    }

    #[test]
    fn fresh_means_strictly_younger_than_the_holders_ttl() {
        let now = SystemTime::now();
        let s = Duration::from_secs;
        assert!(record(now - s(29), 30).is_fresh(now));
        assert!(
            !record(now - s(30), 30).is_fresh(now),
            "exactly one TTL old is stale"
        );
        assert!(
            record(now - s(50), 60).is_fresh(now),
            "the record's TTL, not ours"
        );
        assert!(
            record(now + s(3), 30).is_fresh(now),
            "a stamp in the future is fresh"
        );
        assert!(
            record(now, u64::MAX).is_fresh(now),
            "a huge TTL does not overflow"
        );
        let mut garbled = record(now, 30);
        garbled.renewed_at = "last tuesday".into();
        assert!(
            !garbled.is_fresh(now),
            "a stamp that does not parse is stale"
        );
    }

    #[test]
    fn suspect_means_far_future_or_absurd_ttl() {
        let now = SystemTime::now();
        let s = Duration::from_secs;
        assert!(!record(now, 30).is_suspect(now));
        assert!(
            !record(now + s(30), 30).is_suspect(now),
            "exactly one TTL ahead is not"
        );
        assert!(record(now + s(31), 30).is_suspect(now));
        assert!(record(now, MAX_SANE_TTL_S + 1).is_suspect(now));
        assert!(!record(now, MAX_SANE_TTL_S).is_suspect(now));
    }

    #[test]
    fn the_reference_format_reads_both_ways() {
        // A record as the async predecessor writes it: no epoch.
        let old = br#"{"instance_id":"abc","acquired_at":"2026-01-02T03:04:05.123456789Z","renewed_at":"2026-01-02T03:04:15Z","ttl_s":30}"#;
        let parsed = LeaseRecord::parse(old).expect("a reference record parses");
        assert_eq!((parsed.epoch, parsed.ttl_s), (0, 30));
        // Ours, with an unknown field a newer writer might add.
        let newer = br#"{"instance_id":"abc","acquired_at":"x","renewed_at":"y","ttl_s":5,"epoch":7,"host":"h"}"#;
        assert_eq!(LeaseRecord::parse(newer).unwrap().epoch, 7);
        // What we write has every field the reference requires, in its types.
        let ours: serde_json::Value =
            serde_json::from_slice(&record(SystemTime::now(), 30).to_bytes()).unwrap();
        for field in ["instance_id", "acquired_at", "renewed_at"] {
            assert!(ours[field].is_string(), "{field}");
        }
        assert!(ours["ttl_s"].is_u64());
        let stamp = ours["renewed_at"].as_str().unwrap();
        assert!(OffsetDateTime::parse(stamp, &Rfc3339).is_ok() && stamp.ends_with('Z'));
        assert!(LeaseRecord::parse(b"not json").is_none());
    }

    #[test]
    fn a_claim_that_is_not_a_string_is_read_as_none() {
        let rec = LeaseRecord::parse(
            br#"{"instance_id":"a","acquired_at":"x","renewed_at":"y","ttl_s":5,"claim":7}"#,
        )
        .expect("still a record");
        assert_eq!(rec.claim, None);
        let rec = LeaseRecord::parse(
            br#"{"instance_id":"a","acquired_at":"x","renewed_at":"y","ttl_s":5,"claim":"c1","instance_nonce":"n"}"#,
        )
        .unwrap();
        assert!(rec.is_claimed_by("a", "n", "c1"));
        assert!(!rec.is_claimed_by("a", "n", "c2") && !rec.is_claimed_by("a", "m", "c1"));
    }

    #[test]
    fn the_holder_name_is_for_people_and_never_for_identity() {
        let now = SystemTime::now();
        let ours = record(now, 30)
            .with_nonce("n1")
            .with_holder_name("db1:4242");
        let renamed = ours.clone().with_holder_name("someone-else:1");
        let unnamed = LeaseRecord {
            holder_name: None,
            ..ours.clone()
        };
        for rec in [&ours, &renamed, &unnamed] {
            assert!(rec.is_written_by("holder", "n1"), "{rec:?}");
            assert!(!rec.is_namesake_of("holder", "n1"));
        }
        assert!(!ours.is_written_by("holder", "n2"), "the name is no nonce");
        // Ours, named, reads back; the reference's four fields are there.
        let json: serde_json::Value = serde_json::from_slice(&ours.to_bytes()).unwrap();
        assert_eq!(json["holder_name"], "db1:4242");
        assert_eq!(LeaseRecord::parse(&ours.to_bytes()).unwrap(), ours);
        // The reference writes no name: none is read.
        let old = br#"{"instance_id":"abc","acquired_at":"2026-01-02T03:04:05Z","renewed_at":"2026-01-02T03:04:15Z","ttl_s":30}"#;
        assert_eq!(LeaseRecord::parse(old).unwrap().holder_name, None);
    }

    #[test]
    fn a_hostile_holder_name_is_read_as_none_and_the_record_still_parses() {
        let long = "x".repeat(MAX_HOLDER_NAME_BYTES + 1);
        for name in [
            serde_json::json!("a\u{1b}[2Jb"),
            serde_json::json!("rtl\u{202e}x"),
            serde_json::json!(""),
            serde_json::json!(long),
            serde_json::json!(7),
            serde_json::json!({"nested": [1]}),
            serde_json::Value::Null,
        ] {
            let body = serde_json::json!({"instance_id": "abc", "acquired_at": "x",
                "renewed_at": "y", "ttl_s": 5, "epoch": 3, "holder_name": name});
            let rec = LeaseRecord::parse(body.to_string().as_bytes()).expect("still a record");
            assert_eq!((rec.epoch, rec.holder_name), (3, None), "{name}");
        }
        let max = "é".repeat(MAX_HOLDER_NAME_BYTES / 2);
        assert_eq!(check_holder_name(&max), Ok(()));
        assert_eq!(
            check_holder_name(&format!("{max}x")),
            Err(InvalidHolderName::TooLong {
                bytes: MAX_HOLDER_NAME_BYTES + 1
            })
        );
        assert!(check_holder_name("tab\there").is_err());
        assert!(check_holder_name("backup@db1 (eu-west-1)").is_ok());
    }

    #[test]
    fn the_default_holder_name_is_host_and_pid() {
        let name = default_holder_name().expect("this machine has a host name");
        let (host, pid) = name.rsplit_once(':').unwrap();
        assert!(!host.is_empty());
        assert_eq!(pid, std::process::id().to_string());
        assert_eq!(check_holder_name(name), Ok(()));
    }

    #[test]
    fn a_released_record_is_stale_by_the_rules_the_reference_applies() {
        let now = SystemTime::now();
        let released = record(now, 30).released(now + Duration::from_secs(3600));
        assert!(!released.is_fresh(now) && !released.is_suspect(now));
        // The reference reads only renewed_at and ttl_s: stale even to a
        // reader whose clock is a year behind.
        let year = Duration::from_secs(365 * 24 * 3600);
        let mut as_reference_sees_it = released.clone();
        as_reference_sees_it.released_at = None;
        assert!(!as_reference_sees_it.is_fresh(now - year));
        assert!(!as_reference_sees_it.is_suspect(now - year));
        let json: serde_json::Value = serde_json::from_slice(&released.to_bytes()).unwrap();
        assert_eq!(json["ttl_s"], 0);
        assert!(json["released_at"].is_string());
        let held: serde_json::Value = serde_json::from_slice(&record(now, 30).to_bytes()).unwrap();
        assert!(held.get("released_at").is_none(), "a held record omits it");
    }

    #[test]
    fn epochs_never_wrap_and_suspects_are_watched_for_a_sane_ttl() {
        let mut r = record(SystemTime::now(), 600);
        r.epoch = u64::MAX;
        assert_eq!(r.next_epoch(), None);
        assert_eq!(r.suspect_watch_s(30), 600);
        r.ttl_s = MAX_SANE_TTL_S + 1;
        assert_eq!(r.suspect_watch_s(30), 30);
    }

    #[test]
    fn the_key_sits_under_the_prefix() {
        assert_eq!(lease_key("a/b"), "a/b/LEASE");
        assert_eq!(lease_key("a/b/"), "a/b/LEASE");
        assert_eq!(lease_key(""), "LEASE");
    }

    #[test]
    fn instance_ids_are_32_hex_digits_and_differ() {
        let (a, b) = (new_instance_id(), new_instance_id());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
