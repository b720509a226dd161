//! Web identity (EKS service-account roles): the token in
//! `AWS_WEB_IDENTITY_TOKEN_FILE` (read again at each refresh) exchanged
//! for the credentials of `AWS_ROLE_ARN` by STS `AssumeRoleWithWebIdentity`,
//! an unsigned form POST whose XML answer is read with quick-xml. The
//! endpoint is `AWS_ENDPOINT_URL_STS`, else the region's
//! (`https://sts.REGION.amazonaws.com`), else the global one.

use super::remote::{agent, call};
use super::{CredentialsProvider, Fetch, Fetched, Source};
use crate::sign::Credentials;
use quick_xml::events::Event;
use quick_xml::Reader;
use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use ureq::http;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The provider, `Ok(None)` when neither variable is set.
///
/// # Errors
///
/// One of `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN` without the
/// other.
pub(crate) fn provider(
    env: &dyn Fn(&str) -> Option<String>,
    region: Option<&str>,
) -> Result<Option<CredentialsProvider>, (Source, String)> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let (token_file, role_arn) = match (var("AWS_WEB_IDENTITY_TOKEN_FILE"), var("AWS_ROLE_ARN")) {
        (None, None) => return Ok(None),
        (Some(file), Some(role)) => (file, role),
        (file, role) => {
            let missing = if file.is_none() {
                "AWS_WEB_IDENTITY_TOKEN_FILE"
            } else {
                "AWS_ROLE_ARN"
            };
            return Err((
                Source::WebIdentity {
                    role_arn: role.unwrap_or_default(),
                },
                format!(
                    "{missing} is not set; set both AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN"
                ),
            ));
        }
    };
    let endpoint = endpoint(env, region);
    let session_name = var("AWS_ROLE_SESSION_NAME").unwrap_or_else(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        format!("bucket-lease-{nanos}")
    });
    Ok(Some(CredentialsProvider::fetching(
        Source::WebIdentity {
            role_arn: role_arn.clone(),
        },
        Box::new(WebIdentity {
            endpoint: format!("{}/", endpoint.trim_end_matches('/')),
            token_file,
            role_arn,
            session_name,
            agent: agent(CONNECT_TIMEOUT),
        }),
    )))
}

/// `AWS_ENDPOINT_URL_STS`, else the region's STS, else the global one.
fn endpoint(env: &dyn Fn(&str) -> Option<String>, region: Option<&str>) -> String {
    env("AWS_ENDPOINT_URL_STS")
        .filter(|v| !v.is_empty())
        .or_else(|| region.map(|r| format!("https://sts.{r}.amazonaws.com")))
        .unwrap_or_else(|| "https://sts.amazonaws.com".into())
}

struct WebIdentity {
    endpoint: String,
    token_file: String,
    role_arn: String,
    session_name: String,
    agent: ureq::Agent,
}

impl Fetch for WebIdentity {
    fn fetch(&self, deadline: Instant) -> Result<Fetched, String> {
        let token = std::fs::read_to_string(&self.token_file).map_err(|e| {
            format!(
                "cannot read AWS_WEB_IDENTITY_TOKEN_FILE {}: {e}",
                self.token_file
            )
        })?;
        let token = token.trim();
        if token.is_empty() {
            return Err(format!(
                "AWS_WEB_IDENTITY_TOKEN_FILE {} is empty",
                self.token_file
            ));
        }
        let form = [
            ("Action", "AssumeRoleWithWebIdentity"),
            ("Version", "2011-06-15"),
            ("RoleArn", &self.role_arn),
            ("RoleSessionName", &self.session_name),
            ("WebIdentityToken", token),
        ]
        .iter()
        .map(|(k, v)| format!("{k}={}", form_encode(v)))
        .collect::<Vec<_>>()
        .join("&");
        let request = http::Request::post(&self.endpoint)
            .header(
                "content-type",
                "application/x-www-form-urlencoded; charset=utf-8",
            )
            .header("accept", "application/xml")
            .body(form.into_bytes())
            .map_err(|e| format!("cannot form the request: {e}"))?;
        let (status, body) = call(&self.agent, request, deadline)?;
        let fields = leaves(&body);
        let field = |name: &str| fields.get(name).map(String::as_str);
        if status != 200 {
            // STS does not echo the token, but never risk showing it.
            let shown = |text: &str| text.replace(token, "***");
            return Err(format!(
                "STS AssumeRoleWithWebIdentity answered HTTP {status}{}{}",
                field("Code").map_or(String::new(), |c| format!(" {}", shown(c))),
                field("Message").map_or(String::new(), |m| format!(": {}", shown(m)))
            ));
        }
        let (Some(access_key), Some(secret), Some(session_token)) = (
            field("AccessKeyId"),
            field("SecretAccessKey"),
            field("SessionToken"),
        ) else {
            return Err("STS's answer lacks AccessKeyId, SecretAccessKey or SessionToken".into());
        };
        let expires = match field("Expiration") {
            None => None,
            Some(text) => Some(
                super::process::parse_expiration(text)
                    .ok_or_else(|| format!("STS's Expiration {text:?} is not an RFC 3339 time"))?,
            ),
        };
        Ok(Fetched {
            credentials: Credentials::new(access_key, secret).with_session_token(session_token),
            expires,
        })
    }
}

/// `application/x-www-form-urlencoded` for one value: everything but
/// unreserved characters percent-encoded.
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The text of each leaf element of an XML document by its local name
/// (the first of each name). Malformed XML ends the reading.
fn leaves(xml: &str) -> HashMap<String, String> {
    let mut reader = Reader::from_str(xml);
    let mut found = HashMap::new();
    let mut current: Option<String> = None;
    let mut text = String::new();
    loop {
        match reader.read_event() {
            Ok(Event::Start(start)) => {
                current = Some(start.local_name().as_ref().to_string());
                text.clear();
            }
            Ok(Event::Text(t)) if current.is_some() => text.push_str(&t.xml10_content()),
            Ok(Event::GeneralRef(reference)) if current.is_some() => {
                if let Ok(Some(c)) = reference.resolve_char_ref() {
                    text.push(c);
                } else if let Some(s) =
                    quick_xml::escape::resolve_predefined_entity(&reference.xml10_content())
                {
                    text.push_str(s);
                }
            }
            Ok(Event::End(_)) => {
                if let Some(name) = current.take() {
                    found.entry(name).or_insert_with(|| text.trim().to_string());
                }
            }
            Ok(Event::Eof) | Err(_) => break,
            Ok(_) => {}
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_and_errors_are_read() {
        let ok = leaves(
            "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\
             <AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>ASIA1</AccessKeyId>\
             <SecretAccessKey>s+/k&amp;</SecretAccessKey><SessionToken>t</SessionToken>\
             <Expiration>2030-01-01T00:00:00Z</Expiration></Credentials>\
             </AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
        );
        assert_eq!(ok["AccessKeyId"], "ASIA1");
        assert_eq!(ok["SecretAccessKey"], "s+/k&");
        let e = leaves(
            "<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>\
             <Message>bad</Message></Error></ErrorResponse>",
        );
        assert_eq!(e["Code"], "InvalidIdentityToken");
        assert_eq!(form_encode("a b/c+=&"), "a%20b%2Fc%2B%3D%26");
    }

    #[test]
    fn the_endpoint_is_the_override_else_regional_else_global() {
        let none = |_: &str| None;
        let set =
            |name: &str| (name == "AWS_ENDPOINT_URL_STS").then(|| "http://127.0.0.1:5".into());
        assert_eq!(endpoint(&set, Some("eu-west-1")), "http://127.0.0.1:5");
        assert_eq!(
            endpoint(&none, Some("eu-west-1")),
            "https://sts.eu-west-1.amazonaws.com"
        );
        assert_eq!(endpoint(&none, None), "https://sts.amazonaws.com");
    }
}
