//! The XML bodies of S3-compatible services: the error body
//! `<Error><Code>…</Code><Message>…</Message><RequestId>…</RequestId></Error>`,
//! the answers to CreateMultipartUpload
//! (`<InitiateMultipartUploadResult><UploadId>`) and
//! CompleteMultipartUpload (`<CompleteMultipartUploadResult><ETag>`), and
//! the CompleteMultipartUpload request body.
//!
//! Reading never fails: a body that is empty, not XML, truncated or about
//! something else gives `None` for what it does not hold, and only the
//! root's direct children are read. Writing escapes every ETag.

use bucket_lease_core::multipart::UploadedPart;
use quick_xml::escape::{escape, resolve_predefined_entity};
use quick_xml::events::Event;
use quick_xml::Reader;

/// What a service said about a failed request. Every part is optional: a
/// body that is empty, not XML or not an `<Error>` gives all `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ErrorBody {
    pub(crate) code: Option<String>,
    pub(crate) message: Option<String>,
    pub(crate) request_id: Option<String>,
    /// The endpoint a redirect names (`PermanentRedirect`,
    /// `TemporaryRedirect`).
    pub(crate) endpoint: Option<String>,
    /// The region the service expected (`AuthorizationHeaderMalformed`).
    pub(crate) region: Option<String>,
}

impl ErrorBody {
    /// Read the `Code`, `Message`, `RequestId`, `Endpoint` and `Region`
    /// children of a root `Error` element. Malformed XML ends the reading;
    /// what was read so far is kept.
    pub(crate) fn parse(body: &[u8]) -> ErrorBody {
        let Some([code, message, request_id, endpoint, region]) = children(
            body,
            "Error",
            ["Code", "Message", "RequestId", "Endpoint", "Region"],
        ) else {
            return ErrorBody::default();
        };
        ErrorBody {
            code,
            message,
            request_id,
            endpoint,
            region,
        }
    }
}

/// The upload id of an answer to CreateMultipartUpload, when it holds one.
pub(crate) fn upload_id(body: &[u8]) -> Option<String> {
    let [id] = children(body, "InitiateMultipartUploadResult", ["UploadId"])?;
    id
}

/// Whether `body` is an answer to CompleteMultipartUpload
/// (`<CompleteMultipartUploadResult>`), and the ETag it gives the object
/// (`Some(None)` when it gives none, or an empty one: Ceph RGW 16.2 answers
/// `<ETag></ETag>`).
pub(crate) fn completed_etag(body: &[u8]) -> Option<Option<String>> {
    let [etag] = children(body, "CompleteMultipartUploadResult", ["ETag"])?;
    Some(etag)
}

/// The body of a CompleteMultipartUpload request naming `parts` in the
/// order given, their ETags escaped.
pub(crate) fn complete_upload_body(parts: &[UploadedPart]) -> String {
    let mut body = String::with_capacity(96 + parts.len() * 96);
    body.push_str("<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    for part in parts {
        body.push_str("<Part><PartNumber>");
        body.push_str(&part.number.to_string());
        body.push_str("</PartNumber><ETag>");
        body.push_str(&escape(part.etag.as_str()));
        body.push_str("</ETag></Part>");
    }
    body.push_str("</CompleteMultipartUpload>");
    body
}

/// The text of the direct children named `names` of a root element named
/// `root` (each trimmed; empty is `None`), or `None` when the body's root
/// is another element, or none. Malformed XML ends the reading; what was
/// read so far is kept.
fn children<const N: usize>(
    body: &[u8],
    root: &str,
    names: [&str; N],
) -> Option<[Option<String>; N]> {
    let text = std::str::from_utf8(body).ok()?;
    let mut found: [Option<String>; N] = std::array::from_fn(|_| None);
    let mut reader = Reader::from_str(text);
    let mut depth = 0usize;
    // Whether the current root element is `root`, and whether one was.
    let (mut in_root, mut matched) = (false, false);
    let mut field: Option<usize> = None;
    let mut value = String::new();
    loop {
        match reader.read_event() {
            Ok(Event::Start(start)) => {
                depth += 1;
                let name = start.local_name();
                if depth == 1 {
                    in_root = name.as_ref() == root;
                    matched |= in_root;
                } else if depth == 2 && in_root {
                    field = names.iter().position(|n| name.as_ref() == *n);
                    value.clear();
                }
            }
            Ok(Event::Empty(empty)) if depth == 0 => {
                matched |= empty.local_name().as_ref() == root;
            }
            Ok(Event::End(_)) => {
                if depth == 2 {
                    if let Some(i) = field.take() {
                        found[i] = Some(value.trim().to_string()).filter(|v| !v.is_empty());
                    }
                }
                depth = depth.saturating_sub(1);
            }
            Ok(Event::Text(text)) if field.is_some() => value.push_str(&text.xml10_content()),
            Ok(Event::CData(data)) if field.is_some() => value.push_str(&data.xml10_content()),
            Ok(Event::GeneralRef(reference)) if field.is_some() => {
                if let Ok(Some(c)) = reference.resolve_char_ref() {
                    value.push(c);
                } else if let Some(s) = resolve_predefined_entity(&reference.xml10_content()) {
                    value.push_str(s);
                }
            }
            Ok(Event::Eof) | Err(_) => break,
            Ok(_) => {}
        }
    }
    matched.then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_code_message_and_request_id() {
        let body = br#"<?xml version="1.0" encoding="UTF-8"?>
<Error>
  <Code>SignatureDoesNotMatch</Code>
  <Message>The request signature we calculated does not match &amp; so on &#33;</Message>
  <Resource>/b/k</Resource>
  <RequestId>4442587FB7D0A2F9</RequestId>
  <HostId><![CDATA[host]]></HostId>
</Error>"#;
        assert_eq!(
            ErrorBody::parse(body),
            ErrorBody {
                code: Some("SignatureDoesNotMatch".into()),
                message: Some(
                    "The request signature we calculated does not match & so on !".into()
                ),
                request_id: Some("4442587FB7D0A2F9".into()),
                ..ErrorBody::default()
            }
        );
        let redirect = ErrorBody::parse(
            b"<Error><Code>PermanentRedirect</Code><Endpoint>b.s3.eu-west-1.amazonaws.com\
              </Endpoint><Region>eu-west-1</Region></Error>",
        );
        assert_eq!(
            redirect.endpoint.as_deref(),
            Some("b.s3.eu-west-1.amazonaws.com")
        );
        assert_eq!(redirect.region.as_deref(), Some("eu-west-1"));
    }

    #[test]
    fn ignores_other_documents_and_garbage() {
        for body in [
            &b""[..],
            b"not xml at all",
            b"<html><Code>x</Code></html>",
            b"<Error><Nested><Code>x</Code></Nested></Error>",
            b"\xff\xfe",
        ] {
            assert_eq!(ErrorBody::parse(body), ErrorBody::default());
        }
        let truncated = ErrorBody::parse(b"<Error><Code>NoSuchKey</Code><Message>The");
        assert_eq!(truncated.code.as_deref(), Some("NoSuchKey"));
        assert_eq!(truncated.message, None);
    }

    #[test]
    fn reads_an_upload_id_and_a_completions_etag() {
        let initiated = br#"<?xml version="1.0" encoding="UTF-8"?>
<InitiateMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Bucket>b</Bucket><Key>k</Key><UploadId>2~EYD6wTz5d1W&amp;x</UploadId>
</InitiateMultipartUploadResult>"#;
        assert_eq!(upload_id(initiated).as_deref(), Some("2~EYD6wTz5d1W&x"));
        for other in [
            &b""[..],
            b"<Error><UploadId>x</UploadId></Error>",
            b"<InitiateMultipartUploadResult><Nested><UploadId>x</UploadId></Nested>\
              </InitiateMultipartUploadResult>",
            b"<InitiateMultipartUploadResult><UploadId> </UploadId>\
              </InitiateMultipartUploadResult>",
        ] {
            assert_eq!(upload_id(other), None);
        }
        // S3 may send spaces before the result, to keep the connection.
        let completed = b"  \n <?xml version=\"1.0\"?><CompleteMultipartUploadResult>\
            <Location>l</Location><ETag>&quot;3858f62230ac3c915f300c664312c11f-9&quot;</ETag>\
            </CompleteMultipartUploadResult>";
        assert_eq!(
            completed_etag(completed),
            Some(Some("\"3858f62230ac3c915f300c664312c11f-9\"".to_string()))
        );
        // Ceph RGW 16.2's answer: an empty ETag.
        let rgw = b"<CompleteMultipartUploadResult><Key>k</Key><ETag></ETag>\
            </CompleteMultipartUploadResult>";
        assert_eq!(completed_etag(rgw), Some(None));
        assert_eq!(
            completed_etag(b"<CompleteMultipartUploadResult/>"),
            Some(None)
        );
        assert_eq!(
            completed_etag(b"<Error><Code>InternalError</Code></Error>"),
            None
        );
        assert_eq!(completed_etag(b"garbage"), None);
    }

    #[test]
    fn a_completions_body_names_the_parts_in_order_with_their_etags_escaped() {
        let parts = [
            UploadedPart {
                number: 1,
                etag: "\"a<b>&'c\"".into(),
            },
            UploadedPart {
                number: 10000,
                etag: "plain".into(),
            },
        ];
        assert_eq!(
            complete_upload_body(&parts),
            "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
             <Part><PartNumber>1</PartNumber><ETag>&quot;a&lt;b&gt;&amp;&apos;c&quot;</ETag>\
             </Part><Part><PartNumber>10000</PartNumber><ETag>plain</ETag></Part>\
             </CompleteMultipartUpload>"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

        /// Any bytes up to the read cap: never a panic, and nothing read
        /// that the body did not hold.
        #[test]
        fn any_body_parses_to_parts_of_itself(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048)) {
            let parsed = ErrorBody::parse(&body);
            for part in [parsed.code, parsed.message, parsed.request_id, parsed.endpoint, parsed.region].into_iter().flatten() {
                proptest::prop_assert!(part.len() <= body.len());
            }
        }

        /// Error documents with hostile text: markup, entities, control
        /// characters, unbalanced tags.
        #[test]
        fn hostile_error_documents_never_panic(
            code in ".{0,64}",
            message in ".{0,256}",
            tail in proptest::prop_oneof![
                proptest::strategy::Just(String::new()),
                proptest::strategy::Just("</Error>".to_string()),
                proptest::strategy::Just("<Error>".to_string()),
                proptest::strategy::Just("&bogus;&#xFFFFFFFF;&#0;".to_string()),
                ".{0,32}",
            ],
        ) {
            let body = format!("<Error><Code>{code}</Code><Message>{message}</Message>{tail}");
            let _ = ErrorBody::parse(body.as_bytes());
        }
    }

    #[test]
    fn deep_nesting_and_huge_text_at_the_cap_are_read_without_trouble() {
        let cap = crate::DEFAULT_MAX_BODY;
        let deep = "<a>".repeat(cap / 3);
        assert_eq!(ErrorBody::parse(deep.as_bytes()), ErrorBody::default());
        let nested_error = format!("<Error>{}<Code>x</Code>", "<b>".repeat(cap / 4));
        assert_eq!(ErrorBody::parse(nested_error.as_bytes()).code, None);
        let huge = format!("<Error><Code>{}</Code></Error>", "C".repeat(cap - 40));
        assert_eq!(
            ErrorBody::parse(huge.as_bytes()).code.map(|c| c.len()),
            Some(cap - 40)
        );
    }
}
