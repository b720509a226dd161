//! Container credentials (ECS task roles, EKS Pod Identity):
//! `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` (on `http://169.254.170.2`) or
//! `AWS_CONTAINER_CREDENTIALS_FULL_URI`, plain HTTP only to a loopback
//! address or the documented link-local hosts (`169.254.170.2`,
//! `169.254.170.23`, `fd00:ec2::23`). The `Authorization` header is the
//! contents of `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` (read again at each
//! refresh) or `AWS_CONTAINER_AUTHORIZATION_TOKEN`.

use super::remote::{agent, call, json_credentials};
use super::{CredentialsProvider, Fetch, Fetched, Source};
use std::time::{Duration, Instant};
use ureq::http;

const ECS_HOST: &str = "http://169.254.170.2";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The provider, `Ok(None)` when neither URI variable is set.
///
/// # Errors
///
/// A full URI that is not allowed (plain HTTP to another host), or not a
/// URI; the text never holds a token.
pub(crate) fn provider(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<CredentialsProvider>, String> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let url = match (
        var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"),
        var("AWS_CONTAINER_CREDENTIALS_FULL_URI"),
    ) {
        (Some(relative), _) => format!("{ECS_HOST}{relative}"),
        (None, Some(full)) => {
            check_full_uri(&full)?;
            full
        }
        (None, None) => return Ok(None),
    };
    let authorization = match (
        var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"),
        var("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
    ) {
        (Some(file), _) => Authorization::File(file),
        (None, Some(token)) => Authorization::Token(token),
        (None, None) => Authorization::None,
    };
    Ok(Some(CredentialsProvider::fetching(
        Source::Container,
        Box::new(Container {
            url,
            authorization,
            agent: agent(CONNECT_TIMEOUT),
        }),
    )))
}

/// `https` anywhere; `http` only to loopback or the documented hosts.
fn check_full_uri(uri: &str) -> Result<(), String> {
    let parsed: http::Uri = uri
        .parse()
        .map_err(|_| "AWS_CONTAINER_CREDENTIALS_FULL_URI is not a URI".to_string())?;
    if uri.contains('@') {
        return Err("AWS_CONTAINER_CREDENTIALS_FULL_URI carries user information".into());
    }
    let host = parsed.host().unwrap_or("");
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let allowed = match parsed.scheme_str() {
        Some("https") => true,
        Some("http") => {
            host == "localhost"
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
                || ["169.254.170.2", "169.254.170.23", "fd00:ec2::23"].contains(&host)
        }
        _ => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(format!(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI {uri:?} is not allowed: plain HTTP only to a \
             loopback address, 169.254.170.2, 169.254.170.23 or fd00:ec2::23; https otherwise"
        ))
    }
}

enum Authorization {
    None,
    Token(String),
    File(String),
}

struct Container {
    url: String,
    authorization: Authorization,
    agent: ureq::Agent,
}

impl Fetch for Container {
    fn fetch(&self, deadline: Instant) -> Result<Fetched, String> {
        let token = match &self.authorization {
            Authorization::None => None,
            Authorization::Token(token) => Some(token.clone()),
            Authorization::File(file) => Some(
                std::fs::read_to_string(file)
                    .map_err(|e| {
                        format!("cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE {file}: {e}")
                    })?
                    .trim()
                    .to_string(),
            ),
        };
        let mut request = http::Request::get(&self.url);
        if let Some(token) = token {
            request = request.header("authorization", token);
        }
        let request = request
            .body(Vec::new())
            .map_err(|_| "the authorization token is not a valid header value".to_string())?;
        match call(&self.agent, request, deadline)? {
            (200, body) => json_credentials(&body, "the container credentials service"),
            (status, _) => Err(format!(
                "the container credentials service answered HTTP {status}"
            )),
        }
    }
}
