//! The XML error bodies of S3-compatible services:
//! `<Error><Code>…</Code><Message>…</Message><RequestId>…</RequestId></Error>`.

use quick_xml::escape::resolve_predefined_entity;
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

#[derive(Clone, Copy)]
enum Field {
    Code,
    Message,
    RequestId,
    Endpoint,
    Region,
}

impl ErrorBody {
    /// Read the `Code`, `Message` and `RequestId` children of a root
    /// `Error` element. Malformed XML ends the reading; what was read so far
    /// is kept.
    pub(crate) fn parse(body: &[u8]) -> ErrorBody {
        let mut parsed = ErrorBody::default();
        let Ok(text) = std::str::from_utf8(body) else {
            return parsed;
        };
        let mut reader = Reader::from_str(text);
        let mut depth = 0usize;
        let mut in_error = false;
        let mut field: Option<Field> = None;
        let mut value = String::new();
        loop {
            match reader.read_event() {
                Ok(Event::Start(start)) => {
                    depth += 1;
                    let name = start.local_name();
                    if depth == 1 {
                        in_error = name.as_ref() == "Error";
                    } else if depth == 2 && in_error {
                        field = match name.as_ref() {
                            "Code" => Some(Field::Code),
                            "Message" => Some(Field::Message),
                            "RequestId" => Some(Field::RequestId),
                            "Endpoint" => Some(Field::Endpoint),
                            "Region" => Some(Field::Region),
                            _ => None,
                        };
                        value.clear();
                    }
                }
                Ok(Event::End(_)) => {
                    if depth == 2 {
                        if let Some(f) = field.take() {
                            let v = Some(value.trim().to_string()).filter(|v| !v.is_empty());
                            match f {
                                Field::Code => parsed.code = v,
                                Field::Message => parsed.message = v,
                                Field::RequestId => parsed.request_id = v,
                                Field::Endpoint => parsed.endpoint = v,
                                Field::Region => parsed.region = v,
                            }
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
        parsed
    }
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
