//! The store stays beneath its directory (issue 39): a symbolic link
//! anywhere on a key's path, at a key's own name, on a prefix's path or in
//! the store's own folder is refused, permanently, naming the link, and
//! nothing outside the bucket is read, written or removed. Each test runs
//! twice: with `openat2` (where the kernel has it) and with the walk.

use super::*;
use bucket_lease_core::multipart::{BeginUpload, CompleteUpload, UploadPart};
use bucket_lease_core::store::Store;

/// Run `test` once as the store resolves paths here, and once by the walk
/// from the root with `O_NOFOLLOW` on each name.
fn both_ways(test: impl Fn()) {
    beneath::FORCE_WALK.with(|walk| walk.set(false));
    test();
    beneath::FORCE_WALK.with(|walk| walk.set(true));
    test();
    beneath::FORCE_WALK.with(|walk| walk.set(false));
}

/// `e` refuses the link at `link`: rejected, permanent, naming it.
fn assert_link_refused<T: std::fmt::Debug>(what: &str, answer: Result<T, StoreError>, link: &Path) {
    let e = answer.expect_err(what);
    assert_eq!(e.kind(), StoreErrorKind::Rejected, "{what}: {e}");
    assert!(e.is_permanent(), "{what}: {e}");
    assert_eq!(e.code(), Some("SymbolicLink"), "{what}: {e}");
    assert!(!e.may_have_landed(), "{what}: {e}");
    assert!(
        e.to_string()
            .contains(&format!("{} is a symbolic link", link.display())),
        "{what}: the error does not name the link {}: {e}",
        link.display()
    );
}

/// Every request on `key` refuses the link at `link`: a write in each of
/// `modes`, a delete, a read, a head and a streamed read.
fn assert_key_refused<const N: usize>(
    store: &DirStore,
    key: &str,
    modes: [PutMode; N],
    link: &Path,
) {
    for mode in modes {
        let what = format!("a write ({mode:?}) of {key} through the link");
        assert_link_refused(&what, put(store, key, b"x", mode), link);
    }
    let delete = store.delete(key, &DeleteMode::Unconditional, None);
    assert_link_refused(&format!("a delete of {key}"), delete, link);
    assert_link_refused(&format!("a read of {key}"), store.get(key, None), link);
    assert_link_refused(&format!("a head of {key}"), store.head(key, None), link);
    let open = store.open(key, None).map(|r| r.object);
    assert_link_refused(&format!("a streamed read of {key}"), open, link);
}

/// The names of every file and folder under `dir`, with each file's bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            let name = path.strip_prefix(dir).unwrap().display().to_string();
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                folders.push(path);
                out.push((name + "/", Vec::new()));
            } else {
                out.push((name, fs::read(&path).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_link_on_a_keys_path_is_refused_and_nothing_outside_is_touched() {
    both_ways(|| {
        let (dir, store) = store();
        let outside = TempDir::new();
        fs::write(outside.0.join("precious"), b"not an object").unwrap();
        fs::create_dir(dir.0.join("nightly")).unwrap();
        let link = dir.0.join("nightly/parts");
        std::os::unix::fs::symlink(&outside.0, &link).unwrap();
        let before = snapshot(&outside.0);

        let new_key = [PutMode::Create, PutMode::Overwrite];
        assert_key_refused(&store, "nightly/parts/1-0", new_key, &link);
        let update = PutMode::Update(Version::etag("\"e\""));
        assert_key_refused(&store, "nightly/parts/precious", [update], &link);
        assert_link_refused(
            "an upload begun through the link",
            store.begin_upload(&BeginUpload::new("nightly/parts/big", &[])),
            &link,
        );
        // An upload begun before the link was planted: its part is taken
        // (the upload's file is the store's own), its completion refused.
        fs::remove_file(&link).unwrap();
        let upload = store
            .begin_upload(&BeginUpload::new("nightly/parts/big", &[]))
            .unwrap();
        let part = store
            .upload_part(&UploadPart::new("nightly/parts/big", &upload, 1, b"part"))
            .unwrap();
        std::os::unix::fs::symlink(&outside.0, &link).unwrap();
        assert_link_refused(
            "a part through the link",
            store.upload_part(&UploadPart::new("nightly/parts/big", &upload, 2, b"part")),
            &link,
        );
        assert_link_refused(
            "a completion through the link",
            store.complete_upload(&CompleteUpload::new(
                "nightly/parts/big",
                &upload,
                &[part],
                &PutMode::Create,
            )),
            &link,
        );
        assert_eq!(snapshot(&outside.0), before, "the outside was changed");
        // The link itself is left as it was: the store removes nothing of
        // what it refuses.
        assert!(fs::symlink_metadata(&link).unwrap().is_symlink());
    });
}

#[test]
fn a_link_at_a_keys_own_name_is_refused_and_never_read_through() {
    both_ways(|| {
        let (dir, store) = store();
        let (other_dir, other) = super::store();
        put(&other, "LEASE", b"another bucket's", PutMode::Create).unwrap();
        let link = dir.0.join("LEASE");
        std::os::unix::fs::symlink(other_dir.0.join("LEASE"), &link).unwrap();
        let before = snapshot(&other_dir.0);

        let version = other.head("LEASE", None).unwrap().version;
        let modes = [PutMode::Overwrite, PutMode::Update(version)];
        assert_key_refused(&store, "LEASE", modes, &link);
        assert_eq!(snapshot(&other_dir.0), before);
        assert!(fs::symlink_metadata(&link).unwrap().is_symlink());
    });
}

#[test]
fn a_link_in_the_stores_own_folder_is_refused() {
    both_ways(|| {
        let (dir, store) = store();
        let outside = TempDir::new();
        let tmp = dir.0.join(".bucket-lease/tmp");
        fs::remove_dir(&tmp).unwrap();
        std::os::unix::fs::symlink(&outside.0, &tmp).unwrap();
        assert_link_refused(
            "a write whose temporary folder is a link",
            put(&store, "k", b"x", PutMode::Create),
            &tmp,
        );
        assert_link_refused(
            "an upload whose folder is a link",
            {
                let uploads = dir.0.join(".bucket-lease/uploads");
                fs::remove_dir(&uploads).unwrap();
                std::os::unix::fs::symlink(&outside.0, &uploads).unwrap();
                store.begin_upload(&BeginUpload::new("k", &[]))
            },
            &dir.0.join(".bucket-lease/uploads"),
        );
        assert_eq!(snapshot(&outside.0), Vec::new());
        assert!(store
            .get("k", None)
            .is_err_and(|e| e.kind() == StoreErrorKind::NotFound));
    });
}

#[test]
fn a_prefix_through_a_link_into_another_bucket_is_not_opened() {
    both_ways(|| {
        let top = TempDir::new();
        let (t, u) = (top.0.join("t"), top.0.join("u"));
        fs::create_dir_all(&t).unwrap();
        fs::create_dir_all(u.join("sub")).unwrap();
        DirStore::open(&u).unwrap();
        let link = t.join("link");
        std::os::unix::fs::symlink(u.join("sub"), &link).unwrap();
        let e = DirStore::open_for(&t, "link/x").unwrap_err();
        assert_eq!((e.kind(), e.method()), (StoreErrorKind::Rejected, "OPEN"));
        assert_link_refused("open_for through a link", Err::<(), _>(e), &link);
        // A link to a plain folder outside any bucket is refused all the
        // same: the prefix's path would not be its real one.
        let plain = top.0.join("plain");
        fs::create_dir(&plain).unwrap();
        let link = t.join("elsewhere");
        std::os::unix::fs::symlink(&plain, &link).unwrap();
        assert_link_refused(
            "open_for through a link out",
            DirStore::open_for(&t, "elsewhere"),
            &link,
        );
        assert!(DirStore::open_for(&t, "jobs/x").is_ok());
    });
}

#[test]
fn a_root_named_through_a_link_is_the_users_choice_and_works() {
    let top = TempDir::new();
    let real = top.0.join("real");
    fs::create_dir(&real).unwrap();
    let named = top.0.join("named");
    std::os::unix::fs::symlink(&real, &named).unwrap();
    let store = DirStore::open(&named).unwrap();
    put(&store, "a/b", b"x", PutMode::Create).unwrap();
    assert_eq!(fs::read(real.join("a/b")).unwrap(), b"x");
    store
        .delete("a/b", &DeleteMode::Unconditional, None)
        .unwrap();
    assert!(!real.join("a").exists(), "the emptied folder is removed");
}

#[test]
fn a_local_failure_before_publishing_says_the_disk_failed_and_nothing_was_sent() {
    let (dir, store) = store();
    let tmp = dir.0.join(".bucket-lease/tmp");
    fs::remove_dir(&tmp).unwrap();
    fs::write(&tmp, b"in the way").unwrap();
    let e = put(&store, "k", b"x", PutMode::Create).unwrap_err();
    assert!(!e.may_have_landed(), "{e}");
    let shown = e.to_string();
    assert!(
        shown.contains("the local disk refused to")
            && shown.contains("nothing was published")
            && !shown.contains("check the endpoint and network"),
        "{shown}"
    );
    assert!(shown.contains(&tmp.display().to_string()), "{shown}");
}

#[test]
fn a_key_through_a_bucket_made_inside_this_one_is_refused() {
    both_ways(|| {
        let top = TempDir::new();
        let inner = top.0.join("x/y");
        fs::create_dir_all(&inner).unwrap();
        // The inner bucket first: the outer one, opened later on a prefix
        // above it, cannot see it when it opens.
        let inner_store = DirStore::open(&inner).unwrap();
        put(&inner_store, "foo", b"inner's", PutMode::Create).unwrap();
        let outer = DirStore::open_for(&top.0, "x").unwrap();
        for answer in [
            put(&outer, "x/y/foo", b"outer's", PutMode::Overwrite).map(drop),
            put(&outer, "x/y/new", b"outer's", PutMode::Create).map(drop),
            outer.get("x/y/foo", None).map(drop),
            outer
                .delete("x/y/foo", &DeleteMode::Unconditional, None)
                .map(drop),
        ] {
            let e = answer.unwrap_err();
            assert_eq!(e.code(), Some("NestedBucket"), "{e}");
            assert!(e.is_permanent() && !e.may_have_landed(), "{e}");
            assert!(e.to_string().contains(&inner.display().to_string()), "{e}");
        }
        assert_eq!(inner_store.get("foo", None).unwrap().body, b"inner's");
        assert!(!inner.join("new").exists());
        // Keys beside it are the outer bucket's as ever.
        put(&outer, "x/LEASE", b"outer's", PutMode::Create).unwrap();
    });
}
