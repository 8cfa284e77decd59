//! The first capture of a project, made cheap: before the index takes its files, `git
//! fast-import` writes their blobs into one pack, so `update-index` finds each object already
//! stored and writes none. Written one by one, 100,000 files are 100,000 loose objects: as many
//! new files in the store, which on an ordinary file system is most of a first checkpoint's time
//! (and of `git add`'s). A packed object is also cheaper to look up at every later capture
//! (`mktree` looks up each entry of a tree it makes; see `resident_git`).
//!
//! Only a head start: `update-index` hashes every file again as it always does, so the index and
//! the tree are what they would be without it. A file that changed after it was read here is
//! just stored again as a loose object; one it could not take (gone, not a file or link, over the
//! cap, behind a link) is left to `update-index`. It runs only for a capture that lists every path
//! (the session's first, or one after its index was lost), when at least [`BULK_MIN`] paths are
//! new to the index and the store holds fewer objects than half that many (a second session of the
//! same project finds them stored). A failure costs only the head start: the capture goes on, and
//! the session reports it.
//!
//! Files are opened beneath the project with `openat2` (`RESOLVE_BENEATH`, no link anywhere on
//! the way): a directory swapped for a link meanwhile is not followed out of the project.
//! fast-import runs with the environment of every other store command ([`StoreGit::env`]).

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use tokio::io::AsyncWriteExt;

use super::CheckpointStore;
use super::capture::LastTree;
use super::store_git::{STORE_DEADLINE, StoreGit};
use crate::git::InvocationError;

/// Fewest new paths a first capture writes through one pack: below it, the two processes cost
/// more than loose objects would at every later capture.
pub(super) const BULK_MIN: usize = 100;
/// Bytes of fast-import's input gathered before they are written to it.
const CHUNK: usize = 1 << 20;
/// Chunks read ahead of what fast-import has taken.
const CHUNKS_AHEAD: usize = 4;

/// How many objects a store holds, and in how many packs (`git count-objects -v`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct ObjectCount {
    /// Loose objects.
    pub(super) loose: u64,
    /// Bytes the loose objects take.
    pub(super) loose_bytes: u64,
    /// Objects in packs.
    pub(super) packed: u64,
    /// Bytes the packs take.
    pub(super) pack_bytes: u64,
    /// Packs.
    pub(super) packs: u64,
}

impl ObjectCount {
    /// Counts the objects of `git`'s store.
    pub(super) async fn of(git: &StoreGit) -> Result<ObjectCount, super::CheckpointError> {
        let out = git.run(&["count-objects", "-v"], None, Vec::new()).await?;
        let text = String::from_utf8_lossy(&out);
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok(ObjectCount {
            loose: field("count:"),
            loose_bytes: field("size:") * 1024,
            packed: field("in-pack:"),
            pack_bytes: field("size-pack:") * 1024,
            packs: field("packs:"),
        })
    }

    /// Every object, loose or packed.
    pub(super) fn objects(&self) -> u64 {
        self.loose + self.packed
    }

    /// Every byte the objects take.
    pub(super) fn bytes(&self) -> u64 {
        self.loose_bytes + self.pack_bytes
    }
}

impl CheckpointStore {
    /// Writes the blobs of `update`'s files and links (NUL-ended paths under the project) into
    /// one pack, when there are at least [`BULK_MIN`] of them and the store holds fewer than half
    /// as many objects. `Ok(false)` when it did not; an error says why it failed (nothing the
    /// capture needs was lost).
    pub(super) async fn prepack(&self, update: &[u8]) -> Result<bool, String> {
        let paths = update.split(|b| *b == 0).filter(|p| !p.is_empty()).count();
        if paths < BULK_MIN {
            return Ok(false);
        }
        let count = ObjectCount::of(&self.git)
            .await
            .map_err(|e| e.to_string())?;
        if count.objects().saturating_mul(2) >= paths as u64 {
            return Ok(false);
        }
        let root = rustix::fs::open(
            &self.git.work_tree,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("cannot open {}: {e}", self.git.work_tree.display()))?;
        fast_import(&self.git, root, update.to_vec(), self.max_file_bytes).await?;
        Ok(true)
    }

    /// [`CheckpointStore::prepack`] for a first capture (one that lists every path), its
    /// failure left as a notice for `last`'s session.
    pub(super) async fn prepack_first(&self, update: &[u8], last: Option<&LastTree>) {
        if let Err(message) = self.prepack(update).await
            && let Some(last) = last
        {
            last.resident.notice(format!(
                "checkpoints: writing the first checkpoint's files into one pack failed ({message}); git stored them one by one"
            ));
        }
    }
}

/// Runs `git fast-import` on the blobs of `paths` (NUL-ended, under `root`) read on a blocking
/// thread, fed to it as they are read.
async fn fast_import(
    git: &StoreGit,
    root: OwnedFd,
    paths: Vec<u8>,
    max: u64,
) -> Result<(), String> {
    let (running, pipes) = git
        .spawn_interactive(
            &["fast-import", "--quiet", "--done"],
            &[],
            Some(STORE_DEADLINE),
        )
        .await
        .map_err(|e| format!("cannot run git: {e}"))?;
    // It prints nothing (`--quiet`, no query): its stdout is closed.
    let (mut stdin, stdout) = (pipes.stdin, pipes.stdout);
    drop(stdout);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(CHUNKS_AHEAD);
    let reader = tokio::task::spawn_blocking(move || feed(&root, &paths, max, &tx));
    let writer = async move {
        while let Some(chunk) = rx.recv().await {
            stdin.write_all(&chunk).await?;
        }
        // Closed: fast-import has read `done` and finishes the pack.
        stdin.shutdown().await
    };
    let (written, report, read) =
        tokio::join!(writer, running.finish(std::future::pending()), reader);
    let report = report.map_err(|e| format!("fast-import: {e}"))?;
    InvocationError::check(&report, STORE_DEADLINE, 0)
        .map_err(|e| format!("fast-import: {}", e.message()))?;
    written.map_err(|e| format!("fast-import: writing its input: {e}"))?;
    read.map_err(|e| format!("reading the project: {e}"))?;
    Ok(())
}

/// Sends fast-import's input for `paths` through `tx` in chunks: a blob command per file or
/// link it can read, then `done`. Stops early when the writer is gone.
fn feed(root: &OwnedFd, paths: &[u8], max: u64, tx: &tokio::sync::mpsc::Sender<Vec<u8>>) {
    let mut chunk = Vec::with_capacity(CHUNK + 4096);
    for path in paths.split(|b| *b == 0).filter(|p| !p.is_empty()) {
        let Some(bytes) = content(root, path, max) else {
            continue;
        };
        // `write!` into a Vec cannot fail.
        let _ = write!(chunk, "blob\ndata {}\n", bytes.len());
        chunk.extend_from_slice(&bytes);
        chunk.push(b'\n');
        if chunk.len() >= CHUNK && tx.blocking_send(std::mem::take(&mut chunk)).is_err() {
            return;
        }
    }
    chunk.extend_from_slice(b"done\n");
    let _ = tx.blocking_send(chunk);
}

/// What git stores for `path` under `root`: a regular file's bytes (at most `max`), or a link's
/// target. `None` for anything else, or when a link lies on the way (left to `update-index`).
fn content(root: &OwnedFd, path: &[u8], max: u64) -> Option<Vec<u8>> {
    match super::taken::open_beneath(root, path) {
        Ok(fd) => super::taken::regular(fd, max).map(|(_, bytes)| bytes),
        // The last component is a link (`O_NOFOLLOW`): its target is what git stores.
        Err(rustix::io::Errno::LOOP) => {
            let link = rustix::fs::openat2(
                root,
                Path::new(std::str::from_utf8(path).ok()?),
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            )
            .ok()?;
            let target = rustix::fs::readlinkat(&link, "", Vec::new()).ok()?;
            Some(target.into_bytes())
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(dir: &Path) -> OwnedFd {
        rustix::fs::open(dir, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    #[test]
    fn a_file_or_link_is_read_and_nothing_is_followed_out_of_the_project() {
        let tmp = tempfile::tempdir().unwrap();
        let (project, outside) = (tmp.path().join("p"), tmp.path().join("outside"));
        std::fs::create_dir_all(project.join("d")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "secret").unwrap();
        std::fs::write(project.join("d/file"), "bytes").unwrap();
        std::fs::write(project.join("big"), "123456").unwrap();
        std::os::unix::fs::symlink("../outside/secret", project.join("link")).unwrap();
        std::os::unix::fs::symlink(&outside, project.join("via")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            project.join("fifo"),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let root = root(&project);
        assert_eq!(content(&root, b"d/file", 5).as_deref(), Some(&b"bytes"[..]));
        assert_eq!(
            content(&root, b"link", 5).as_deref(),
            Some(&b"../outside/secret"[..]),
            "a link is its target, never what it points at"
        );
        assert_eq!(
            content(&root, b"via/secret", 100),
            None,
            "a link on the way"
        );
        assert_eq!(content(&root, b"../outside/secret", 100), None);
        assert_eq!(content(&root, b"/etc/passwd", 1 << 20), None);
        assert_eq!(content(&root, b"big", 5), None, "over the cap");
        assert_eq!(content(&root, b"d", 5), None, "a directory");
        assert_eq!(content(&root, b"fifo", 5), None, "a fifo, without blocking");
        assert_eq!(content(&root, b"gone", 5), None);
    }

    #[test]
    fn the_input_names_each_blob_it_could_read_and_ends_with_done() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("a"), "one").unwrap();
        std::fs::write(tmp.path().join("b"), "").unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(CHUNKS_AHEAD);
        feed(&root(tmp.path()), b"a\0gone\0b\0", 10, &tx);
        drop(tx);
        let mut input = Vec::new();
        while let Ok(chunk) = rx.try_recv() {
            input.extend(chunk);
        }
        assert_eq!(input, b"blob\ndata 3\none\nblob\ndata 0\n\ndone\n");
    }
}
