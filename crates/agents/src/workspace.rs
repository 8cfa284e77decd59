//! The private temporary workspace of one delegation: a mode-0700 directory holding an empty
//! mode-0700 working directory for the CLI and the mode-0600 schema and result files.
//! Dropping it removes everything.

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use crate::error::{CliError, ErrorCode};

/// The workspace; removed on drop.
#[derive(Debug)]
pub struct Workspace {
    root: TempDir,
    /// The CLI's empty working directory.
    pub workdir: PathBuf,
    /// The answer schema.
    pub schema_file: PathBuf,
    /// Where the CLI writes its final message (created empty).
    pub result_file: PathBuf,
}

fn unwritable(what: &str, e: &std::io::Error) -> CliError {
    CliError::new(
        ErrorCode::CliStateUnwritable,
        format!("cannot create the delegation workspace ({what})"),
    )
    .with_detail("io_error", e.kind().to_string())
    .with_recovery("set TMPDIR to a writable directory")
}

fn create_private_file(path: &Path, content: &[u8]) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(content)?;
    f.sync_all()
}

impl Workspace {
    /// Creates the workspace under `parent` and writes the schema file.
    pub fn create(parent: &Path, schema_json: &str) -> Result<Workspace, CliError> {
        let root = tempfile::Builder::new()
            .prefix("intendant-delegate-")
            .tempdir_in(parent)
            .map_err(|e| unwritable("temporary directory", &e))?;
        fs::set_permissions(root.path(), fs::Permissions::from_mode(0o700))
            .map_err(|e| unwritable("temporary directory mode", &e))?;
        let workdir = root.path().join("cwd");
        fs::create_dir(&workdir).map_err(|e| unwritable("working directory", &e))?;
        fs::set_permissions(&workdir, fs::Permissions::from_mode(0o700))
            .map_err(|e| unwritable("working directory mode", &e))?;
        let schema_file = root.path().join("schema.json");
        create_private_file(&schema_file, schema_json.as_bytes())
            .map_err(|e| unwritable("schema file", &e))?;
        let result_file = root.path().join("result.json");
        create_private_file(&result_file, b"").map_err(|e| unwritable("result file", &e))?;
        Ok(Workspace {
            root,
            workdir,
            schema_file,
            result_file,
        })
    }

    /// The workspace root.
    pub fn path(&self) -> &Path {
        self.root.path()
    }

    /// The result file's content, at most `limit` bytes (`Err` when larger).
    pub fn read_result(&self, limit: usize) -> Result<Option<Vec<u8>>, CliError> {
        let Ok(file) = fs::File::open(&self.result_file) else {
            return Ok(None);
        };
        let mut data = Vec::new();
        file.take(limit as u64 + 1)
            .read_to_end(&mut data)
            .map_err(|e| unwritable("result file read", &e))?;
        if data.len() > limit {
            return Err(CliError::new(
                ErrorCode::CliOutputTooLarge,
                "the CLI's final message exceeds the output limit",
            )
            .with_detail("max_output_bytes", limit as u64));
        }
        Ok(Some(data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_private_and_drop_removes() {
        let parent = tempfile::tempdir().unwrap();
        let ws = Workspace::create(parent.path(), "{}").unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(ws.path()), 0o700);
        assert_eq!(mode(&ws.workdir), 0o700);
        assert_eq!(mode(&ws.schema_file), 0o600);
        assert_eq!(mode(&ws.result_file), 0o600);
        assert_eq!(fs::read_dir(&ws.workdir).unwrap().count(), 0);
        let root = ws.path().to_owned();
        drop(ws);
        assert!(!root.exists());
    }

    #[test]
    fn unwritable_parent_is_state_unwritable() {
        let parent = tempfile::tempdir().unwrap();
        let file = parent.path().join("not-a-dir");
        fs::write(&file, "x").unwrap();
        let e = Workspace::create(&file, "{}").unwrap_err();
        assert_eq!(e.code, ErrorCode::CliStateUnwritable);
    }
}
