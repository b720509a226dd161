//! `bucket-lease run` interrupted while its acquire attempt is still in
//! flight (issue 28, found by review): `run` cancels, waits 2 s for the
//! attempt, and then, the attempt still running, hands back what it may
//! have written. That record carries the in-flight call's claim, which
//! stays live until the call ends, so a plain clean-up
//! (`release_abandoned`) left it alone and `run` exited with the record
//! live, keeping every other instance out for a full TTL. `run` is about
//! to exit, so it frees it whatever claims it.
//!
//! The service is a minimal S3 on 127.0.0.1 (conditional PUT, GET, HEAD,
//! DELETE, path-style) whose answer to the acquire's create is held: the
//! write landed, its answer is late.

mod cli_common;

use cli_common::{signal, Target};
use rustix::process::Signal;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Bucket {
    objects: Mutex<HashMap<String, (Vec<u8>, String)>>,
    next: AtomicU64,
    /// Hold the answer to the first create of a LEASE (after it landed).
    hold_create: AtomicBool,
    log: Mutex<Vec<String>>,
}

struct MiniS3 {
    endpoint: String,
    bucket: Arc<Bucket>,
    create_landed: mpsc::Receiver<()>,
}

fn start() -> MiniS3 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let bucket = Arc::new(Bucket::default());
    bucket.hold_create.store(true, Ordering::SeqCst);
    let (landed_tx, landed_rx) = mpsc::channel();
    let landed_tx = Arc::new(Mutex::new(landed_tx));
    let b = Arc::clone(&bucket);
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let (b, landed) = (Arc::clone(&b), Arc::clone(&landed_tx));
            std::thread::spawn(move || serve(client, &b, &landed));
        }
    });
    MiniS3 {
        endpoint,
        bucket,
        create_landed: landed_rx,
    }
}

fn reply(
    client: &mut TcpStream,
    status: &str,
    headers: &[(&str, String)],
    body: &[u8],
    head: bool,
) {
    let mut text = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n", body.len());
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("x-amz-request-id: mini\r\n\r\n");
    let mut bytes = text.into_bytes();
    if !head {
        bytes.extend_from_slice(body);
    }
    let _ = client.write_all(&bytes);
}

fn error(client: &mut TcpStream, status: &str, code: &str, head: bool) {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
         <Message>{code}</Message><RequestId>mini</RequestId></Error>"
    );
    reply(
        client,
        status,
        &[("Content-Type", "application/xml".into())],
        body.as_bytes(),
        head,
    );
}

fn serve(mut client: TcpStream, b: &Bucket, landed: &Mutex<mpsc::Sender<()>>) {
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") else {
            match client.read(&mut buf) {
                Ok(n @ 1..) => pending.extend_from_slice(&buf[..n]),
                _ => return,
            }
            continue;
        };
        let head_text = String::from_utf8_lossy(&pending[..end]).to_string();
        let mut lines = head_text.lines();
        let request_line = lines.next().unwrap_or("").to_string();
        let headers: HashMap<String, String> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let length = headers
            .get("content-length")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        while pending.len() < end + 4 + length {
            match client.read(&mut buf) {
                Ok(n @ 1..) => pending.extend_from_slice(&buf[..n]),
                _ => return,
            }
        }
        let body = pending[end + 4..end + 4 + length].to_vec();
        pending.drain(..end + 4 + length);
        let mut parts = request_line.split(' ');
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("").to_string();
        let path = target.split('?').next().unwrap_or("").to_string();
        b.log.lock().unwrap().push(format!(
            "{method} {target} if-match={:?} if-none-match={:?}",
            headers.get("if-match"),
            headers.get("if-none-match")
        ));
        let is_head = method == "HEAD";
        let current = b.objects.lock().unwrap().get(&path).cloned();
        match method.as_str() {
            "GET" | "HEAD" => match current {
                Some((data, etag)) => {
                    reply(&mut client, "200 OK", &[("ETag", etag)], &data, is_head)
                }
                None => error(&mut client, "404 Not Found", "NoSuchKey", is_head),
            },
            "PUT" => {
                let if_match = headers
                    .get("if-match")
                    .map(|v| v.trim_matches('"').to_string());
                let if_none = headers.contains_key("if-none-match");
                let allowed = match (&current, if_match, if_none) {
                    (Some(_), _, true) => false,
                    (None, Some(_), _) => false,
                    (Some((_, etag)), Some(want), _) => etag.trim_matches('"') == want,
                    _ => true,
                };
                if !allowed {
                    error(
                        &mut client,
                        "412 Precondition Failed",
                        "PreconditionFailed",
                        false,
                    );
                    continue;
                }
                let etag = format!("\"e{}\"", b.next.fetch_add(1, Ordering::SeqCst));
                b.objects
                    .lock()
                    .unwrap()
                    .insert(path.clone(), (body, etag.clone()));
                if if_none
                    && path.ends_with("/LEASE")
                    && b.hold_create.swap(false, Ordering::SeqCst)
                {
                    // Landed; the answer never comes (the connection stays
                    // open until the client gives up).
                    let _ = landed.lock().unwrap().send(());
                    std::thread::sleep(Duration::from_secs(60));
                    return;
                }
                reply(&mut client, "200 OK", &[("ETag", etag)], b"", false);
            }
            "DELETE" => {
                b.objects.lock().unwrap().remove(&path);
                reply(&mut client, "204 No Content", &[], b"", false);
            }
            _ => error(&mut client, "400 Bad Request", "InvalidRequest", false),
        }
    }
}

#[test]
fn a_signal_during_a_landed_acquire_leaves_no_live_record_behind() {
    let s3 = start();
    let t = Target::http("abandon", &s3.endpoint, "bkt");
    let url = t.url("job");
    let mut child = t.spawn(["run", url.as_str(), "--", "true"]);
    s3.create_landed
        .recv_timeout(Duration::from_secs(30))
        .expect("the acquire's create reached the service");
    signal(&child, Signal::INT);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "run did not end"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
    let log = s3.bucket.log.lock().unwrap().clone();
    let objects = s3.bucket.objects.lock().unwrap().clone();
    let (key, (record, _)) = objects
        .iter()
        .find(|(k, _)| k.ends_with("/LEASE"))
        .expect("the acquire's record landed");
    let record: serde_json::Value = serde_json::from_slice(record).unwrap();
    assert_eq!(status.code(), Some(130), "stderr: {stderr}");
    assert!(
        record.get("released_at").is_some_and(|v| !v.is_null()),
        "run exited (SIGINT) leaving {key} live for its TTL: {record}\nrequests: {log:#?}\n\
         stderr: {stderr}"
    );
}
