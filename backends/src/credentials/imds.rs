//! EC2 instance metadata, IMDSv2 only: `PUT /latest/api/token` for a
//! session token, then `GET /latest/meta-data/iam/security-credentials/`
//! for the role's name and `GET …/ROLE` for its credentials, each carrying
//! the token. Connecting gives up after one second, so a machine that is
//! not on EC2 fails fast. The endpoint is `AWS_EC2_METADATA_SERVICE_ENDPOINT`
//! (default `http://169.254.169.254`); `AWS_EC2_METADATA_DISABLED=true`
//! turns the source off.

use super::remote::{agent, call, json_credentials};
use super::{CredentialsProvider, Fetch, Fetched, Source};
use std::time::{Duration, Instant};
use ureq::http;

const DEFAULT_ENDPOINT: &str = "http://169.254.169.254";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one metadata session token lives (the AWS SDKs' value).
const TOKEN_TTL_S: &str = "21600";

/// The provider, or `None` when `AWS_EC2_METADATA_DISABLED` is `true`.
pub(crate) fn provider(env: &dyn Fn(&str) -> Option<String>) -> Option<CredentialsProvider> {
    if env("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return None;
    }
    let endpoint = env("AWS_EC2_METADATA_SERVICE_ENDPOINT")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_ENDPOINT.into());
    Some(CredentialsProvider::fetching(
        Source::InstanceMetadata,
        Box::new(Imds {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            agent: agent(CONNECT_TIMEOUT),
        }),
    ))
}

struct Imds {
    endpoint: String,
    agent: ureq::Agent,
}

impl Imds {
    /// GET `path` with the session token; the body of a 200.
    fn get(&self, path: &str, token: &str, deadline: Instant) -> Result<String, String> {
        let request = http::Request::get(format!("{}{path}", self.endpoint))
            .header("x-aws-ec2-metadata-token", token)
            .body(Vec::new())
            .map_err(|e| format!("cannot form the request: {e}"))?;
        match call(&self.agent, request, deadline)? {
            (200, body) => Ok(body),
            (status, _) => Err(format!("GET {path} answered HTTP {status}")),
        }
    }
}

impl Fetch for Imds {
    fn fetch(&self, deadline: Instant) -> Result<Fetched, String> {
        let request = http::Request::put(format!("{}/latest/api/token", self.endpoint))
            .header("x-aws-ec2-metadata-token-ttl-seconds", TOKEN_TTL_S)
            .body(Vec::new())
            .map_err(|e| format!("cannot form the request: {e}"))?;
        let token = match call(&self.agent, request, deadline)? {
            (200, token) if !token.trim().is_empty() => token.trim().to_string(),
            (status, _) => {
                return Err(format!(
                    "PUT /latest/api/token answered HTTP {status} (IMDSv2 is required; \
                     IMDSv1 is not used)"
                ))
            }
        };
        const ROLES: &str = "/latest/meta-data/iam/security-credentials/";
        let roles = self.get(ROLES, &token, deadline)?;
        let Some(role) = roles.lines().map(str::trim).find(|l| !l.is_empty()) else {
            return Err("the instance has no IAM role attached".into());
        };
        if role.contains(['/', '?', '#']) {
            return Err(format!("the role name {role:?} is not a path segment"));
        }
        let body = self.get(&format!("{ROLES}{role}"), &token, deadline)?;
        json_credentials(&body, "the instance metadata service")
    }
}
