//! What an answer, or the failure to get one, means for a request.
//!
//! An answer's status and error code map to a [`StoreErrorKind`] by
//! meaning ([`failure_kind`], the table on [`HttpStore`]); a 429, or a 503
//! whose code is `SlowDown`, is a throttle, with its `Retry-After`; a
//! successful GET's headers and body make the [`Object`]; a request that
//! got no answer is told apart by where it stopped ([`transport_error`]:
//! not sent, or sent and not answered). Beside them, the retry rule: which
//! failures are worth sending again ([`retryable`]), how many times in all
//! ([`MAX_ATTEMPTS`]) and after what pause ([`backoff`]).
//!
//! What it promises: these are functions of their arguments alone (what
//! came back, and the request's kind, [`Op`], with its key and target for
//! messages). Nothing here sends a request or keeps state, so the same
//! answer always means the same thing; only the pause of [`backoff`] is
//! random, by design.
//!
//! [`HttpStore`]: super::HttpStore

use super::{multipart, Answer, Guard, Op};
use crate::net::{not_sent_of, Stage};
use crate::settings::Proxy;
use crate::trace;
use crate::xml::ErrorBody;
use bucket_lease_core::clock::{jittered, transient_backoff};
use bucket_lease_core::store::{Delivery, Object, StoreError, StoreErrorKind, Version};
use std::time::{Duration, SystemTime};
use ureq::http::{self, HeaderMap};

/// What an answer means for `op`: `None` for success, else the error kind.
pub(super) fn failure_kind(op: Op, status: u16, code: Option<&str>) -> Option<StoreErrorKind> {
    use StoreErrorKind::*;
    if (200..300).contains(&status) || (status == 304 && op == Op::GetIfChanged) {
        return None;
    }
    if code == Some("NoSuchBucket") {
        return Some(Rejected);
    }
    // A condition the service cannot honour, or uploads in parts it does
    // not take.
    if (op.conditional() || op == Op::BeginUpload)
        && (status == 501 || code == Some("NotImplemented"))
    {
        return Some(NotImplemented);
    }
    Some(match (status, op) {
        (404, Op::Delete | Op::DeleteIfMatch | Op::AbortUpload) => return None,
        (404, Op::Get | Op::GetIfChanged | Op::Head | Op::Open { .. } | Op::UploadPart) => NotFound,
        (404, Op::Update) => Precondition,
        // If-Match on an absent key; the upload itself is known.
        (404, Op::CompleteUpload(Guard::IfMatch)) if code == Some("NoSuchKey") => Precondition,
        // NoSuchUpload: completed or aborted already.
        (404, Op::CompleteUpload(_)) => NotFound,
        (304 | 412, Op::Create | Op::CompleteUpload(Guard::IfAbsent)) => AlreadyExists,
        (304 | 412, Op::Update | Op::DeleteIfMatch | Op::CompleteUpload(Guard::IfMatch)) => {
            Precondition
        }
        (409, _) => Conflict,
        (401 | 403, _) => PermissionDenied,
        (501, _) => Rejected,
        (408 | 429 | 500..=599, _) => Transport,
        _ => Rejected,
    })
}

/// Whether `answer` asks the client to slow down, and for how long when it
/// says: `Some(retry_after)` for a 429 or a 503 whose code is S3's
/// `SlowDown`. See [`HttpStore`] for what such an answer means.
///
/// [`HttpStore`]: super::HttpStore
pub(super) fn throttle_of(op: Op, answer: &Answer) -> Option<Option<Duration>> {
    let (status, parsed) = status_and_error(op, answer);
    throttle_of_parts(status, &answer.headers, parsed.code.as_deref())
}

/// The status `answer` stands for, and its error body: a failure's own,
/// and for a completion's `200` whose body is an `<Error>`, the status its
/// code says ([`multipart::status_of_error`]).
pub(super) fn status_and_error(op: Op, answer: &Answer) -> (u16, ErrorBody) {
    let success = (200..300).contains(&answer.status);
    match &answer.body {
        Ok(bytes) if !success => (answer.status, ErrorBody::parse(bytes)),
        Ok(bytes) if matches!(op, Op::CompleteUpload(_)) => {
            let parsed = ErrorBody::parse(bytes);
            match parsed.code.as_deref().map(multipart::status_of_error) {
                Some(status) => (status, parsed),
                None => (answer.status, ErrorBody::default()),
            }
        }
        _ => (answer.status, ErrorBody::default()),
    }
}

/// [`throttle_of`], with the answer's status (the one its error code
/// stands for) and error code already read.
pub(super) fn throttle_of_parts(
    status: u16,
    headers: &HeaderMap,
    code: Option<&str>,
) -> Option<Option<Duration>> {
    let throttled =
        status == 429 || (status == 503 && code.is_some_and(|c| c.starts_with("SlowDown")));
    throttled.then(|| retry_after(headers))
}

/// The longest `Retry-After` honoured: a longer one is taken as this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// An answer's `Retry-After` in seconds (its HTTP-date form is not read),
/// at most [`MAX_RETRY_AFTER`].
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: u64 = header(headers, "retry-after")?.trim().parse().ok()?;
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

/// The most times one request is sent (the AWS SDKs' standard mode).
pub(super) const MAX_ATTEMPTS: u32 = 3;

/// Whether `error` is worth trying `op` again for: a request that was not
/// sent (nothing can have landed), or one that the same request again does
/// no harm to (a read, an unconditional delete, and of an upload: a part,
/// which a second send under its number replaces; an abort, which a second
/// send finds done; a begin, whose duplicate is an empty upload nobody
/// learns the id of, as the first may be after a lost answer) that got no
/// answer or a transient one (5xx, 408, 429: `SlowDown`, `InternalError`,
/// `RequestTimeout`). A write that may have reached the service is never
/// re-sent, and neither is a completion (a second one, after the first
/// landed, would be refused by the very object the first made): the lease
/// logic reconciles an unknown outcome by reading.
pub(super) fn retryable(op: Op, error: &StoreError) -> bool {
    use bucket_lease_core::store::Delivery;
    if error.kind() != StoreErrorKind::Transport {
        return false;
    }
    error.delivery() == Delivery::NotSent
        || matches!(
            op,
            Op::Get
                | Op::GetIfChanged
                | Op::Head
                | Op::Delete
                | Op::Open { .. }
                | Op::BeginUpload
                | Op::UploadPart
                | Op::AbortUpload
        )
}

/// The pause before attempt `attempt + 1`: the core's
/// [`transient_backoff`], jittered (one half to three halves), so that
/// clients refused together do not retry together.
pub(super) fn backoff(attempt: u32) -> Duration {
    jittered(transient_backoff(attempt))
}

/// Whether an answer says the bucket is in another region: a redirect, or
/// a signature scoped to the wrong region.
pub(super) fn is_wrong_region(status: u16, code: Option<&str>) -> bool {
    matches!(status, 301 | 307)
        || matches!(
            code,
            Some(
                "PermanentRedirect"
                    | "TemporaryRedirect"
                    | "AuthorizationHeaderMalformed"
                    | "IllegalLocationConstraintException"
            )
        )
}

pub(super) fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

pub(super) fn version_of(headers: &HeaderMap) -> Version {
    Version {
        etag: header(headers, "etag"),
        version_id: header(headers, "x-amz-version-id"),
    }
}

/// The object a successful GET answered, or [`StoreErrorKind::TooLarge`]
/// (carrying the version its headers name, when they name one) when its
/// body was over the cap.
pub(super) fn object_of(key: &str, answer: Answer) -> Result<Object, StoreError> {
    let version = version_of(&answer.headers);
    let body = match answer.body {
        Ok(body) => body,
        Err(cap) => {
            let error = StoreError::new(StoreErrorKind::TooLarge, "GET", key);
            let read = format!(
                "the object is larger than the {cap}-byte cap; its body was not read past it"
            );
            return Err(if version == Version::default() {
                error.with_message(format!("{read}; the answer named no version of it"))
            } else {
                error
                    .with_message(format!(
                        "{read}; it can be replaced conditionally on the version this error \
                         carries"
                    ))
                    .with_version(version)
            });
        }
    };
    let metadata = answer
        .headers
        .iter()
        .filter_map(|(name, value)| {
            let name = name.as_str().strip_prefix("x-amz-meta-")?;
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            Some((name.to_string(), value))
        })
        .collect();
    Ok(Object::new(body, version).with_metadata(metadata))
}

/// How a request ended, for [`trace`].
pub(super) fn trace_outcome(
    ran: &Result<http::Response<ureq::Body>, StoreError>,
) -> trace::Outcome {
    match ran {
        Ok(response) => trace::Outcome::Status(response.status().as_u16()),
        Err(e) if e.delivery() == Delivery::NotSent => trace::Outcome::NotSent,
        Err(e) if e.is_timeout() => trace::Outcome::Timeout,
        Err(_) => trace::Outcome::Failed,
    }
}

/// The answer's `Date` (`Sun, 06 Nov 1994 08:49:37 GMT`, the only form
/// HTTP/1.1 services send), when it has one that reads.
pub(super) fn service_date(response: &http::Response<ureq::Body>) -> Option<SystemTime> {
    parse_http_date(response.headers().get("date")?.to_str().ok()?)
}

/// See [`service_date`].
pub(super) fn parse_http_date(text: &str) -> Option<SystemTime> {
    let mut words = text.split_ascii_whitespace();
    let (_weekday, day, month, year, clock, zone) = (
        words.next()?,
        words.next()?,
        words.next()?,
        words.next()?,
        words.next()?,
        words.next()?,
    );
    if zone != "GMT" || words.next().is_some() {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = i64::try_from(MONTHS.iter().position(|m| *m == month)? + 1).ok()?;
    let (day, year): (i64, i64) = (day.parse().ok()?, year.parse().ok()?);
    let mut hms = clock.split(':').map(|n| n.parse::<i64>().ok());
    let (h, m, sec) = (hms.next()??, hms.next()??, hms.next()??);
    if !(1..=31).contains(&day) || !(1970..=9999).contains(&year) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    // Days from 1970-01-01 to the date (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days * 86_400 + h * 3600 + m * 60 + sec).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// The error for a request that got no answer: not sent (the lookup, the
/// connection, the proxy or the TLS handshake to `target` failed), or
/// sent (through `via`, a proxy) and not answered. A certificate the
/// client does not trust, or a proxy that refuses the tunnel, is
/// [`StoreErrorKind::Rejected`] and permanent: trying again cannot help.
pub(super) fn transport_error(
    op: Op,
    key: &str,
    target: &str,
    via: Option<&Proxy>,
    error: ureq::Error,
) -> StoreError {
    let timed_out = match &error {
        ureq::Error::Timeout(_) => true,
        ureq::Error::Io(e) => matches!(
            e.kind(),
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
        ),
        _ => false,
    };
    let kind = match &error {
        ureq::Error::BadUri(_) | ureq::Error::Http(_) | ureq::Error::RequireHttpsOnly(_) => {
            StoreErrorKind::Rejected
        }
        _ => StoreErrorKind::Transport,
    };
    let (kind, code) = match not_sent_of(&error).map(|n| n.stage) {
        Some(Stage::Certificate) => (StoreErrorKind::Rejected, Some("InvalidCertificate")),
        Some(Stage::ProxyRefused) => (StoreErrorKind::Rejected, Some("ProxyRefused")),
        _ => (kind, None),
    };
    let mut e = StoreError::new(kind, op.method(), key);
    if let Some(code) = code {
        e = e.with_code(code).permanent();
    }
    let e = if let Some(not_sent) = not_sent_of(&error) {
        let detail = &not_sent.detail;
        let message = match not_sent.stage {
            Stage::Certificate => format!("the TLS handshake with {target} failed: {detail}"),
            Stage::Proxy | Stage::ProxyRefused if detail.contains(target) => detail.clone(),
            Stage::Proxy | Stage::ProxyRefused => {
                format!("{detail} (requests to {target} go through the proxy)")
            }
            Stage::Lookup => {
                let host = target.rsplit_once(':').map_or(target, |(host, _)| host);
                format!(
                    "could not look up {host} (for {target}): {detail}; check the endpoint's \
                     host name, or the region"
                )
            }
            Stage::Connect => format!(
                "could not connect to {target}: {detail}; check that the service listens at \
                 {target}, the endpoint's host and port"
            ),
            // rustls' word for a record that is not TLS: a plain-HTTP server.
            Stage::Tls if detail.contains("InvalidContentType") => format!(
                "the TLS handshake with {target} failed: the server did not answer in TLS \
                 ({detail}); check http:// vs https:// in the endpoint"
            ),
            // A plain-HTTP server waits, silent, for a request line.
            Stage::Tls if timed_out => format!(
                "the TLS handshake with {target} failed: {detail}; a server that speaks plain \
                 HTTP never answers one: check http:// vs https:// in the endpoint"
            ),
            Stage::Tls => format!(
                "the TLS handshake with {target} failed: {detail}; check the endpoint and the \
                 server's certificate"
            ),
        };
        e.with_message(message).not_sent()
    } else if kind == StoreErrorKind::Transport {
        let detail = match &error {
            ureq::Error::Io(io) => io.to_string(),
            ureq::Error::Timeout(_) => "timed out".to_string(),
            other => other.to_string(),
        };
        match via {
            Some(proxy) => e.with_message(format!(
                "sent to {target} through {}, then: {detail}",
                proxy.describe()
            )),
            None => e.with_message(format!("sent to {target}, then: {detail}")),
        }
    } else {
        e.with_message(error.to_string())
    };
    if timed_out {
        e.timed_out()
    } else {
        e
    }
}
