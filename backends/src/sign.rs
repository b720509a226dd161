//! SigV4 signing of S3 requests, with the time as an argument.
//!
//! [`Signer::sign`] adds `x-amz-date`, `x-amz-content-sha256` (the SHA-256
//! of the payload), `x-amz-security-token` (with a session token) and
//! `Authorization` to an `http::Request`, signing every header the request
//! already carries. The time is a parameter so tests can pin it and compare
//! with AWS's published examples and with botocore.

use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use std::fmt;
use std::time::SystemTime;
use ureq::http;

/// An access key, its secret and an optional session token.
///
/// `Debug` shows the access key id only: the secret and the session token
/// never appear in `Debug` output, logs or panics. (`aws-sigv4` emits the
/// canonical request, which includes `x-amz-security-token`, as a `tracing`
/// TRACE event: an application that installs a `tracing` subscriber at
/// TRACE for `aws_sigv4` would see a session token there.)
#[derive(Clone)]
pub struct Credentials {
    inner: aws_credential_types::Credentials,
    /// What aws-sigv4 signs with, made once per set of credentials (a
    /// refresh makes a new `Credentials`), not once per request.
    identity: Identity,
}

impl Credentials {
    /// Long-term credentials: an access key id and its secret.
    pub fn new(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        Self::build(access_key_id.into(), secret_access_key.into(), None)
    }

    /// The same credentials, with the session token of temporary
    /// credentials (sent as `x-amz-security-token`).
    pub fn with_session_token(self, session_token: impl Into<String>) -> Self {
        Self::build(
            self.inner.access_key_id().to_string(),
            self.inner.secret_access_key().to_string(),
            Some(session_token.into()),
        )
    }

    fn build(access_key_id: String, secret: String, session_token: Option<String>) -> Self {
        let inner = aws_credential_types::Credentials::new(
            access_key_id,
            secret,
            session_token,
            None,
            "bucket-lease",
        );
        Credentials {
            identity: inner.clone().into(),
            inner,
        }
    }

    /// The access key id (not secret).
    pub fn access_key_id(&self) -> &str {
        self.inner.access_key_id()
    }

    /// Whether a session token is set.
    pub fn has_session_token(&self) -> bool {
        self.inner.session_token().is_some()
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id())
            .field("secret_access_key", &"** redacted **")
            .field(
                "session_token",
                &if self.has_session_token() {
                    "** redacted **"
                } else {
                    "none"
                },
            )
            .finish()
    }
}

/// Signs requests for one set of credentials in one region, for S3
/// (service name `s3`).
#[cfg(test)]
#[derive(Debug, Clone)]
pub(crate) struct Signer {
    credentials: Credentials,
    region: String,
}

/// Signing failed: the request could not be put in canonical form. Its
/// `Display` never includes credentials.
#[derive(Debug)]
pub(crate) struct SignError(String);

impl fmt::Display for SignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot sign the request: {}", self.0)
    }
}

#[cfg(test)]
impl Signer {
    pub(crate) fn new(credentials: Credentials, region: impl Into<String>) -> Self {
        Signer {
            credentials,
            region: region.into(),
        }
    }

    /// Sign `request`, whose body is `payload`, as of `time`. The request's
    /// URI must already be percent-encoded as it will be sent.
    pub(crate) fn sign<B>(
        &self,
        request: &mut http::Request<B>,
        payload: &[u8],
        time: SystemTime,
    ) -> Result<(), SignError> {
        sign_request(&self.credentials, &self.region, request, payload, time)
    }
}

/// Sign `request`, whose body is `payload`, with `credentials` for `region`
/// as of `time`. The request's URI must already be percent-encoded as it
/// will be sent.
///
/// aws-sigv4 derives the signing key (four HMACs) on every call: its API
/// takes no derived key, and the functions that would take one
/// (`v4::calculate_signature`) need the canonical request, which only its
/// private code builds.
pub(crate) fn sign_request<B>(
    credentials: &Credentials,
    region: &str,
    request: &mut http::Request<B>,
    payload: &[u8],
    time: SystemTime,
) -> Result<(), SignError> {
    // S3 signs the path as sent (no second encoding, no `..` folding)
    // and wants the payload hash in `x-amz-content-sha256`.
    let mut settings = SigningSettings::default();
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;

    let params = v4::SigningParams::builder()
        .identity(&credentials.identity)
        .region(region)
        .name("s3")
        .time(time)
        .settings(settings)
        .build()
        .map_err(|e| SignError(e.to_string()))?
        .into();

    let mut headers = Vec::with_capacity(request.headers().len());
    for (name, value) in request.headers() {
        let value = value
            .to_str()
            .map_err(|_| SignError(format!("header {name} is not visible ASCII")))?;
        headers.push((name.as_str(), value));
    }
    let uri = uri_text(request.uri());
    let signable = SignableRequest::new(
        request.method().as_str(),
        uri,
        headers.into_iter(),
        SignableBody::Bytes(payload),
    )
    .map_err(|e| SignError(e.to_string()))?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| SignError(e.to_string()))?
        .into_parts();
    instructions.apply_to_request_http1x(request);
    Ok(())
}

/// `uri` as text, without the formatting machinery of `Display`.
fn uri_text(uri: &http::Uri) -> String {
    let (scheme, authority) = (uri.scheme_str(), uri.authority().map(|a| a.as_str()));
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut text = String::with_capacity(
        scheme.map_or(0, |s| s.len() + 3) + authority.map_or(0, str::len) + path.len(),
    );
    if let Some(scheme) = scheme {
        text.push_str(scheme);
        text.push_str("://");
    }
    if let Some(authority) = authority {
        text.push_str(authority);
    }
    text.push_str(path);
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    /// The credentials of AWS's published SigV4 examples for S3.
    fn example_signer() -> Signer {
        Signer::new(
            Credentials::new(
                "AKIAIOSFODNN7EXAMPLE",
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            ),
            "us-east-1",
        )
    }

    /// 2013-05-24T00:00:00Z, the time of the published examples.
    fn example_time() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_369_353_600)
    }

    fn authorization<B>(request: &http::Request<B>) -> &str {
        request.headers()["authorization"].to_str().unwrap()
    }

    // "Signature Calculations for the Authorization Header: Transferring
    // Payload in a Single Chunk", Example: GET Object.
    #[test]
    fn matches_the_published_get_object_example() {
        let mut request = http::Request::get("https://examplebucket.s3.amazonaws.com/test.txt")
            .header("range", "bytes=0-9")
            .body(())
            .unwrap();
        example_signer()
            .sign(&mut request, b"", example_time())
            .unwrap();
        assert_eq!(
            authorization(&request),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
        assert_eq!(
            request.headers()["x-amz-content-sha256"],
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(request.headers()["x-amz-date"], "20130524T000000Z");
    }

    // The same page, Example: PUT Object.
    #[test]
    fn matches_the_published_put_object_example() {
        let mut request =
            http::Request::put("https://examplebucket.s3.amazonaws.com/test%24file.text")
                .header("date", "Fri, 24 May 2013 00:00:00 GMT")
                .header("x-amz-storage-class", "REDUCED_REDUNDANCY")
                .body(())
                .unwrap();
        example_signer()
            .sign(&mut request, b"Welcome to Amazon S3.", example_time())
            .unwrap();
        assert_eq!(
            authorization(&request),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class, \
             Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"
        );
    }

    // The same page, Example: GET Bucket Lifecycle (a query string).
    #[test]
    fn matches_the_published_get_bucket_lifecycle_example() {
        let mut request = http::Request::get("https://examplebucket.s3.amazonaws.com/?lifecycle")
            .body(())
            .unwrap();
        example_signer()
            .sign(&mut request, b"", example_time())
            .unwrap();
        assert!(authorization(&request).ends_with(
            "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"
        ));
    }

    #[test]
    fn a_session_token_is_sent_and_signed() {
        let signer = Signer::new(
            Credentials::new("AKID", "SECRET").with_session_token("TOKEN"),
            "auto",
        );
        let mut request = http::Request::get("https://acct.r2.cloudflarestorage.com/b/k")
            .body(())
            .unwrap();
        signer.sign(&mut request, b"", example_time()).unwrap();
        assert_eq!(request.headers()["x-amz-security-token"], "TOKEN");
        let auth = authorization(&request);
        assert!(auth.contains("/20130524/auto/s3/aws4_request"), "{auth}");
        assert!(auth.contains("x-amz-security-token"), "{auth}");
    }

    #[test]
    fn debug_shows_the_key_id_and_never_the_secrets() {
        let credentials = Credentials::new("AKIDVISIBLE", "very-secret-key")
            .with_session_token("very-secret-token");
        let signer = Signer::new(credentials.clone(), "us-east-1");
        for text in [
            format!("{credentials:?}"),
            format!("{credentials:#?}"),
            format!("{signer:?}"),
        ] {
            assert!(text.contains("AKIDVISIBLE"), "{text}");
            assert!(!text.contains("very-secret"), "{text}");
        }
    }
}
