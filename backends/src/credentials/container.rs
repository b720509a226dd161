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
    let Some(url) = url(env)? else {
        return Ok(None);
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

/// The URL to ask: the relative URI on the ECS host (it wins, as in the
/// SDKs), else the checked full URI; `None` when neither is set.
fn url(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<String>, String> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    Ok(
        match (
            var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"),
            var("AWS_CONTAINER_CREDENTIALS_FULL_URI"),
        ) {
            (Some(relative), _) => Some(format!("{ECS_HOST}{relative}")),
            (None, Some(full)) => {
                check_full_uri(&full)?;
                Some(full)
            }
            (None, None) => None,
        },
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relative_uri_is_on_the_ecs_host_and_full_uris_are_checked() {
        let env = |relative: Option<&'static str>, full: Option<&'static str>| {
            move |name: &str| match name {
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI" => relative.map(str::to_string),
                "AWS_CONTAINER_CREDENTIALS_FULL_URI" => full.map(str::to_string),
                _ => None,
            }
        };
        assert_eq!(
            url(&env(
                Some("/v2/credentials/abc"),
                Some("http://127.0.0.1:1/x")
            ))
            .unwrap(),
            Some("http://169.254.170.2/v2/credentials/abc".to_string())
        );
        assert_eq!(url(&env(None, None)).unwrap(), None);
        for allowed in [
            "http://127.0.0.1:8080/creds",
            "http://127.1.2.3/creds",
            "http://localhost/creds",
            "http://[::1]:80/creds",
            "http://169.254.170.2/creds",
            "http://169.254.170.23/v1/credentials",
            "http://[fd00:ec2::23]/v1/credentials",
            "https://creds.example.com/x",
        ] {
            assert!(check_full_uri(allowed).is_ok(), "{allowed}");
        }
        for refused in [
            "http://169.254.169.254/creds",
            "http://10.0.0.1/creds",
            "http://example.com/creds",
            "http://user:pw@127.0.0.1/creds",
            "ftp://127.0.0.1/creds",
            "not a uri",
        ] {
            assert!(check_full_uri(refused).is_err(), "{refused}");
        }
    }
}
