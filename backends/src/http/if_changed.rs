//! The conditional GET behind `Store::get_if_changed`, for a watcher that
//! polls one object (the core's `watch`).
//!
//! What it promises:
//!
//! - **An unchanged object costs a `304` and no body.** The GET carries
//!   `If-None-Match` with the known ETag as the service returned it, in its
//!   quotes (RFC 9110's form; RGW's refusal of a quoted `If-Match` on PUT
//!   does not extend to `If-None-Match` on GET: `tests/watch_on_servers.rs`
//!   checks the `304` on moto and Ceph RGW 16.2). `304 Not Modified` is
//!   `Ok(None)`.
//! - **A service that ignores the header still works**: a `200` whose
//!   version is the known one ([`Version::is_changed`]) is `Ok(None)` too;
//!   any other `200` is the object, read as `get` reads it (the same cap,
//!   metadata and errors).
//! - **Otherwise it is a GET**: `404` is [`StoreErrorKind::NotFound`], the
//!   other answers mean what they mean to `get`, and it is retried as a
//!   read. A known version without an ETag has nothing to send: a plain
//!   GET.
//! - **Signed like every request**: SigV4 here signs every header sent
//!   (`If-None-Match` included, as aws-sigv4 does; S3 does not require it
//!   signed, and accepts it signed).

use super::{object_of, HttpStore, Op};
use bucket_lease_core::store::{Object, StoreError, StoreErrorKind, Version};
use std::time::Instant;

impl HttpStore {
    /// See the [module docs](self).
    pub(super) fn get_if_changed_object(
        &self,
        key: &str,
        known: &Version,
        deadline: Option<Instant>,
    ) -> Result<Option<Object>, StoreError> {
        if known.etag.is_none() {
            return self.get_object(key, deadline).map(Some);
        }
        let request = self.request(Op::GetIfChanged, key, Some(known), &[])?;
        let answer = self.execute(Op::GetIfChanged, key, request, &[], deadline)?;
        if answer.status == 304 {
            return Ok(None);
        }
        let object = object_of(key, answer)?;
        Ok(known.is_changed(&object.version).then_some(object))
    }
}

/// The `If-None-Match` value for `version`: its ETag as the service gave
/// it; an error (nothing sent) for a version without one.
pub(super) fn spelled(version: &Version, key: &str) -> Result<String, StoreError> {
    version.etag.clone().ok_or_else(|| {
        StoreError::new(StoreErrorKind::Rejected, "GET", key).with_message(
            "the version has no ETag, so If-None-Match cannot be sent; nothing was sent (read \
             the object with a plain GET)",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::profile;
    use super::*;
    use crate::sign::{header_list, sign_with_aws_sigv4};
    use crate::Credentials;
    use bucket_lease_core::store::Store;
    use std::io::{BufRead, BufReader, Write};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, SystemTime};

    /// A loopback server answering each request with what `answer` makes
    /// of its head (lower-cased header lines), on kept connections; the
    /// heads it saw.
    fn server(
        answer: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (answer, heads) = (Arc::new(answer), Arc::clone(&seen));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let (answer, heads) = (Arc::clone(&answer), Arc::clone(&heads));
                std::thread::spawn(move || {
                    let mut stream = stream.unwrap();
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    loop {
                        let mut head = String::new();
                        loop {
                            let mut line = String::new();
                            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            if line == "\r\n" {
                                break;
                            }
                            head.push_str(&line.to_ascii_lowercase());
                        }
                        heads.lock().unwrap().push(head.clone());
                        if stream.write_all(answer(&head).as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, seen)
    }

    fn store(url: &str) -> HttpStore {
        HttpStore::builder(profile("test"))
            .endpoint(url)
            .bucket("bkt")
            .credentials(Credentials::new("AKID", "SECRET"))
            .build()
            .unwrap()
    }

    fn soon() -> Option<Instant> {
        Some(Instant::now() + Duration::from_secs(10))
    }

    /// A server that honours `If-None-Match` on ETag `"v2"`.
    fn conformant(head: &str) -> String {
        if head.contains("if-none-match: \"v2\"\r\n") {
            "HTTP/1.1 304 Not Modified\r\nETag: \"v2\"\r\n\r\n".to_string()
        } else {
            "HTTP/1.1 200 OK\r\nETag: \"v2\"\r\ncontent-length: 4\r\n\r\nbody".to_string()
        }
    }

    #[test]
    fn an_unchanged_object_is_a_304_and_a_changed_one_is_read() {
        let (url, heads) = server(conformant);
        let store = store(&url);
        let same = Version::etag("\"v2\"");
        assert_eq!(store.get_if_changed("k", &same, soon()).unwrap(), None);
        let old = Version::etag("\"v1\"");
        let object = store.get_if_changed("k", &old, soon()).unwrap().unwrap();
        assert_eq!(
            (object.body.as_slice(), object.version),
            (&b"body"[..], same)
        );
        let heads = heads.lock().unwrap();
        assert!(
            heads[0].starts_with("get /bkt/k http/1.1\r\n"),
            "{}",
            heads[0]
        );
        // Sent as the service spelled it, quotes and all, and signed.
        assert!(
            heads[0].contains("if-none-match: \"v2\"\r\n"),
            "{}",
            heads[0]
        );
        assert!(
            heads[0].contains("signedheaders=host;if-none-match;"),
            "{}",
            heads[0]
        );
        assert!(
            heads[1].contains("if-none-match: \"v1\"\r\n"),
            "{}",
            heads[1]
        );
    }

    #[test]
    fn a_service_that_ignores_the_header_is_compared_by_version() {
        let (url, heads) = server(|_| {
            "HTTP/1.1 200 OK\r\nETag: \"v2\"\r\ncontent-length: 4\r\n\r\nbody".to_string()
        });
        let store = store(&url);
        assert_eq!(
            store
                .get_if_changed("k", &Version::etag("\"v2\""), soon())
                .unwrap(),
            None
        );
        // Without an ETag there is nothing to send: a plain GET, read.
        let read = store.get_if_changed("k", &Version::default(), soon());
        assert_eq!(read.unwrap().unwrap().body, b"body");
        let heads = heads.lock().unwrap();
        assert!(!heads[1].contains("if-none-match"), "{}", heads[1]);
    }

    #[test]
    fn an_absent_object_is_not_found_and_errors_read_as_a_gets() {
        let (url, _) = server(|head| {
            let status = if head.contains("/gone ") {
                "404 Not Found"
            } else {
                "403 Forbidden"
            };
            format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n")
        });
        let store = store(&url);
        let known = Version::etag("\"v1\"");
        let gone = store.get_if_changed("gone", &known, soon()).unwrap_err();
        assert_eq!(gone.kind(), StoreErrorKind::NotFound, "{gone}");
        let denied = store.get_if_changed("k", &known, soon()).unwrap_err();
        assert_eq!(denied.kind(), StoreErrorKind::PermissionDenied, "{denied}");
        assert!(
            denied.to_string().starts_with("GET test://bkt/k: "),
            "{denied}"
        );
    }

    /// The request is signed as aws-sigv4 signs it, byte for byte.
    #[test]
    fn the_conditional_get_is_signed_as_aws_sigv4_signs_it() {
        let store = store("http://127.0.0.1:9");
        let known = Version::etag("\"5d41402abc4b2a76b9719d911017c592\"");
        let unsigned = store
            .request(Op::GetIfChanged, "jobs/nightly/LEASE", Some(&known), &[])
            .unwrap();
        assert_eq!(
            unsigned.headers()["if-none-match"],
            "\"5d41402abc4b2a76b9719d911017c592\""
        );
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let ours = store
            .signed(
                Op::GetIfChanged,
                "jobs/nightly/LEASE",
                super::super::copy(&unsigned),
                b"",
                time,
            )
            .unwrap();
        let mut theirs = super::super::copy(&unsigned);
        let credentials = Credentials::new("AKID", "SECRET");
        sign_with_aws_sigv4(&credentials, &store.region, &mut theirs, b"", time).unwrap();
        assert_eq!(header_list(&ours), header_list(&theirs));
    }
}
