//! Objects in parts on an S3-compatible service: a multipart upload
//! (CreateMultipartUpload, UploadPart, CompleteMultipartUpload,
//! AbortMultipartUpload) and the streamed GET behind `Store::open`.
//!
//! Every request keeps the store's deadline rule (its timeout is taken
//! right before its bytes go out, after the credentials) and goes through
//! the store's one path of signing, sending and reading answers, so its
//! errors read as any other request's. What each promises:
//!
//! - **Begin** (`POST /key?uploads`) sends the object's metadata as a PUT
//!   does (`x-amz-meta-*`, `content-type: application/octet-stream`) and
//!   returns the `<UploadId>` of the answer. A service that answers 501 or
//!   `NotImplemented` takes no uploads in parts:
//!   [`StoreErrorKind::NotImplemented`]. It is retried after no answer or
//!   a transient one, like a read: a duplicate is an upload without parts,
//!   invisible at the key, whose id nobody learns, which is also what the
//!   first becomes when its answer is lost (a bucket's lifecycle rule
//!   `AbortIncompleteMultipartUpload` clears both).
//! - **A part** (`PUT /key?partNumber=N&uploadId=ID`) is sent from the
//!   caller's slice (hashed once for the signature, never copied) and
//!   returns the answer's `ETag` as given. It is retried after no answer
//!   or a transient one: a part sent again under its number replaces it.
//!   An upload the service no longer knows is
//!   [`StoreErrorKind::NotFound`].
//! - **The completion** (`POST /key?uploadId=ID`, the parts named in order,
//!   their ETags escaped) takes a [`PutMode`]: `Create` sends
//!   `If-None-Match: *`, `Update` sends `If-Match` spelled as the store
//!   spells it now, `Overwrite` nothing. A refusal (412, 304) is
//!   [`StoreErrorKind::AlreadyExists`] (create) or
//!   [`StoreErrorKind::Precondition`] (update); 409 is
//!   [`StoreErrorKind::Conflict`] (S3 then wants the upload begun again);
//!   404 `NoSuchUpload` is [`StoreErrorKind::NotFound`]; 501 or
//!   `NotImplemented` to a condition is [`StoreErrorKind::NotImplemented`]
//!   (the service takes no condition on a completion; nothing completed).
//!   S3 may answer `200` and then an `<Error>` body: that is the error its
//!   code says (`InternalError`: [`StoreErrorKind::Transport`], answered);
//!   a `200` whose body is neither a result nor an error is
//!   [`StoreErrorKind::Transport`], answered, as it may or may not have
//!   landed. The new version's ETag is the result's `<ETag>` (else the
//!   answer's header; Ceph RGW 16.2 gives neither), its version id the
//!   `x-amz-version-id` header. A completion that may have been sent is
//!   never sent again: a second one after the first landed would be
//!   refused by the object the first made, so it is settled by reading.
//!   It counts as a write of its key for a service's write interval; the
//!   other requests of an upload do not.
//! - **The abort** (`DELETE /key?uploadId=ID`) succeeds on 204 and on 404
//!   (`NoSuchUpload`: done or aborted already), and is retried as a delete.
//! - **A streamed read** (`Store::open`) is a GET whose answer's headers
//!   make the object's version and metadata, and whose body is handed out
//!   as it arrives, with no cap. The caller's deadline bounds the whole
//!   read, body included; with none, each stage up to the answer's head
//!   (lookup, connection, sending, awaiting the head) is bounded by the
//!   store's timeout, and the body by nothing. It is retried as a GET until
//!   an answer's head arrives, never after. An error answer is the error
//!   `get` gives; a failure while reading the body is an `io::Error`
//!   naming the object and the bytes read.

use super::{object_of, unknown_mode, version_of, Guard, HttpStore, Op};
use crate::sign::uri_encode;
use crate::xml;
use bucket_lease_core::multipart::{
    AbortUpload, BeginUpload, CompleteUpload, ObjectReader, UploadPart, UploadedPart, MAX_PARTS,
};
use bucket_lease_core::store::{PutMode, StoreError, StoreErrorKind, Version};
use std::io::{self, Read};
use std::time::Instant;

impl HttpStore {
    pub(super) fn open_object(
        &self,
        key: &str,
        deadline: Option<Instant>,
    ) -> Result<ObjectReader, StoreError> {
        let op = Op::Open {
            body_bounded: deadline.is_some(),
        };
        let request = self.request(op, key, None, &[])?;
        let mut answer = self.execute(op, key, request, &[], deadline)?;
        let stream = answer.stream.take();
        let object = object_of(key, answer)?;
        let stream = stream.ok_or_else(|| {
            StoreError::new(StoreErrorKind::Transport, "GET", key)
                .with_message("the answer's body was not kept to stream; read the object again")
        })?;
        Ok(ObjectReader {
            object,
            body: Box::new(Stream {
                inner: stream.into_reader(),
                url: self
                    .named(StoreError::new(StoreErrorKind::Transport, "GET", key))
                    .url(),
                read: 0,
            }),
        })
    }

    pub(super) fn begin_upload_object(
        &self,
        begin: &BeginUpload<'_>,
    ) -> Result<String, StoreError> {
        let op = Op::BeginUpload;
        let request = self.request_to(op, begin.key, "?uploads", None, begin.metadata, false)?;
        let answer = self
            .execute(op, begin.key, request, &[], begin.deadline)
            .map_err(|e| match e.kind() {
                StoreErrorKind::NotImplemented => {
                    let said = said(&e);
                    e.with_message(format!(
                        "the service takes no uploads in parts (CreateMultipartUpload){said}; \
                         write the object with one PUT"
                    ))
                }
                _ => e,
            })?;
        match &answer.body {
            Ok(bytes) => xml::upload_id(bytes),
            Err(_) => None,
        }
        .ok_or_else(|| {
            StoreError::new(StoreErrorKind::Rejected, op.method(), begin.key).with_message(format!(
                "the service answered CreateMultipartUpload {} without an <UploadId>, so the \
                 upload cannot go on; it may not take uploads in parts: write the object with \
                 one PUT",
                answer.status
            ))
        })
    }

    pub(super) fn upload_part_object(
        &self,
        part: &UploadPart<'_>,
    ) -> Result<UploadedPart, StoreError> {
        let op = Op::UploadPart;
        let number = part.number;
        if !(1..=MAX_PARTS).contains(&number) {
            return Err(
                StoreError::new(StoreErrorKind::Rejected, op.method(), part.key).with_message(
                    format!(
                        "part number {number} is outside 1 to {MAX_PARTS}, the numbers S3 takes; \
                     nothing was sent"
                    ),
                ),
            );
        }
        let query = format!(
            "?partNumber={number}&uploadId={}",
            upload_id(op, part.key, part.upload)?
        );
        let request = self.request_to(op, part.key, &query, None, &[], false)?;
        let answer = self.execute(op, part.key, request, part.body, part.deadline)?;
        let etag = super::header(&answer.headers, "etag").ok_or_else(|| {
            StoreError::new(StoreErrorKind::Rejected, op.method(), part.key).with_message(format!(
                "the service took part {number} without an ETag, which the completion must \
                 name; send the part again, or abort the upload"
            ))
        })?;
        Ok(UploadedPart { number, etag })
    }

    pub(super) fn complete_upload_object(
        &self,
        complete: &CompleteUpload<'_>,
    ) -> Result<Version, StoreError> {
        let (guard, condition) = match complete.mode {
            PutMode::Create => (Guard::IfAbsent, None),
            PutMode::Update(version) => (Guard::IfMatch, Some(version)),
            PutMode::Overwrite => (Guard::Unconditional, None),
            _ => return Err(unknown_mode("POST", complete.key)),
        };
        let op = Op::CompleteUpload(guard);
        if complete.parts.is_empty() {
            return Err(
                StoreError::new(StoreErrorKind::Rejected, op.method(), complete.key).with_message(
                    "an upload is completed from one part at least; nothing was sent",
                ),
            );
        }
        let query = format!(
            "?uploadId={}",
            upload_id(op, complete.key, complete.upload)?
        );
        let body = xml::complete_upload_body(complete.parts);
        let request = self.request_to(
            op,
            complete.key,
            &query,
            condition,
            &[],
            self.spelling.bare(),
        )?;
        let answer = self
            .execute(
                op,
                complete.key,
                request,
                body.as_bytes(),
                complete.deadline,
            )
            .map_err(|e| explain_completion(e, guard))?;
        let mut version = version_of(&answer.headers);
        match &answer.body {
            // No result (S3 sends spaces while it works, then the result
            // or an error): cut off, or a service that says nothing. The
            // caller settles it by reading the object.
            Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => {
                return Err(
                    StoreError::new(StoreErrorKind::Transport, op.method(), complete.key)
                        .with_code(format!("HTTP {}", answer.status))
                        .with_message(
                            "the service answered with no CompleteMultipartUploadResult: the \
                         answer was cut off, and the upload may or may not have been completed",
                        )
                        .answered(),
                )
            }
            Ok(bytes) => match xml::completed_etag(bytes) {
                Some(Some(etag)) => version.etag = Some(etag),
                Some(None) => {}
                None => {
                    return Err(StoreError::new(
                        StoreErrorKind::Transport,
                        op.method(),
                        complete.key,
                    )
                    .with_code(format!("HTTP {}", answer.status))
                    .with_message(
                        "the service answered with a body that is neither a \
                             CompleteMultipartUploadResult nor an Error: the upload may or may \
                             not have been completed",
                    )
                    .answered())
                }
            },
            Err(cap) => {
                return Err(
                    StoreError::new(StoreErrorKind::Transport, op.method(), complete.key)
                        .with_code(format!("HTTP {}", answer.status))
                        .with_message(format!(
                        "the answer's body is larger than the {cap}-byte cap and was not read: \
                         the upload may or may not have been completed"
                    ))
                        .answered(),
                )
            }
        }
        Ok(version)
    }

    pub(super) fn abort_upload_object(&self, abort: &AbortUpload<'_>) -> Result<(), StoreError> {
        let op = Op::AbortUpload;
        let query = format!("?uploadId={}", upload_id(op, abort.key, abort.upload)?);
        let request = self.request_to(op, abort.key, &query, None, &[], false)?;
        self.execute(op, abort.key, request, &[], abort.deadline)?;
        Ok(())
    }
}

/// `upload` as a query value, or the error for an empty one (nothing
/// sent).
fn upload_id(op: Op, key: &str, upload: &str) -> Result<String, StoreError> {
    if upload.is_empty() {
        return Err(StoreError::new(StoreErrorKind::Rejected, op.method(), key)
            .with_message("the upload id is empty; nothing was sent (begin an upload first)"));
    }
    Ok(uri_encode(upload))
}

/// What the service said in `error`, as ` (it said CODE: MESSAGE)`.
fn said(error: &StoreError) -> String {
    match (error.code(), error.message()) {
        (Some(code), Some(message)) => format!(" (it said {code}: {message})"),
        (Some(code), None) => format!(" (it said {code})"),
        (None, Some(message)) => format!(" ({message})"),
        (None, None) => String::new(),
    }
}

/// A failed completion's error, with what it means for the upload.
fn explain_completion(error: StoreError, guard: Guard) -> StoreError {
    let header = match guard {
        Guard::IfAbsent => "If-None-Match: *",
        Guard::IfMatch => "If-Match",
        Guard::Unconditional => "no condition",
    };
    let said = said(&error);
    let why = match error.kind() {
        StoreErrorKind::NotImplemented => format!(
            "the service does not take conditions on completing an upload: it refused \
             CompleteMultipartUpload with {header}{said}; nothing was completed (the upload is \
             still there to abort)"
        ),
        StoreErrorKind::Conflict => format!(
            "a conflicting write to the key beat the completion{said}; the upload must be \
             begun again and its parts sent again"
        ),
        StoreErrorKind::NotFound => format!(
            "the service no longer knows the upload: it was completed or aborted already{said}"
        ),
        _ => return error,
    };
    error.with_message(why)
}

/// The HTTP status an S3 error code stands for, for an error in the body
/// of a `200` answer to CompleteMultipartUpload (S3 may begin answering a
/// completion before it is done). `InternalError` and any code not known
/// here stand for a 500: the completion may or may not have taken effect.
pub(super) fn status_of_error(code: &str) -> u16 {
    match code {
        "PreconditionFailed" => 412,
        "NoSuchUpload" | "NoSuchKey" | "NoSuchBucket" => 404,
        "ConditionalRequestConflict" | "OperationAborted" => 409,
        "AccessDenied" | "SignatureDoesNotMatch" | "InvalidAccessKeyId" => 403,
        "NotImplemented" => 501,
        "SlowDown" | "ServiceUnavailable" => 503,
        "InvalidPart" | "InvalidPartOrder" | "EntityTooSmall" | "MalformedXML"
        | "InvalidRequest" | "InvalidArgument" => 400,
        _ => 500,
    }
}

/// A streamed body whose errors name the object and how far the read got.
struct Stream {
    inner: ureq::BodyReader<'static>,
    /// The object, as errors name it.
    url: String,
    read: u64,
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.read += n as u64;
                Ok(n)
            }
            Err(e) => Err(io::Error::new(
                // ureq's timeouts come as `Other`, wrapping its error.
                match e
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<ureq::Error>())
                {
                    Some(ureq::Error::Timeout(_)) => io::ErrorKind::TimedOut,
                    _ => e.kind(),
                },
                format!(
                    "GET {}: reading the object's body failed after {} bytes: {e}; open it \
                     again to read it whole",
                    self.url, self.read
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upload's request: its kind, query, condition, metadata and body.
    type Case<'a> = (
        Op,
        String,
        Option<&'a Version>,
        &'a [(String, String)],
        &'a [u8],
    );

    /// Every request of an upload, as the store forms it, signed by the
    /// store as aws-sigv4 signs it: upload ids with awkward characters,
    /// odd keys, metadata, both spellings of If-Match.
    #[test]
    fn every_upload_request_is_signed_as_aws_sigv4_signs_it() {
        use crate::sign::{header_list, sign_with_aws_sigv4};
        use crate::Credentials;
        use std::time::{Duration, UNIX_EPOCH};
        let credentials =
            Credentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
                .with_session_token("FwoGZXIvYXdzEJr//token+/=");
        let store = HttpStore::builder(super::super::tests::profile("test"))
            .endpoint("https://storage.example.com:8443/s3/")
            .bucket("lease-bucket")
            .credentials(credentials.clone())
            .build()
            .unwrap();
        let meta = vec![("Owner".to_string(), "  host-7   pid-42 ".to_string())];
        let version = Version::etag("\"5d41402abc4b2a76b9719d911017c592-2\"");
        let part = vec![9u8; 64 * 1024];
        let time = UNIX_EPOCH + Duration::from_secs(1_772_409_599);
        let mut count = 0;
        for key in ["k", "a key/with+plus", "tilde~é/日本語", "q?mark#hash"] {
            for id in ["2~EYD6wTz5d1WaPG-kw_w6.4", "VXBsb2Fk+/=", "sp ace&amp=%"] {
                let id = uri_encode(id);
                let complete = xml::complete_upload_body(&[UploadedPart {
                    number: 1,
                    etag: "\"e\"".into(),
                }]);
                let cases: [Case; 7] = [
                    (Op::BeginUpload, "?uploads".into(), None, &meta, b""),
                    (
                        Op::UploadPart,
                        format!("?partNumber=7&uploadId={id}"),
                        None,
                        &[],
                        &part,
                    ),
                    (
                        Op::CompleteUpload(Guard::IfAbsent),
                        format!("?uploadId={id}"),
                        None,
                        &[],
                        complete.as_bytes(),
                    ),
                    (
                        Op::CompleteUpload(Guard::IfMatch),
                        format!("?uploadId={id}"),
                        Some(&version),
                        &[],
                        complete.as_bytes(),
                    ),
                    (
                        Op::CompleteUpload(Guard::Unconditional),
                        format!("?uploadId={id}"),
                        None,
                        &[],
                        complete.as_bytes(),
                    ),
                    (Op::AbortUpload, format!("?uploadId={id}"), None, &[], b""),
                    (
                        Op::Open {
                            body_bounded: false,
                        },
                        String::new(),
                        None,
                        &[],
                        b"",
                    ),
                ];
                for (op, query, condition, metadata, body) in cases {
                    for bare in [false, true] {
                        let unsigned = store
                            .request_to(op, key, &query, condition, metadata, bare)
                            .unwrap();
                        let mut theirs = super::super::copy(&unsigned);
                        sign_with_aws_sigv4(&credentials, "us-east-1", &mut theirs, body, time)
                            .unwrap();
                        let ours = store.signed(op, key, unsigned, body, time).unwrap();
                        assert_eq!(
                            header_list(&ours),
                            header_list(&theirs),
                            "{op:?} {key} {query}"
                        );
                        count += 1;
                    }
                }
            }
        }
        assert_eq!(count, 4 * 3 * 7 * 2);
    }

    #[test]
    fn error_codes_in_a_completions_answer_stand_for_their_statuses() {
        use super::super::failure_kind;
        use StoreErrorKind::*;
        for (guard, code, kind) in [
            (Guard::IfAbsent, "PreconditionFailed", AlreadyExists),
            (Guard::IfMatch, "PreconditionFailed", Precondition),
            (Guard::IfAbsent, "NoSuchUpload", NotFound),
            (Guard::IfMatch, "NoSuchKey", Precondition),
            (Guard::Unconditional, "ConditionalRequestConflict", Conflict),
            (Guard::IfAbsent, "InternalError", Transport),
            (Guard::IfAbsent, "SlowDown", Transport),
            (Guard::IfAbsent, "SomethingNew", Transport),
            (Guard::IfAbsent, "NotImplemented", NotImplemented),
            (Guard::Unconditional, "InvalidPart", Rejected),
            (Guard::Unconditional, "AccessDenied", PermissionDenied),
        ] {
            let op = Op::CompleteUpload(guard);
            assert_eq!(
                failure_kind(op, status_of_error(code), Some(code)),
                Some(kind),
                "{guard:?} {code}"
            );
        }
    }

    #[test]
    fn answers_to_an_uploads_requests_map_by_meaning() {
        use super::super::failure_kind;
        use StoreErrorKind::*;
        for (op, status, code, kind) in [
            (Op::BeginUpload, 200, None, None),
            (Op::BeginUpload, 501, None, Some(NotImplemented)),
            (Op::BeginUpload, 404, Some("NoSuchBucket"), Some(Rejected)),
            (Op::UploadPart, 200, None, None),
            (Op::UploadPart, 404, Some("NoSuchUpload"), Some(NotFound)),
            (Op::UploadPart, 503, Some("SlowDown"), Some(Transport)),
            (Op::AbortUpload, 204, None, None),
            (Op::AbortUpload, 404, Some("NoSuchUpload"), None),
            (
                Op::CompleteUpload(Guard::IfAbsent),
                412,
                None,
                Some(AlreadyExists),
            ),
            (
                Op::CompleteUpload(Guard::IfAbsent),
                304,
                None,
                Some(AlreadyExists),
            ),
            (
                Op::CompleteUpload(Guard::IfMatch),
                412,
                None,
                Some(Precondition),
            ),
            (
                Op::CompleteUpload(Guard::Unconditional),
                412,
                None,
                Some(Rejected),
            ),
            (
                Op::CompleteUpload(Guard::IfAbsent),
                409,
                None,
                Some(Conflict),
            ),
            (
                Op::CompleteUpload(Guard::IfMatch),
                404,
                Some("NoSuchUpload"),
                Some(NotFound),
            ),
            (
                Op::CompleteUpload(Guard::IfAbsent),
                501,
                None,
                Some(NotImplemented),
            ),
            (
                Op::CompleteUpload(Guard::Unconditional),
                501,
                None,
                Some(Rejected),
            ),
            (
                Op::Open {
                    body_bounded: false,
                },
                404,
                Some("NoSuchKey"),
                Some(NotFound),
            ),
        ] {
            assert_eq!(
                failure_kind(op, status, code),
                kind,
                "{op:?} {status} {code:?}"
            );
        }
    }

    #[test]
    fn only_completions_count_as_writes_and_only_sent_completions_are_not_retried() {
        use super::super::retryable;
        let sent = StoreError::new(StoreErrorKind::Transport, "POST", "k").answered();
        let lost = StoreError::new(StoreErrorKind::Transport, "POST", "k");
        let not_sent = StoreError::new(StoreErrorKind::Transport, "POST", "k").not_sent();
        let refused = StoreError::new(StoreErrorKind::AlreadyExists, "POST", "k");
        for guard in [Guard::IfAbsent, Guard::IfMatch, Guard::Unconditional] {
            let op = Op::CompleteUpload(guard);
            assert!(op.writes());
            assert_eq!(op.conditional(), guard != Guard::Unconditional);
            assert!(!retryable(op, &sent) && !retryable(op, &lost));
            assert!(retryable(op, &not_sent) && !retryable(op, &refused));
        }
        for op in [
            Op::BeginUpload,
            Op::UploadPart,
            Op::AbortUpload,
            Op::Open { body_bounded: true },
        ] {
            assert!(!op.writes() && !op.conditional(), "{op:?}");
            assert!(retryable(op, &sent) && retryable(op, &lost) && retryable(op, &not_sent));
            assert!(!retryable(op, &refused));
        }
    }
}
