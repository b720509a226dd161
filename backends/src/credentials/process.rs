//! A profile's `credential_process`: a program, run through `sh -c`, that
//! prints `{"Version": 1, "AccessKeyId", "SecretAccessKey",
//! "SessionToken"?, "Expiration"?}` on its standard output. Its standard
//! error goes to ours; its output is never shown (it holds the secret).

use super::{CredentialsProvider, Fetch, Fetched, Source};
use crate::sign::Credentials;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// The most bytes read from the program's output.
const MAX_OUTPUT: u64 = 64 * 1024;

pub(crate) fn provider(profile: &str, command: &str) -> CredentialsProvider {
    CredentialsProvider::fetching(
        Source::Process {
            profile: profile.to_string(),
        },
        Box::new(Process {
            command: command.to_string(),
        }),
    )
}

struct Process {
    command: String,
}

impl Fetch for Process {
    fn fetch(&self, deadline: Instant) -> Result<Fetched, String> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start `sh -c` for credential_process: {e}"))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let reader = std::thread::spawn(move || {
            let mut output = Vec::new();
            let read = stdout.take(MAX_OUTPUT + 1).read_to_end(&mut output);
            read.map(|_| output)
        });
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err("credential_process did not finish before the deadline; \
                                it was killed"
                        .into());
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(format!("waiting for credential_process: {e}")),
            }
        };
        if !status.success() {
            return Err(format!("credential_process failed ({status})"));
        }
        let output = reader
            .join()
            .map_err(|_| "reading credential_process's output failed".to_string())?
            .map_err(|e| format!("reading credential_process's output: {e}"))?;
        if output.len() as u64 > MAX_OUTPUT {
            return Err(format!(
                "credential_process printed more than {MAX_OUTPUT} bytes"
            ));
        }
        parse(&output)
    }
}

/// The credentials in the program's output. Errors name fields, never
/// their values.
pub(crate) fn parse(output: &[u8]) -> Result<Fetched, String> {
    let json: serde_json::Value = serde_json::from_slice(output)
        .map_err(|_| "credential_process printed something that is not JSON".to_string())?;
    if json.get("Version").and_then(serde_json::Value::as_u64) != Some(1) {
        return Err("credential_process's JSON has no \"Version\": 1".into());
    }
    let field = |name: &str| json.get(name).and_then(serde_json::Value::as_str);
    let (Some(access_key), Some(secret)) = (field("AccessKeyId"), field("SecretAccessKey")) else {
        return Err(
            "credential_process's JSON lacks \"AccessKeyId\" or \"SecretAccessKey\"".into(),
        );
    };
    let mut credentials = Credentials::new(access_key, secret);
    if let Some(token) = field("SessionToken").filter(|t| !t.is_empty()) {
        credentials = credentials.with_session_token(token);
    }
    let expires = match field("Expiration") {
        None => None,
        Some(text) => Some(parse_expiration(text).ok_or_else(|| {
            format!("credential_process's \"Expiration\" {text:?} is not an RFC 3339 time")
        })?),
    };
    Ok(Fetched {
        credentials,
        expires,
    })
}

/// An RFC 3339 time (`2026-11-30T08:00:00Z`) as a `SystemTime`.
pub(crate) fn parse_expiration(text: &str) -> Option<SystemTime> {
    let parsed =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    Some(SystemTime::from(parsed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_read_and_errors_never_show_values() {
        let ok = parse(
            br#"{"Version":1,"AccessKeyId":"AKIDP","SecretAccessKey":"proc-secret",
                "SessionToken":"proc-token","Expiration":"2030-01-02T03:04:05Z"}"#,
        )
        .unwrap();
        assert_eq!(ok.credentials.access_key_id(), "AKIDP");
        assert!(ok.credentials.has_session_token());
        assert_eq!(
            ok.expires,
            Some(std::time::UNIX_EPOCH + Duration::from_secs(1_893_553_445))
        );
        for bad in [
            &br#"{"Version":2,"AccessKeyId":"A","SecretAccessKey":"proc-secret"}"#[..],
            br#"{"Version":1,"SecretAccessKey":"proc-secret"}"#,
            br#"{"Version":1,"AccessKeyId":"A","SecretAccessKey":"proc-secret","Expiration":"soon"}"#,
            b"proc-secret is not json",
        ] {
            let e = match parse(bad) {
                Ok(_) => panic!("accepted"),
                Err(e) => e,
            };
            assert!(!e.contains("proc-secret"), "{e}");
        }
    }
}
