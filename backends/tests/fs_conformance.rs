//! The store conformance suite on a directory bucket.
#![cfg(feature = "fs")]

use bucket_lease_backends::fs::DirStore;
use bucket_lease_core::conformance;
use std::path::PathBuf;

/// A directory under the system's temporary directory with a random name,
/// removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let name = format!(
            "bucket-lease-conformance-{:016x}",
            getrandom::u64().unwrap()
        );
        TempDir(std::env::temp_dir().join(name))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_directory_store_passes_every_check() {
    let dir = TempDir::new();
    let store = DirStore::open(&dir.0).unwrap();
    let capabilities = conformance::run_all(&store, "conformance/run");
    assert!(capabilities.conditional_delete);
}
