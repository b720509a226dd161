//! `--features cli` alone builds a command with every store: each of
//! `s3://`, `r2://` and `minio://` reaches the network (here a closed port
//! on 127.0.0.1, so the request is refused and nothing is sent), and
//! `file://` opens a directory. No server needed.

use std::net::TcpListener;
use std::process::{Command, Output, Stdio};

/// `bucket-lease inspect URL` with `endpoint` and test credentials only:
/// no profile of the machine's, no instance metadata.
fn inspect(url: &str, endpoint: &str) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bucket-lease"));
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("AWS_")
            || var.to_string_lossy().starts_with("R2_")
            || var.to_string_lossy().starts_with("BUCKET_LEASE_")
        {
            cmd.env_remove(var);
        }
    }
    cmd.env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", "/nonexistent/bucket-lease-tests/config")
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/bucket-lease-tests/credentials",
        )
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ACCESS_KEY_ID", "test-key")
        .env("AWS_SECRET_ACCESS_KEY", "test-secret")
        .env("AWS_REGION", "us-east-1")
        .args(["inspect", url])
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs")
}

/// A port on 127.0.0.1 nothing listens on: bound, then closed.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

#[test]
fn every_http_store_is_built_and_reaches_the_network() {
    let port = closed_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    for scheme in ["s3", "r2", "minio"] {
        let done = inspect(&format!("{scheme}://bucket/prefix"), &endpoint);
        let stderr = String::from_utf8_lossy(&done.stderr);
        assert!(
            !stderr.contains("this build has no"),
            "{scheme}://: the store is not built: {stderr}"
        );
        // A store request failed (69), and the message names the endpoint
        // it could not reach.
        assert_eq!(done.status.code(), Some(69), "{scheme}://: {stderr}");
        assert!(
            stderr.contains(&format!("127.0.0.1:{port}")),
            "{scheme}://: not a network error: {stderr}"
        );
    }
}

#[test]
fn the_directory_store_is_built() {
    let dir = std::env::temp_dir().join(format!("bucket-lease-cli-stores-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let url = format!("file://{}//prefix", dir.display());
    let done = inspect(&url, "http://127.0.0.1:9");
    let stderr = String::from_utf8_lossy(&done.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(done.status.code(), Some(0), "{stderr}");
}
