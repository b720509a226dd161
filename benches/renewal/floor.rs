//! The floor: the renewal's request, an If-Match PUT of a LEASE-sized body
//! signed with SigV4, written by hand on one kept-alive `TcpStream`.
//! Nothing else: no pool, no timeouts, no retries, one `write` of the whole
//! request and as many `read`s as the answer takes. Two signers: aws-sigv4's
//! full signer with the stores' settings (what the stores paid before they
//! signed directly), and [`Signing::Direct`], as the stores sign now: the
//! canonical request written into one buffer and one HMAC with a signing
//! key derived once a day. What a renewal cannot cost less than on the same
//! server with each signer.

use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::SystemTime;

/// How the floor signs its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signing {
    /// aws-sigv4's full signer, which derives the key every time.
    AwsSigv4,
    /// The canonical request by hand and a key derived once a day; its
    /// requests are checked against aws-sigv4's, header for header, until
    /// one with `If-Match` (the renewal's shape) was: a mismatch is an
    /// error, so the row never times a wrong signer.
    Direct,
}

/// A renewal-like operation on `http://HOST:PORT` (`endpoint`), path-style
/// `/{bucket}/{key}`: the first call creates the object (no condition),
/// each later call replaces it on the ETag of the one before (`If-Match`).
/// Errors are the answer's status line or the transport's error.
#[allow(clippy::too_many_arguments)]
pub fn floor(
    signing: Signing,
    endpoint: &str,
    bucket: &str,
    key: &str,
    body: Vec<u8>,
    access_key: &str,
    secret_key: &str,
    region: &str,
) -> Result<impl FnMut() -> Result<(), String>, String> {
    let host = endpoint
        .strip_prefix("http://")
        .ok_or_else(|| format!("the floor speaks plain HTTP only, not {endpoint}"))?
        .trim_end_matches('/')
        .to_string();
    let mut stream = TcpStream::connect(&host).map_err(|e| format!("connect {host}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let path = format!("/{bucket}/{key}");
    let uri = format!("http://{host}{path}");
    let region = region.to_string();
    let identity =
        aws_credential_types::Credentials::new(access_key, secret_key, None, None, "bench").into();
    let length = body.len().to_string();
    let mut etag: Option<String> = None;
    let mut request = Vec::with_capacity(2048);
    let mut answer = vec![0u8; 4096];
    let secret = secret_key.to_string();
    let access_key = access_key.to_string();
    let mut key: Option<(String, [u8; 32])> = None;
    let mut canonical = String::with_capacity(1024);
    let mut checked = false;
    Ok(move || {
        let now = SystemTime::now();
        let mut direct_headers: Vec<(&str, String)> = Vec::new();
        if signing == Signing::Direct {
            let t = time::OffsetDateTime::from(now);
            let date = format!("{:04}{:02}{:02}", t.year(), u8::from(t.month()), t.day());
            let date_time = format!("{date}T{:02}{:02}{:02}Z", t.hour(), t.minute(), t.second());
            if key.as_ref().is_none_or(|(day, _)| *day != date) {
                let derived = v4::generate_signing_key(&secret, now, &region, "s3");
                let mut bytes = [0u8; 32];
                bytes.copy_from_slice(derived.as_ref());
                key = Some((date.clone(), bytes));
            }
            let hash = hex(&Sha256::digest(&body));
            canonical.clear();
            let signed = if etag.is_some() {
                "content-length;host;if-match;x-amz-content-sha256;x-amz-date"
            } else {
                "content-length;host;x-amz-content-sha256;x-amz-date"
            };
            let _ = write!(
                canonical,
                "PUT\n{path}\n\ncontent-length:{length}\nhost:{host}\n"
            );
            if let Some(etag) = &etag {
                let _ = writeln!(canonical, "if-match:{etag}");
            }
            let _ = write!(
                canonical,
                "x-amz-content-sha256:{hash}\nx-amz-date:{date_time}\n\n{signed}\n{hash}"
            );
            let scope = format!("{date}/{region}/s3/aws4_request");
            let string_to_sign = format!(
                "AWS4-HMAC-SHA256\n{date_time}\n{scope}\n{}",
                hex(&Sha256::digest(canonical.as_bytes()))
            );
            let signature = v4::calculate_signature(
                key.as_ref().map_or(&[][..], |(_, k)| &k[..]),
                string_to_sign.as_bytes(),
            );
            direct_headers.push(("x-amz-date", date_time));
            direct_headers.push((
                "authorization",
                format!(
                    "AWS4-HMAC-SHA256 Credential={access_key}/{scope}, \
                     SignedHeaders={signed}, Signature={signature}"
                ),
            ));
            direct_headers.push(("x-amz-content-sha256", hash));
        }
        // aws-sigv4 signs the floor's request, and the direct floor's first
        // (which must sign it the same, header for header).
        let mut headers = vec![("host", host.as_str()), ("content-length", &length)];
        if let Some(etag) = &etag {
            headers.push(("if-match", etag));
        }
        let mut full: Vec<(String, String)> = Vec::new();
        if signing == Signing::AwsSigv4 || !checked {
            let mut settings = SigningSettings::default();
            settings.percent_encoding_mode = PercentEncodingMode::Single;
            settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
            settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
            let params = v4::SigningParams::builder()
                .identity(&identity)
                .region(&region)
                .name("s3")
                .time(now)
                .settings(settings)
                .build()
                .map_err(|e| e.to_string())?
                .into();
            let signable = SignableRequest::new(
                "PUT",
                &uri,
                headers.iter().copied(),
                SignableBody::Bytes(&body),
            )
            .map_err(|e| e.to_string())?;
            let (signed, _) = sign(signable, &params)
                .map_err(|e| e.to_string())?
                .into_parts();
            full = signed
                .headers()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect();
        }
        if signing == Signing::Direct && !checked {
            let mut ours: Vec<(String, String)> = direct_headers
                .iter()
                .map(|(name, value)| (name.to_string(), value.clone()))
                .collect();
            let mut theirs = full.clone();
            ours.sort();
            theirs.sort();
            if ours != theirs {
                return Err(format!(
                    "the direct floor signs unlike aws-sigv4: {ours:?} against {theirs:?}"
                ));
            }
            // Checked until an If-Match request (the renewal's own) was.
            checked = etag.is_some();
        }
        let signed: Vec<(&str, &str)> = if signing == Signing::Direct {
            direct_headers
                .iter()
                .map(|(n, v)| (*n, v.as_str()))
                .collect()
        } else {
            full.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect()
        };

        request.clear();
        request.extend_from_slice(b"PUT ");
        request.extend_from_slice(path.as_bytes());
        request.extend_from_slice(b" HTTP/1.1\r\n");
        for (name, value) in headers.iter().copied().chain(signed) {
            request.extend_from_slice(name.as_bytes());
            request.extend_from_slice(b": ");
            request.extend_from_slice(value.as_bytes());
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"\r\n");
        request.extend_from_slice(&body);
        stream.write_all(&request).map_err(|e| e.to_string())?;

        // The head, then as much of the body as Content-Length says.
        let mut filled = 0;
        let head_end = loop {
            if let Some(at) = answer[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            if filled == answer.len() {
                answer.resize(filled * 2, 0);
            }
            let n = stream
                .read(&mut answer[filled..])
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the server closed the connection".into());
            }
            filled += n;
        };
        let head = std::str::from_utf8(&answer[..head_end]).map_err(|e| e.to_string())?;
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap_or_default().to_string();
        let mut content_length = 0;
        etag = None;
        for line in lines {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("etag") {
                etag = Some(value.to_string());
            } else if name.eq_ignore_ascii_case("content-length") {
                content_length = value.parse().map_err(|_| format!("bad {line:?}"))?;
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                return Err(format!("the floor reads no {line:?}"));
            }
        }
        let mut left = (head_end + content_length).saturating_sub(filled);
        while left > 0 {
            let n = stream
                .read(&mut answer[..left.min(4096)])
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the server closed the connection".into());
            }
            left -= n;
        }
        if !status.starts_with("HTTP/1.1 200") {
            return Err(status);
        }
        if etag.is_none() {
            return Err("no ETag in the answer".into());
        }
        Ok(())
    })
}

/// Lower-case hexadecimal.
fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}
