//! What the examples share: the store named on their command line.

use bucket_lease::backends::config;
use bucket_lease::backends::fs::DirStore;
use bucket_lease::Store;
use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;

/// A store, the prefix to lease in it, and a scratch directory to remove.
pub type Opened = (Arc<dyn Store>, String, Option<PathBuf>);

/// The store and prefix named by the first argument: a URL (opened as
/// `bucket-lease` opens it, see `bucket_lease::backends::config`), or a
/// directory used as the bucket with `prefix`; without one, a fresh
/// scratch directory named after `name`, to remove at the end.
pub fn open_store(name: &str, prefix: &str) -> Result<Opened, Box<dyn Error>> {
    let arg = std::env::args().nth(1);
    if let Some(url) = arg.as_deref().filter(|a| a.contains("://")) {
        let (store, prefix) = config::open(url)?;
        return Ok((store, prefix, None));
    }
    let (dir, scratch) = match arg {
        Some(dir) => (PathBuf::from(dir), false),
        None => {
            let name = format!("bucket-lease-{name}-{}", std::process::id());
            (std::env::temp_dir().join(name), true)
        }
    };
    println!("bucket: the directory {}", dir.display());
    // A bucket must exist, a directory used as one too: make it here.
    std::fs::create_dir_all(&dir)?;
    let store = Arc::new(DirStore::open(&dir)?);
    Ok((store, prefix.to_string(), scratch.then_some(dir)))
}
