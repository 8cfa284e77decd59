//! `editFile` / `writeFile`: every operation, its failures, permissions, symlinks, atomicity.

use super::support::{Run, files_matching, run, tempdir};
use intendant_protocol::runtime::EditResult;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn edit(path: &Path, fields: Value) -> Value {
    let mut cmd = json!({"function":"editFile","nonce":1,"file_path":path});
    cmd.as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    cmd
}

fn one(dir: &Path, cmd: Value) -> Run {
    run(json!([cmd]), dir)
}

#[test]
fn write_append_and_write_file_alias() {
    let dir = tempdir();
    let f = dir.path().join("new/deeper/file.txt");
    let r = one(
        dir.path(),
        edit(&f, json!({"operation":"write","content":"one\n"})),
    );
    let res: EditResult = r.data(0);
    assert_eq!(
        (res.operation.as_str(), res.bytes, res.replacements),
        ("write", 4, None)
    );
    assert_eq!(res.file_path, f.display().to_string());
    one(
        dir.path(),
        edit(&f, json!({"operation":"append","content":"two\n"})),
    );
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "one\ntwo\n");
    let fresh = dir.path().join("appended");
    one(
        dir.path(),
        edit(&fresh, json!({"operation":"append","content":"x"})),
    );
    assert_eq!(std::fs::read_to_string(&fresh).unwrap(), "x");
    let r = one(
        dir.path(),
        json!({"function":"writeFile","nonce":1,"file_path":f,"content":"alias"}),
    );
    assert_eq!(r.data::<EditResult>(0).operation, "write");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "alias");
}

#[test]
fn replace_returns_the_count_and_refuses_empty_or_absent_matches() {
    let dir = tempdir();
    let f = dir.path().join("r.txt");
    std::fs::write(&f, "a-b-a-c-a").unwrap();
    let r = one(
        dir.path(),
        edit(
            &f,
            json!({"operation":"replace","match_content":"a","content":"XY"}),
        ),
    );
    assert_eq!(r.data::<EditResult>(0).replacements, Some(3));
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "XY-b-XY-c-XY");
    let r = one(
        dir.path(),
        edit(
            &f,
            json!({"operation":"replace","match_content":"zzz","content":"q"}),
        ),
    );
    assert!(r.error(0).contains("not found"), "{}", r.error(0));
    let r = one(
        dir.path(),
        edit(
            &f,
            json!({"operation":"replace","match_content":"","content":"q"}),
        ),
    );
    assert!(r.error(0).contains("must not be empty"));
    let r = one(
        dir.path(),
        edit(&f, json!({"operation":"replace","content":"q"})),
    );
    assert_eq!(r.error(0), "missing `match_content`");
    assert_eq!(
        std::fs::read_to_string(&f).unwrap(),
        "XY-b-XY-c-XY",
        "failed edits change nothing"
    );
}

#[test]
fn insert_at_and_replace_lines_preserve_the_trailing_newline() {
    let dir = tempdir();
    let with_nl = dir.path().join("a.txt");
    let without = dir.path().join("b.txt");
    std::fs::write(&with_nl, "l1\nl2\nl3\n").unwrap();
    std::fs::write(&without, "l1\nl2\nl3").unwrap();
    for f in [&with_nl, &without] {
        one(
            dir.path(),
            edit(
                f,
                json!({"operation":"insert_at","line_number":2,"content":"new"}),
            ),
        );
        one(
            dir.path(),
            edit(
                f,
                json!({"operation":"replace_lines","line_number":3,"end_line":4,"content":"R"}),
            ),
        );
    }
    assert_eq!(std::fs::read_to_string(&with_nl).unwrap(), "l1\nnew\nR\n");
    assert_eq!(std::fs::read_to_string(&without).unwrap(), "l1\nnew\nR");
    one(
        dir.path(),
        edit(
            &with_nl,
            json!({"operation":"insert_at","line_number":4,"content":"end"}),
        ),
    );
    assert_eq!(
        std::fs::read_to_string(&with_nl).unwrap(),
        "l1\nnew\nR\nend\n"
    );
}

#[test]
fn line_operations_reject_bad_ranges() {
    let dir = tempdir();
    let f = dir.path().join("l.txt");
    std::fs::write(&f, "1\n2\n3\n").unwrap();
    for (fields, expect) in [
        (
            json!({"operation":"replace_lines","line_number":3,"end_line":2,"content":""}),
            "end_line 2 is before line_number 3",
        ),
        (
            json!({"operation":"replace_lines","line_number":1,"end_line":9,"content":""}),
            "outside",
        ),
        (
            json!({"operation":"replace_lines","line_number":1,"content":""}),
            "missing `end_line`",
        ),
        (
            json!({"operation":"insert_at","line_number":0,"content":"x"}),
            "outside",
        ),
        (
            json!({"operation":"insert_at","line_number":5,"content":"x"}),
            "outside",
        ),
        (
            json!({"operation":"insert_at","content":"x"}),
            "missing `line_number`",
        ),
    ] {
        let r = one(dir.path(), edit(&f, fields));
        assert!(r.error(0).contains(expect), "{} vs {expect}", r.error(0));
    }
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "1\n2\n3\n");
}

#[test]
fn bad_requests_are_errors_and_the_batch_goes_on() {
    let dir = tempdir();
    let f = dir.path().join("x");
    let r = run(
        json!([
            {"function":"editFile","nonce":1,"operation":"write","content":"x"},
            edit(&f, json!({"operation":"truncate","content":"x"})),
            edit(&f, json!({"content":"x"})),
            edit(&f, json!({"operation":"write"})),
            {"function":"writeFile","nonce":5,"file_path":f,"operation":"append","content":"x"},
            edit(&dir.path().join("missing"), json!({"operation":"insert_at","line_number":1,"content":"x"})),
            edit(dir.path(), json!({"operation":"write","content":"x"})),
            {"function":"editFile","nonce":8,"file_path":"","operation":"write","content":"x"},
            edit(&f, json!({"operation":"write","content":"done"})),
        ]),
        dir.path(),
    );
    assert_eq!(r.code(), 0);
    assert_eq!(r.error(0), "missing `file_path`");
    assert!(r.error(1).contains("unknown operation `truncate`"));
    assert_eq!(r.error(2), "missing `operation`");
    assert_eq!(r.error(3), "missing `content`");
    assert!(r.error(4).contains("writeFile only writes"));
    assert!(r.error(5).contains("No such file"), "{}", r.error(5));
    assert!(r.error(6).contains("is a directory"));
    assert!(r.error(7).starts_with("path refused"));
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "done");
}

#[test]
fn permissions_are_kept_symlinks_are_followed_and_no_temp_file_remains() {
    let dir = tempdir();
    let real = dir.path().join("real.sh");
    std::fs::write(&real, "echo a\n").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o750)).unwrap();
    let link = dir.path().join("link.sh");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    one(
        dir.path(),
        edit(
            &link,
            json!({"operation":"replace","match_content":"a","content":"b"}),
        ),
    );
    one(
        dir.path(),
        edit(&real, json!({"operation":"append","content":"echo c\n"})),
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read_to_string(&real).unwrap(), "echo b\necho c\n");
    assert_eq!(
        std::fs::metadata(&real).unwrap().permissions().mode() & 0o7777,
        0o750
    );
    assert!(files_matching(dir.path(), |n| n.ends_with(".tmp")).is_empty());
}
