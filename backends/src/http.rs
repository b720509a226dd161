//! The one signed-HTTP client behind every S3-compatible profile.
//!
//! An [`HttpStore`] holds one keep-alive `ureq` agent, so a renewal on a
//! warm connection is one request on an open socket. Every request is
//! signed with SigV4, carries a timeout cut to the caller's deadline, reads
//! at most [`HttpStoreBuilder::max_body`] bytes of answer (an object over
//! the cap is [`StoreErrorKind::TooLarge`], carrying its version, and its
//! body is not read), and has its status mapped to a [`StoreErrorKind`] by
//! meaning (see [`HttpStore`]).
//!
//! What a request costs: no thread (a host name is looked up on a helper
//! thread only the first time and, in the background, once a minute; see
//! `net`), and on a kept connection four system calls: a non-blocking
//! peek that checks the connection, one write, one `setsockopt` (quick
//! ACKs, on Linux), one read. Each connection
//! holds 16 KiB of buffers and is kept idle up to `MAX_IDLE_AGE` (over
//! the longest renewal interval), at most four of them (an acquire's
//! probe sends its four writes at once, each on its own connection).
//!
//! An endpoint never carries credentials: one with user information
//! (`user:password@`) is refused, and no error, `Debug` output or message
//! shows what was before its `@`. A proxy may carry them
//! ([`crate::Proxies`]); they are sent only in `Proxy-Authorization` and
//! shown as `***`.
//!
//! TLS trusts the built-in roots and, beside them, a CA bundle and the
//! system's store when configured ([`HttpStoreBuilder::ca_bundle`],
//! [`HttpStoreBuilder::system_trust`]); requests to an `http://` endpoint
//! go through its proxy in absolute form, to an `https://` one through a
//! `CONNECT` tunnel (`net::proxy`).

use crate::credentials::{CredentialsProvider, Source};
use crate::delete_check::DeleteCheck;
use crate::net;
use crate::settings::Proxy;
use crate::sign::{sign_request, Credentials, KeyCache};
use crate::spelling::Spelling;
use crate::trace;
use answers::{
    backoff, failure_kind, header, is_wrong_region, retryable, service_date, status_and_error,
    throttle_of, throttle_of_parts, trace_outcome, transport_error, MAX_ATTEMPTS,
};
// For the submodules, which name them `super::…`.
use answers::{object_of, version_of};
use bucket_lease_core::clock::{Clock, SystemClock};
use bucket_lease_core::multipart::{
    AbortUpload, BeginUpload, CompleteUpload, ObjectReader, UploadConditions, UploadPart,
    UploadedPart,
};
use bucket_lease_core::mutant::StoreMutant;
use bucket_lease_core::spacing::WriteSpacing;
use bucket_lease_core::store::{
    DeleteMode, Delivery, Object, PutOptions, Store, StoreError, StoreErrorKind, Version,
};
pub use builder::{
    Addressing, EndpointVariant, HttpStoreBuilder, Profile, DEFAULT_MAX_BODY, DEFAULT_TIMEOUT,
};
use endpoint::encode_key;
use idle::IdleWatch;
use std::fmt;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use ureq::http::{self, HeaderMap, HeaderName, HeaderValue, Method};
// What the tests (`use super::*`) take from here besides.
#[cfg(test)]
use {answers::parse_http_date, builder::MAX_IDLE_AGE, endpoint::Endpoint, std::net::SocketAddr};

/// A bucket on an S3-compatible service, reached with signed HTTP requests.
///
/// Answers are mapped by meaning:
///
/// | answer | meaning |
/// |---|---|
/// | 412 or 304 to a create-only PUT | [`StoreErrorKind::AlreadyExists`] |
/// | 412 or 304 to an update-if-ETag PUT, 404 to it | [`StoreErrorKind::Precondition`] |
/// | 412 to a DELETE with `If-Match` | [`StoreErrorKind::Precondition`] |
/// | 200 to a GET, the object over the read cap | [`StoreErrorKind::TooLarge`], with the version from the answer's `ETag` and `x-amz-version-id`; the body is not read |
/// | 404 to a GET | [`StoreErrorKind::NotFound`] |
/// | 404 to a DELETE | success: the key is gone |
/// | 409 | [`StoreErrorKind::Conflict`] |
/// | 401, 403 | [`StoreErrorKind::PermissionDenied`] |
/// | 501 or code `NotImplemented` to a conditional request | [`StoreErrorKind::NotImplemented`] |
/// | a conditional DELETE the profile does not send ([`Profile::conditional_delete`]), or one the service was not seen to honour in the spelling of ETags in use (checked before the first, and again after the spelling changed: see below) | [`StoreErrorKind::NotImplemented`], nothing sent |
/// | 5xx, 408, 429 | [`StoreErrorKind::Transport`], [`Delivery::Answered`](bucket_lease_core::store::Delivery): it may have landed |
/// | 429, or 503 with code `SlowDown` | the same, marked [throttled](StoreError::is_throttled), with the answer's `Retry-After` (seconds; at most an hour) as [`StoreError::retry_after`] |
/// | timeout, reset, closed after sending | [`StoreErrorKind::Transport`]: it may have landed |
/// | (retries) | a request not sent, and a GET, HEAD or unconditional DELETE that got a 5xx, 408, 429 or no answer, is sent again, up to three times in all, after a jittered pause, within the deadline; a write that may have been sent is not |
/// | host name lookup, connection, proxy or TLS handshake failed | [`StoreErrorKind::Transport`], [`Delivery::NotSent`](bucket_lease_core::store::Delivery): nothing was sent, the message names `host:port` (and the proxy with its setting) |
/// | the server's certificate fails verification (unknown issuer, expired, another name) | [`StoreErrorKind::Rejected`], code `InvalidCertificate`, not sent, [permanent](StoreError::is_permanent): never retried; the message names the problem and the setting that fixes it |
/// | the proxy refuses the tunnel (4xx to `CONNECT`), or answers 407 to a request | [`StoreErrorKind::Rejected`], code `ProxyRefused` (or `HTTP 407`), permanent; the message names the proxy and its setting |
/// | 301, 307, or `AuthorizationHeaderMalformed` naming a region: the bucket is elsewhere | [`StoreErrorKind::Rejected`], its message naming the bucket's region (`x-amz-bucket-region`, `<Region>`) or the endpoint the service names, and what to set |
/// | code `NoSuchBucket`, 501 to an unconditional request, other 3xx and 4xx | [`StoreErrorKind::Rejected`] |
/// | an `If-Match` write or delete whose version has no ETag | [`StoreErrorKind::Rejected`], nothing sent |
///
/// [`StoreErrorKind::NotImplemented`] thus means only that this client or
/// profile cannot send the condition, or that the service said it cannot
/// honour it; a version without an ETag (from an answer that carried none)
/// is a failed request, never a reason to write without the condition.
///
/// The ETag in `If-Match` is sent as the service returned it, in quotes,
/// unless the builder's [`unquoted_etags`](HttpStoreBuilder::unquoted_etags)
/// (`BUCKET_LEASE_UNQUOTED_ETAGS`) fixes the spelling. Until a write on a
/// right ETag has been accepted, a refused `If-Match` write is followed by
/// a HEAD: when the object still has that very ETag, the service refused a
/// right condition (Ceph RGW 16.2 refuses every quoted one), and the write
/// is sent once more bare; accepted, that spelling is kept for the store's
/// life, with one warning, and counted ([`Store::condition_spelling`]) so
/// an acquire's probe checks its refusals again in it.
///
/// A profile's conditional deletes are not trusted to the service either:
/// before the first one is sent, the store checks once on a scratch object
/// beside its key that a delete on a wrong ETag is refused and one on the
/// right ETag accepted (five requests), and sends none if the service
/// failed that check (Ceph RGW 16.2 deletes whatever the ETag). The check
/// holds for the spelling of ETags it was made in: after the spelling
/// changed, the next conditional delete checks again.
///
/// # Throttling and write intervals
///
/// Whether a throttled write took effect is decided as for any other
/// answer that is not a success: it may have. AWS documents `503 SlowDown`
/// as a request to reduce the request rate and to retry with backoff (S3
/// User Guide, "Amazon S3 error best practices" and "Best practices design
/// patterns: optimizing Amazon S3 performance"; the AWS knowledge center
/// adds that rapid concurrent PUTs to one key may be answered 503), and
/// says of `InternalError` that a request "might not have processed"; no
/// page promises that a `SlowDown` took no effect. Cloudflare documents a
/// 429 as the answer beyond R2's "maximum concurrent writes to the same
/// object name (key): 1 per second" (R2 "Limits") and RFC 6585 defines
/// 429 with an optional `Retry-After`; neither says the write was not
/// applied, and a gateway's 429 or 503 may come after it forwarded the
/// request. So the lease settles a throttled write by reading, as it does
/// a lost answer: it is never taken as a refusal (never "held"), and the
/// next try waits at least the `Retry-After`.
///
/// A store with a write interval ([`HttpStoreBuilder::write_interval`];
/// the `r2` profile's default is one second) spaces its own writes of each
/// key by it: a PUT or DELETE waits until an interval after the answer to
/// the store's previous write of that key (or the `Retry-After` of a
/// throttled answer, if longer), and is not sent, failing
/// [not sent](bucket_lease_core::store::Delivery::NotSent), when that
/// comes after its deadline. Reads are not spaced.
///
/// # Uploads in parts
///
/// A completion ([`Store::complete_upload`]) takes its mode as a PUT does
/// (`If-None-Match: *`, `If-Match`) and its answers map as a PUT's, but:
/// 404 `NoSuchUpload` is [`StoreErrorKind::NotFound`]; a `200` whose body
/// is an `<Error>` (S3 may answer a completion so) is the error its code
/// says; a completion that may have been sent is never sent again (the
/// lease settles it by reading), and it alone of an upload's requests
/// counts as a write for a write interval. Begins, parts and aborts are
/// sent again after no answer or a transient one, as reads are: a part
/// again replaces itself, an abort again finds nothing to abort (which
/// succeeds), and a begin again makes at most an empty upload nobody knows
/// the id of. Which services honour a completion's condition is checked
/// by the lease, and the verdict kept for the store's life
/// ([`Store::upload_conditions`]).
///
/// An error body over the cap is not read; the status alone decides.
/// Every error names the method, the key, the service's code (or the HTTP
/// status when the body has none), its message and request id.
pub struct HttpStore {
    agent: ureq::Agent,
    /// `host:port` the requests go to, for messages.
    target: String,
    /// The proxy requests go through.
    proxy: Option<Arc<Proxy>>,
    /// The endpoint was given, not made from the region.
    custom_endpoint: bool,
    profile: &'static str,
    base_url: String,
    bucket: String,
    /// `{profile}://{bucket}/`, as a user writes it, for errors.
    store_url: Arc<str>,
    credentials: Arc<CredentialsProvider>,
    region: String,
    /// The last signing key derived, for its credentials, day and region
    /// (derived once a day and once per set of credentials, not per
    /// request).
    keys: KeyCache,
    /// Whether conditional deletes are sent: checked on the service first.
    delete_conditions: DeleteCheck,
    /// How `If-Match` spells ETags, learned from the service.
    spelling: Spelling,
    timeout: Duration,
    max_body: usize,
    /// The turns of each key's writes, on a service with a write interval.
    spacing: Option<WriteSpacing>,
    /// Whether the service honours a completion's condition: the verdict
    /// of the core's fenced uploads, kept for the store's life.
    upload_conditions: UploadConditions,
    /// How long its connections stay open while idle, as seen: when a
    /// renewal should be warmed up.
    idle: IdleWatch,
}

impl fmt::Debug for HttpStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpStore")
            .field("profile", &self.profile)
            .field("base_url", &self.base_url)
            .field("proxy", &self.proxy)
            .field("region", &self.region)
            .field("credentials", &self.credentials)
            .field("delete_conditions", &self.delete_conditions.state())
            .field("unquoted_etags", &self.spelling.bare())
            .field("timeout", &self.timeout)
            .field("max_body", &self.max_body)
            .field(
                "write_interval",
                &self.spacing.as_ref().map(WriteSpacing::interval),
            )
            .finish_non_exhaustive()
    }
}

/// One kind of request, which decides what its answers mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Get,
    /// A GET with `If-None-Match` on a known ETag (`Store::get_if_changed`):
    /// `304 Not Modified` is its answer for an unchanged object.
    GetIfChanged,
    Head,
    Create,
    Update,
    Overwrite,
    Delete,
    DeleteIfMatch,
    /// A GET whose body is handed out as a stream (`Store::open`), bounded
    /// by the request's timeout when `body_bounded`, else by nothing.
    Open {
        body_bounded: bool,
    },
    /// CreateMultipartUpload (`POST ?uploads`).
    BeginUpload,
    /// UploadPart (`PUT ?partNumber=N&uploadId=ID`).
    UploadPart,
    /// CompleteMultipartUpload (`POST ?uploadId=ID`), under a condition.
    CompleteUpload(Guard),
    /// AbortMultipartUpload (`DELETE ?uploadId=ID`).
    AbortUpload,
}

/// The condition a completion of an upload is sent under, as a PUT's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// `If-None-Match: *`.
    IfAbsent,
    /// `If-Match`.
    IfMatch,
    /// None.
    Unconditional,
}

impl Op {
    fn method(self) -> &'static str {
        match self {
            Op::Get | Op::GetIfChanged | Op::Open { .. } => "GET",
            Op::Head => "HEAD",
            Op::Create | Op::Update | Op::Overwrite | Op::UploadPart => "PUT",
            Op::Delete | Op::DeleteIfMatch | Op::AbortUpload => "DELETE",
            Op::BeginUpload | Op::CompleteUpload(_) => "POST",
        }
    }

    fn conditional(self) -> bool {
        matches!(
            self,
            Op::Create
                | Op::Update
                | Op::DeleteIfMatch
                | Op::CompleteUpload(Guard::IfAbsent | Guard::IfMatch)
        )
    }

    /// Whether the request changes the object at its key: what a service's
    /// write interval counts. A completion does (it makes the object); the
    /// other requests of an upload do not (they change the upload, which
    /// nothing reads at the key), so the parts of one upload are not
    /// spaced by the interval.
    fn writes(self) -> bool {
        matches!(
            self,
            Op::Create
                | Op::Update
                | Op::Overwrite
                | Op::Delete
                | Op::DeleteIfMatch
                | Op::CompleteUpload(_)
        )
    }
}

/// An answer whose body was read (up to the cap), or, for a successful
/// [`Op::Open`], left to read.
struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Result<Vec<u8>, usize>,
    /// The unread body of a successful [`Op::Open`].
    stream: Option<ureq::Body>,
}

impl HttpStore {
    /// A builder starting from `profile`'s defaults.
    pub fn builder(profile: Profile) -> HttpStoreBuilder {
        HttpStoreBuilder::new(profile)
    }

    /// The bucket this store reads and writes.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Where this store's credentials come from (never their values).
    pub fn credentials_source(&self) -> &Source {
        self.credentials.source()
    }

    /// When the credentials in use expire (`None` for credentials that do
    /// not, or before the first request).
    pub fn credentials_expire(&self) -> Option<SystemTime> {
        self.credentials.expires()
    }

    /// The URL an object's key is appended to (`…/bucket` path-style,
    /// `https://bucket.host` virtual-hosted).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    fn url(&self, key: &str) -> String {
        let key = encode_key(key);
        let mut url = String::with_capacity(self.base_url.len() + 1 + key.len());
        url.push_str(&self.base_url);
        url.push('/');
        url.push_str(&key);
        url
    }

    /// The unsigned request for `op` on `key`, its ETag spelled as the
    /// store spells them now.
    fn request(
        &self,
        op: Op,
        key: &str,
        condition: Option<&Version>,
        metadata: &[(String, String)],
    ) -> Result<http::Request<()>, StoreError> {
        self.request_spelled(op, key, condition, metadata, self.spelling.bare())
    }

    /// The unsigned request for `op` on `key`, its ETag sent `bare` or in
    /// quotes.
    fn request_spelled(
        &self,
        op: Op,
        key: &str,
        condition: Option<&Version>,
        metadata: &[(String, String)],
        bare: bool,
    ) -> Result<http::Request<()>, StoreError> {
        self.request_to(op, key, "", condition, metadata, bare)
    }

    /// The unsigned request for `op` on `key` with `query` (`""`, or
    /// `?…` as sent: a multipart upload's, which the signer takes), its
    /// ETag sent `bare` or in quotes.
    fn request_to(
        &self,
        op: Op,
        key: &str,
        query: &str,
        condition: Option<&Version>,
        metadata: &[(String, String)],
        bare: bool,
    ) -> Result<http::Request<()>, StoreError> {
        let fail = |message: String| {
            StoreError::new(StoreErrorKind::Rejected, op.method(), key).with_message(message)
        };
        let mut builder = http::Request::builder().uri(self.url(key) + query);
        builder = match op {
            Op::Get | Op::GetIfChanged | Op::Open { .. } => builder.method(Method::GET),
            Op::Head => builder.method(Method::HEAD),
            Op::Delete | Op::DeleteIfMatch | Op::AbortUpload => builder.method(Method::DELETE),
            // moto stores a form-urlencoded body as empty; say what it is.
            // The object a begun upload makes has the type it was begun
            // with.
            Op::Create | Op::Update | Op::Overwrite => builder
                .method(Method::PUT)
                .header("content-type", "application/octet-stream"),
            Op::BeginUpload => builder
                .method(Method::POST)
                .header("content-type", "application/octet-stream"),
            Op::UploadPart => builder.method(Method::PUT),
            Op::CompleteUpload(_) => builder
                .method(Method::POST)
                .header("content-type", "application/xml"),
        };
        match (op, condition) {
            (Op::Create | Op::CompleteUpload(Guard::IfAbsent), _) => {
                builder = builder.header("if-none-match", "*");
            }
            (
                Op::Update | Op::DeleteIfMatch | Op::CompleteUpload(Guard::IfMatch),
                Some(version),
            ) => {
                let Some(etag) = &version.etag else {
                    return Err(StoreError::new(StoreErrorKind::Rejected, op.method(), key)
                        .with_message(
                            "the version has no ETag: the service's earlier answer carried \
                             none, so If-Match cannot be sent; nothing was sent (read the \
                             object again for a version with an ETag)",
                        ));
                };
                builder = builder.header("if-match", Spelling::spell(etag, bare));
            }
            (Op::GetIfChanged, Some(version)) => {
                builder = builder.header("if-none-match", if_changed::spelled(version, key)?);
            }
            _ => {}
        }
        let mut request = builder
            .body(())
            .map_err(|e| fail(format!("cannot form the request: {e}")))?;
        for (name, value) in metadata {
            let name = HeaderName::try_from(format!("x-amz-meta-{}", name.to_ascii_lowercase()))
                .map_err(|_| fail(format!("metadata name {name:?} is not a header name")))?;
            let value = HeaderValue::try_from(value.as_str())
                .ok()
                .filter(|v| v.to_str().is_ok())
                .ok_or_else(|| fail(format!("metadata {name} is not visible ASCII")))?;
            request.headers_mut().append(name, value);
        }
        Ok(request)
    }

    /// `request`, signed as of `time` with the current credentials.
    #[cfg(test)]
    fn signed(
        &self,
        op: Op,
        key: &str,
        request: http::Request<()>,
        body: &[u8],
        time: SystemTime,
    ) -> Result<http::Request<()>, StoreError> {
        let credentials = self.credentials_for(op, key, None)?;
        self.signed_as(&credentials, op, key, request, body, time)
    }

    /// The credentials to sign with: the valid ones at once (the
    /// provider refreshes them in the background), or, with nothing
    /// valid, the ones a fetch gives by `deadline`. An error names the
    /// source; nothing was sent, but it is a [`StoreErrorKind::Transport`]
    /// so a renewal retries until its deadline (the source may answer
    /// again).
    fn credentials_for(
        &self,
        op: Op,
        key: &str,
        deadline: Option<Instant>,
    ) -> Result<Credentials, StoreError> {
        self.credentials.credentials(deadline).map_err(|e| {
            StoreError::new(StoreErrorKind::Transport, op.method(), key)
                .with_code("CredentialsUnavailable")
                .with_message(e.to_string())
                .not_sent()
        })
    }

    /// `request`, signed as of `time` with `credentials`.
    fn signed_as(
        &self,
        credentials: &Credentials,
        op: Op,
        key: &str,
        mut request: http::Request<()>,
        body: &[u8],
        time: SystemTime,
    ) -> Result<http::Request<()>, StoreError> {
        sign_request(
            credentials,
            &self.region,
            &self.keys,
            &mut request,
            body,
            time,
        )
        .map_err(|e| {
            StoreError::new(StoreErrorKind::Rejected, op.method(), key).with_message(e.to_string())
        })?;
        Ok(request)
    }

    /// The timeout of a request sent now: what is left before `deadline`,
    /// at most the store's timeout, or an error (nothing sent) once it
    /// has passed.
    fn time_left(
        &self,
        op: Op,
        key: &str,
        deadline: Option<Instant>,
    ) -> Result<Duration, StoreError> {
        let Some(deadline) = deadline else {
            return Ok(self.timeout);
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(StoreError::new(StoreErrorKind::Transport, op.method(), key)
                .with_message("the deadline passed before the request was sent")
                .timed_out()
                .not_sent());
        }
        // A stream's whole read is bounded by its caller's deadline, however
        // far: its stages up to the answer's head take the store's timeout
        // as well (see `send_now`).
        if op == (Op::Open { body_bounded: true }) {
            return Ok(left);
        }
        Ok(left.min(self.timeout))
    }

    /// Sign and send `request`, and read its answer up to the cap; a
    /// write waits its key's turn first on a service with a write interval
    /// ([`WriteSpacing`]), and is not sent when the turn comes after
    /// `deadline`.
    fn send(
        &self,
        op: Op,
        key: &str,
        request: http::Request<()>,
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Answer, StoreError> {
        let spacing = match &self.spacing {
            Some(spacing) if op.writes() => spacing,
            _ => return self.send_now(op, key, request, body, deadline),
        };
        let clock = SystemClock;
        let turn = match spacing.take_turn(key, &clock, deadline) {
            Ok(turn) => turn,
            Err(late) => return Err(late.error(op.method(), key, spacing.interval(), clock.now())),
        };
        let answer = self.send_now(op, key, request, body, deadline);
        match &answer {
            Err(e) if e.delivery() == Delivery::NotSent => turn.not_sent(),
            Err(_) => turn.wrote(None),
            Ok(answer) => turn.wrote(throttle_of(op, answer).flatten()),
        }
        answer
    }

    /// [`send`](Self::send), now.
    fn send_now(
        &self,
        op: Op,
        key: &str,
        request: http::Request<()>,
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Answer, StoreError> {
        // The defect a review found: the timeout taken before the wait for
        // credentials, so a slow source let the request leave late.
        let early = StoreMutant::TimeoutBeforeCredentials
            .on()
            .then(|| self.time_left(op, key, deadline));
        let credentials = self.credentials_for(op, key, deadline)?;
        let request = self.signed_as(&credentials, op, key, request, body, SystemTime::now())?;
        // Taken now, right before the bytes go out: whatever the credentials
        // cost came off the time left, and none of the request leaves after
        // the deadline (ureq bounds the lookup, the connection, the
        // handshake, the write and the answer by this one timeout).
        let timeout = match early {
            Some(timeout) => timeout?,
            None => self.time_left(op, key, deadline)?,
        };
        let request = self.agent.configure_request(request.map(|()| body));
        let request = match op {
            // A stream's body is bounded by its deadline (by nothing without
            // one); each stage up to the answer's head by the time left, at
            // most the store's timeout.
            Op::Open { body_bounded } => {
                let head = timeout.min(self.timeout);
                request
                    .timeout_global(body_bounded.then_some(timeout))
                    .timeout_resolve(Some(head))
                    .timeout_connect(Some(head))
                    .timeout_send_request(Some(head))
                    .timeout_recv_response(Some(head))
            }
            _ => request.timeout_global(Some(timeout)),
        }
        .build();
        let traced = trace::begin(op.method());
        let begun = self.idle.begin();
        net::take_opened();
        let ran = self
            .agent
            .run(request)
            .map_err(|e| transport_error(op, key, &self.target, self.proxy.as_deref(), e));
        self.idle.end(begun, net::take_opened());
        if let Some(traced) = traced {
            traced.end(
                trace_outcome(&ran),
                ran.as_ref().ok().and_then(service_date),
            );
        }
        let mut response = ran?;
        let status = response.status().as_u16();
        let declared = response
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        // A cap beyond u64 (never, in practice) reads everything.
        let cap = u64::try_from(self.max_body).unwrap_or(u64::MAX);
        if matches!(op, Op::Open { .. }) && (200..300).contains(&status) {
            let (parts, stream) = response.into_parts();
            return Ok(Answer {
                status,
                headers: parts.headers,
                body: Ok(Vec::new()),
                stream: Some(stream),
            });
        }
        let body = if op == Op::Head {
            // An answer to HEAD has no body, whatever length it declares.
            Ok(Vec::new())
        } else if declared.is_some_and(|n| n > cap) {
            Err(self.max_body)
        } else {
            // The declared length (at most the cap) at once, rather than
            // growing from empty; read_to_end still checks for more.
            let mut bytes =
                Vec::with_capacity(declared.map_or(0, |n| usize::try_from(n).unwrap_or(0)));
            response
                .body_mut()
                .as_reader()
                .take(cap.saturating_add(1))
                .read_to_end(&mut bytes)
                .map_err(|e| {
                    transport_error(
                        op,
                        key,
                        &self.target,
                        self.proxy.as_deref(),
                        ureq::Error::from(e),
                    )
                })?;
            if bytes.len() > self.max_body {
                Err(self.max_body)
            } else {
                Ok(bytes)
            }
        };
        Ok(Answer {
            status,
            headers: response.into_parts().0.headers,
            body,
            stream: None,
        })
    }

    /// `Ok(answer)` when the answer means success for `op`, else its error.
    /// A completion's `200` whose body is an `<Error>` is the error its
    /// code says ([`multipart::status_of_error`]).
    fn check(&self, op: Op, key: &str, answer: Answer) -> Result<Answer, StoreError> {
        let (status, parsed) = status_and_error(op, &answer);
        let success = (200..300).contains(&answer.status);
        let Some(kind) = failure_kind(op, status, parsed.code.as_deref()) else {
            return Ok(answer);
        };
        let mut error = StoreError::new(kind, op.method(), key);
        if kind == StoreErrorKind::Transport {
            // A 5xx (or 408, 429): the service's own answer.
            error = error.answered();
        }
        if let Some(retry_after) =
            throttle_of_parts(status, &answer.headers, parsed.code.as_deref())
        {
            error = error.throttled(retry_after);
        }
        let mut error = error.with_code(
            parsed
                .code
                .unwrap_or_else(|| format!("HTTP {}", answer.status)),
        );
        // A proxy in front of an http:// endpoint answers for itself.
        if let (407, Some(proxy)) = (answer.status, &self.proxy) {
            let fix = if proxy.authorization.is_some() {
                format!("check the user and password in {}", proxy.setting)
            } else {
                format!(
                    "give the proxy's user and password in {} (http://user:password@host:port)",
                    proxy.setting
                )
            };
            return Err(error
                .with_message(format!(
                    "{} refused the request (407 Proxy Authentication Required); {fix}",
                    proxy.describe()
                ))
                .permanent());
        }
        let region = header(&answer.headers, "x-amz-bucket-region").or(parsed.region);
        let message = match (&answer.body, parsed.message) {
            _ if is_wrong_region(answer.status, error.code())
                && (region.is_some() || parsed.endpoint.is_some()) =>
            {
                Some(self.wrong_region(region.as_deref(), parsed.endpoint.as_deref()))
            }
            (Err(cap), _) => Some(format!(
                "error body larger than the {cap}-byte cap, not read"
            )),
            (Ok(_), message) if success => Some(format!(
                "{} (in the body of a {} answer, as S3 may answer a completion)",
                message.as_deref().unwrap_or("no message"),
                answer.status
            )),
            (Ok(_), message) => message,
        };
        if let Some(message) = message {
            error = error.with_message(message);
        }
        let request_id = parsed
            .request_id
            .or_else(|| header(&answer.headers, "x-amz-request-id"));
        if let Some(id) = request_id {
            error = error.with_request_id(id);
        }
        Err(error)
    }

    /// What a redirect or a refused signing region says: the bucket's
    /// region (or the endpoint the service names) and what to set.
    fn wrong_region(&self, region: Option<&str>, endpoint: Option<&str>) -> String {
        let endpoint_too = if self.custom_endpoint {
            " and an endpoint in that region in AWS_ENDPOINT_URL"
        } else {
            ""
        };
        let (bucket, ours) = (&self.bucket, &self.region);
        match (region, endpoint) {
            (Some(region), endpoint) => {
                let mut text = format!(
                    "the bucket {bucket} is in region {region}, not {ours}; set \
                     AWS_REGION={region}{endpoint_too}"
                );
                if let Some(endpoint) = endpoint {
                    text.push_str(&format!(
                        " (its endpoint, as the service gives it: {endpoint})"
                    ));
                }
                text
            }
            (None, endpoint) => format!(
                "the bucket {bucket} is not in region {ours}: the service sends its requests \
                 to {}; set AWS_REGION to the bucket's region{endpoint_too}",
                endpoint.unwrap_or("another endpoint")
            ),
        }
    }

    /// Send `request` until it succeeds, fails for good, or has been tried
    /// [`MAX_ATTEMPTS`] times: a transient failure is tried again after a
    /// jittered pause, when that is safe (see [`retryable`]). Every attempt
    /// shares one deadline: the caller's, or the store's timeout from now.
    fn execute(
        &self,
        op: Op,
        key: &str,
        mut request: http::Request<()>,
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Answer, StoreError> {
        // One bound for the whole call, retries and credentials included:
        // a caller without a deadline gets the store's timeout once, not
        // once per attempt.
        let bound = deadline.unwrap_or_else(|| Instant::now() + self.timeout);
        let deadline = Some(bound);
        let mut attempt = 1;
        loop {
            let again = (attempt < MAX_ATTEMPTS).then(|| copy(&request));
            let result = self.execute_once(op, key, request, body, deadline);
            let (Err(e), Some(next)) = (&result, again) else {
                return result;
            };
            if !retryable(op, e) {
                return result;
            }
            let pause = backoff(attempt);
            // Only when a pause and some of a request still fit.
            if Instant::now() + pause * 2 >= bound {
                return result;
            }
            log::debug!(
                "{} {key}: {e}; trying again in {pause:?} (attempt {} of {MAX_ATTEMPTS})",
                op.method(),
                attempt + 1
            );
            std::thread::sleep(pause);
            request = next;
            attempt += 1;
        }
    }

    fn execute_once(
        &self,
        op: Op,
        key: &str,
        request: http::Request<()>,
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Answer, StoreError> {
        let again = self.credentials.refreshable().then(|| copy(&request));
        let answer = self.send(op, key, request, body, deadline)?;
        match (self.check(op, key, answer), again) {
            (Err(e), Some(again))
                if e.kind() == StoreErrorKind::PermissionDenied
                    && matches!(e.code(), Some("ExpiredToken" | "InvalidToken")) =>
            {
                // The service says the token is stale before we thought it
                // was: fetch once more and try once more, within the deadline.
                if !self.credentials.refresh_now(deadline) {
                    return Err(e);
                }
                log::warn!(
                    "{} {key}: the service refused the credentials from {} ({}); retrying \
                     once with fresh ones",
                    op.method(),
                    self.credentials.source(),
                    e.code().unwrap_or_default()
                );
                let answer = self.send(op, key, again, body, deadline)?;
                self.check(op, key, answer)
            }
            (result, _) => result,
        }
    }
}

/// An unsigned request's copy, for a retry.
pub(crate) fn copy(request: &http::Request<()>) -> http::Request<()> {
    let mut again = http::Request::new(());
    *again.method_mut() = request.method().clone();
    *again.uri_mut() = request.uri().clone();
    *again.version_mut() = request.version();
    *again.headers_mut() = request.headers().clone();
    again
}

impl Store for HttpStore {
    /// Requests go out on separate pooled connections, so an acquire's
    /// probe sends its four writes at once.
    fn concurrent_requests(&self) -> bool {
        true
    }

    /// How many times the store changed its spelling of ETags in
    /// `If-Match` (see [`HttpStore`]).
    fn condition_spelling(&self) -> u64 {
        self.spelling.changes()
    }

    /// S3's limit, which R2 and MinIO share.
    fn max_key_bytes(&self) -> Option<usize> {
        Some(crate::settings::S3_MAX_KEY_BYTES)
    }

    /// The profile's or the builder's
    /// ([`HttpStoreBuilder::write_interval`]).
    fn write_interval(&self) -> Option<Duration> {
        self.spacing.as_ref().map(WriteSpacing::interval)
    }

    /// One HEAD of `key`, bounded by `due`, when a connection idle until
    /// `due` would likely be gone by what the store has seen (see
    /// `http/idle.rs`); nothing otherwise.
    fn warm_up(&self, key: &str, due: Instant) {
        if due <= Instant::now() || !self.idle.needs_warming(due) {
            return;
        }
        match self.head(key, Some(due)) {
            Ok(_) => log::debug!("{key}: warmed a connection up for the renewal"),
            Err(e) if e.kind() == StoreErrorKind::NotFound => {}
            Err(e) => log::debug!("{key}: warming a connection up failed: {e}"),
        }
    }

    fn await_write_turn(&self, key: &str, deadline: Option<Instant>) {
        if let Some(spacing) = &self.spacing {
            spacing.await_turn(key, &SystemClock, deadline);
        }
    }

    /// `s3://bucket/`, `r2://bucket/` or `minio://bucket/`, by the profile.
    fn store_url(&self) -> Option<&str> {
        Some(&self.store_url)
    }

    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.get_object(key, deadline).map_err(|e| self.named(e))
    }

    /// A GET with `If-None-Match: <known ETag>`: a `304` is `Ok(None)`;
    /// a `200` at the known version too (a service that ignores the
    /// header). See `http/if_changed.rs`.
    fn get_if_changed(
        &self,
        key: &str,
        known: &Version,
        deadline: Option<Instant>,
    ) -> Result<Option<Object>, StoreError> {
        self.get_if_changed_object(key, known, deadline)
            .map_err(|e| self.named(e))
    }

    /// A HEAD request: the version and metadata of an object of any size.
    fn head(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.head_object(key, deadline).map_err(|e| self.named(e))
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        self.put_object(key, body, options)
            .map_err(|e| self.named(e))
    }

    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        self.delete_object(key, mode, deadline)
            .map_err(|e| self.named(e))
    }

    /// A GET whose body is read as it arrives, with no cap: the deadline
    /// bounds the whole read; with none, each stage up to the answer's
    /// head is bounded by the store's timeout and the body by nothing.
    fn open(&self, key: &str, deadline: Option<Instant>) -> Result<ObjectReader, StoreError> {
        self.open_object(key, deadline).map_err(|e| self.named(e))
    }

    fn upload_conditions(&self) -> Option<&UploadConditions> {
        Some(&self.upload_conditions)
    }

    fn begin_upload(&self, begin: &BeginUpload<'_>) -> Result<String, StoreError> {
        self.begin_upload_object(begin).map_err(|e| self.named(e))
    }

    fn upload_part(&self, part: &UploadPart<'_>) -> Result<UploadedPart, StoreError> {
        self.upload_part_object(part).map_err(|e| self.named(e))
    }

    fn complete_upload(&self, complete: &CompleteUpload<'_>) -> Result<Version, StoreError> {
        self.complete_upload_object(complete)
            .map_err(|e| self.named(e))
    }

    fn abort_upload(&self, abort: &AbortUpload<'_>) -> Result<(), StoreError> {
        self.abort_upload_object(abort).map_err(|e| self.named(e))
    }
}

/// The answer to a write or delete mode newer than this client: not
/// implemented, nothing sent.
fn unknown_mode(method: &'static str, key: &str) -> StoreError {
    StoreError::new(StoreErrorKind::NotImplemented, method, key)
        .with_message("the HTTP store does not know this mode; update bucket-lease-backends")
}

mod answers;
mod builder;
mod endpoint;
mod idle;
mod if_changed;
mod multipart;
mod objects;

#[cfg(test)]
mod tests;
