//! The one error a single-slash `file://` URL to a missing path gets
//! (config.rs, `both_readings`): the path it suggests to make is quoted
//! for a shell, and a URL with `//` never gets it. Found by a review.
#![cfg(feature = "fs")]

use bucket_lease_backends::config::open_with_env;

fn top(name: &str) -> std::path::PathBuf {
    let top =
        std::env::temp_dir().join(format!("bucket-lease review {name}-{}", std::process::id()));
    std::fs::create_dir_all(&top).unwrap();
    top
}

/// The `mkdir -p` it names for a path with a space must be one shell word,
/// as DirStore::open's own message writes it (shell_word): both_readings
/// replaces that message and writes the path bare, so the command it
/// gives makes two wrong directories.
#[test]
fn review_both_readings_quotes_the_mkdir_path() {
    let top = top("quote");
    let t = top.display().to_string();
    let url = format!("file://{}/missing", t.replace(' ', "%20"));
    let e = open_with_env(&url, |_| None).err().unwrap();
    let text = e.to_string();
    let _ = std::fs::remove_dir_all(&top);
    assert!(
        text.contains(&format!("mkdir -p '{t}/missing'")),
        "{url}: {text}"
    );
}

/// `file:///dir//` (a `//`, empty prefix) names its bucket without doubt,
/// yet a missing `dir` is answered as a single-slash URL ("a single `/`
/// before the path makes it all the bucket's directory") proposing
/// another bucket: the test on `prefix.is_empty()` cannot tell the two.
#[test]
fn review_both_readings_only_for_a_single_slash_url() {
    let top = top("slash");
    let t = top.display().to_string().replace(' ', "%20");
    let url = format!("file://{t}/missing//");
    let e = open_with_env(&url, |_| None).err().unwrap();
    let text = e.to_string();
    let _ = std::fs::remove_dir_all(&top);
    assert!(!text.contains("a single `/`"), "{url}: {text}");
}
