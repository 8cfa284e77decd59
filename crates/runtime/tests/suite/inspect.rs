//! `inspectPath`: files, directories, symlinks, absence, and errors.

use super::support::{run, tempdir};
use intendant_protocol::runtime::InspectResult;
use serde_json::json;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

#[test]
fn reports_kind_size_mode_and_owner() {
    let dir = tempdir();
    let f = dir.path().join("f");
    std::fs::write(&f, "12345").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
    let r = run(
        json!([
            {"function":"inspectPath","nonce":1,"path":f},
            {"function":"inspectPath","nonce":2,"path":dir.path()},
            {"function":"inspectPath","nonce":3,"path":dangling},
            {"function":"inspectPath","nonce":4,"path":dir.path().join("absent")},
        ]),
        dir.path(),
    );
    let meta = std::fs::metadata(&f).unwrap();
    let file: InspectResult = r.data(0);
    assert_eq!(
        file,
        InspectResult {
            path: f.display().to_string(),
            exists: true,
            kind: Some("file".into()),
            size: Some(5),
            modified: Some(meta.mtime()),
            mode: Some("640".into()),
            uid: Some(meta.uid()),
            gid: Some(meta.gid()),
        }
    );
    assert_eq!(
        r.data::<InspectResult>(1).kind.as_deref(),
        Some("directory")
    );
    let link: InspectResult = r.data(2);
    assert!(link.exists);
    assert_eq!(link.kind.as_deref(), Some("symlink"));
    let absent: InspectResult = r.data(3);
    assert!(!absent.exists);
    assert_eq!((absent.kind, absent.size, absent.mode), (None, None, None));
}

#[test]
fn missing_or_empty_path_is_an_error_and_the_batch_goes_on() {
    let dir = tempdir();
    let r = run(
        json!([
            {"function":"inspectPath","nonce":1},
            {"function":"inspectPath","nonce":2,"path":""},
            {"function":"inspectPath","nonce":3,"path":"/"},
        ]),
        dir.path(),
    );
    assert_eq!(r.code(), 0);
    assert_eq!(r.error(0), "missing `path`");
    assert!(r.error(1).starts_with("path refused"));
    assert!(r.data::<InspectResult>(2).exists);
}
