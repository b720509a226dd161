//! The HTTP calls of the credential sources that answer over the network
//! (container, instance metadata, STS): one request bounded by a deadline,
//! an answer read up to a cap, and the JSON credentials answer.

use super::Fetched;
use crate::sign::Credentials;
use std::io::Read;
use std::time::{Duration, Instant};
use ureq::http;

/// The most bytes read from one answer.
const MAX_ANSWER: u64 = 64 * 1024;

/// An agent for credential requests: statuses are answers, no redirects,
/// and connecting gives up after `connect`, so a machine without the
/// service fails fast.
pub(crate) fn agent(connect: Duration) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_connect(Some(connect))
        .user_agent(concat!("bucket-lease/", env!("CARGO_PKG_VERSION")))
        .build();
    ureq::Agent::new_with_config(config)
}

/// Send `request`, bounded by `deadline`; the status and the body (up to
/// the cap, as text). Errors describe the failure, never a header's value.
pub(crate) fn call(
    agent: &ureq::Agent,
    request: http::Request<Vec<u8>>,
    deadline: Instant,
) -> Result<(u16, String), String> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err("the deadline passed before the request was sent".into());
    }
    let target = format!("{} {}", request.method(), request.uri());
    let request = agent
        .configure_request(request)
        .timeout_global(Some(left))
        .build();
    let mut response = agent.run(request).map_err(|e| format!("{target}: {e}"))?;
    let status = response.status().as_u16();
    let mut body = Vec::new();
    response
        .body_mut()
        .as_reader()
        .take(MAX_ANSWER)
        .read_to_end(&mut body)
        .map_err(|e| format!("{target}: reading the answer: {e}"))?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The credentials in a JSON answer of the container or instance-metadata
/// service: `AccessKeyId`, `SecretAccessKey`, `Token`, `Expiration`.
/// Errors name fields, never values.
pub(crate) fn json_credentials(body: &str, what: &str) -> Result<Fetched, String> {
    let json: serde_json::Value = serde_json::from_str(body)
        .map_err(|_| format!("{what} answered something that is not JSON"))?;
    let field = |name: &str| json.get(name).and_then(serde_json::Value::as_str);
    if let Some(code) = field("Code").filter(|c| *c != "Success") {
        return Err(format!("{what} answered Code {code:?}"));
    }
    let (Some(access_key), Some(secret)) = (field("AccessKeyId"), field("SecretAccessKey")) else {
        return Err(format!(
            "{what}'s answer lacks \"AccessKeyId\" or \"SecretAccessKey\""
        ));
    };
    let mut credentials = Credentials::new(access_key, secret);
    if let Some(token) = field("Token").filter(|t| !t.is_empty()) {
        credentials = credentials.with_session_token(token);
    }
    let expires =
        match field("Expiration") {
            None => None,
            Some(text) => Some(super::process::parse_expiration(text).ok_or_else(|| {
                format!("{what}'s \"Expiration\" {text:?} is not an RFC 3339 time")
            })?),
        };
    Ok(Fetched {
        credentials,
        expires,
    })
}
