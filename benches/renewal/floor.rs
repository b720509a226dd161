//! The floor: the renewal's request, an If-Match PUT of a LEASE-sized body
//! signed with SigV4 (aws-sigv4, the signer the HTTP stores use), written
//! by hand on one kept-alive `TcpStream`. Nothing else: no pool, no
//! timeouts, no retries, one `write` of the whole request and as many
//! `read`s as the answer takes. What a renewal cannot cost less than on the
//! same server with the same signer.

use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::SystemTime;

/// A renewal-like operation on `http://HOST:PORT` (`endpoint`), path-style
/// `/{bucket}/{key}`: the first call creates the object (no condition),
/// each later call replaces it on the ETag of the one before (`If-Match`).
/// Errors are the answer's status line or the transport's error.
pub fn floor(
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
    Ok(move || {
        let mut settings = SigningSettings::default();
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&region)
            .name("s3")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .map_err(|e| e.to_string())?
            .into();
        let mut headers = vec![("host", host.as_str()), ("content-length", &length)];
        if let Some(etag) = &etag {
            headers.push(("if-match", etag));
        }
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

        request.clear();
        request.extend_from_slice(b"PUT ");
        request.extend_from_slice(path.as_bytes());
        request.extend_from_slice(b" HTTP/1.1\r\n");
        for (name, value) in headers.iter().copied().chain(signed.headers()) {
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
