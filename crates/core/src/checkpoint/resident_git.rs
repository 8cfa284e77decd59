//! The store's git processes that stay up across a session's captures, so that a capture which
//! knows from the session's walk which files changed starts no process at all (issue 29's
//! per-turn cost: two `git` processes alone cost about 6 ms on an idle machine).
//!
//! Three plumbing commands read requests on stdin and answer each on stdout as soon as it is
//! read: `hash-object -w --no-filters --stdin-paths` (writes one blob per path, its exact bytes,
//! and prints its id), `cat-file --batch` (a tree's entries, by id) and `mktree -z --missing
//! --batch` (one tree per list of entries, its id). A capture hashes the changed files, reads
//! the trees of the directories on their paths (kept by id once read: trees never change), and
//! makes those directories' trees again, deepest first; the rest of the tree is the last
//! capture's. The session's index is not written: git's own stat compare lists the files it is
//! behind on at the next capture through git's listing (see `capture`).
//!
//! They run with the environment of every other store command ([`StoreGit::env`]: no system or
//! global configuration, no hooks, fsmonitor off, attributes from the empty tree), in their own
//! process group through [`crate::child`], and end when the session's round does (an idle session
//! holds none) or the session ends: their stdin is closed and they are reaped (killed if the runtime is gone). A helper that dies, answers what is not an
//! answer or takes longer than [`ANSWER_DEADLINE`] to answer is dropped with the others, and the
//! capture takes the path that starts git per command.
//!
//! `--missing` lets `mktree` take an entry it cannot find: every entry is either a blob
//! `hash-object` just wrote or an entry of a tree read from the store, and the last capture's
//! root tree is read again at every capture (a garbage collection that pruned it is then seen,
//! and the capture falls back). `mktree` still looks every entry up to check its type, about
//! 10 µs for a loose object against 2 for a packed one: a directory of 100 loose files costs a
//! millisecond per capture that makes it again, which is why a first capture of even a small
//! project writes its files into one pack ([`super::bulk::BULK_MIN`]).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;

use super::store_git::{EMPTY_TREE, StoreGit};
use crate::child::Running;

/// Longest a helper may take to answer one request (a blob of a file of the largest size
/// captured, a tree): past it the helper counts as hung.
pub(super) const ANSWER_DEADLINE: Duration = Duration::from_secs(30);
/// Most tree entries kept read; past it the kept trees are forgotten.
const KEPT_ENTRIES: usize = 200_000;
/// git's mode of a directory in a tree.
const TREE_MODE: u32 = 0o040000;
/// How long closing helpers waits for them to exit before killing them.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Why a capture could not go through the resident helpers.
#[derive(Debug)]
pub(super) enum ResidentError {
    /// Not this capture (a link, a name `--stdin-paths` cannot take, a tree unlike the walk):
    /// it starts git per command; the helpers stay.
    Declined,
    /// A helper failed (died, hung, answered nonsense): the helpers are dropped.
    Failed(String),
}

impl fmt::Display for ResidentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResidentError::Declined => f.write_str("declined"),
            ResidentError::Failed(message) => f.write_str(message),
        }
    }
}

/// One entry of a tree: its mode (as git writes it), its name and its object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TreeEntry {
    mode: u32,
    id: String,
}

/// A tree's entries by name.
pub(super) type Entries = BTreeMap<Vec<u8>, TreeEntry>;

/// What a capture changes in the last tree: a path's new blob (with whether it is executable),
/// or its removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum PathUpdate {
    /// The file's blob, and whether its owner may execute it.
    Blob {
        /// The blob's id.
        id: String,
        /// git's test for 100755.
        exec: bool,
    },
    /// The path is no longer in the tree.
    Removed,
}

/// One helper: the running process and its two pipes.
#[derive(Debug)]
struct Helper {
    what: &'static str,
    stdin: pipe::Sender,
    stdout: BufReader<pipe::Receiver>,
    running: Running,
}

impl Helper {
    async fn start(
        git: &StoreGit,
        args: &[&str],
        what: &'static str,
    ) -> Result<Helper, ResidentError> {
        // Every answer is flushed as it is made, even into a pipe.
        let (running, pipes) = git
            .spawn_interactive(args, &[("GIT_FLUSH", "1")], None)
            .await
            .map_err(|e| ResidentError::Failed(format!("cannot start git {what}: {e}")))?;
        Ok(Helper {
            what,
            stdin: pipes.stdin,
            stdout: BufReader::new(pipes.stdout),
            running,
        })
    }

    fn failed(&self, how: impl fmt::Display) -> ResidentError {
        failed(self.what, how)
    }

    /// Writes `bytes` (within `deadline`: a helper that reads nothing is hung).
    async fn send(&mut self, bytes: &[u8], deadline: Duration) -> Result<(), ResidentError> {
        let write = async {
            self.stdin.write_all(bytes).await?;
            self.stdin.flush().await
        };
        match tokio::time::timeout(deadline, write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(self.failed(format_args!("writing its input: {e}"))),
            Err(_) => Err(self.failed(format_args!("read no input for {deadline:?}"))),
        }
    }

    /// Reads one answer line (without its newline).
    async fn line(&mut self, deadline: Duration) -> Result<String, ResidentError> {
        answer_line(&mut self.stdout, self.what, deadline).await
    }

    /// Reads exactly `len` bytes.
    async fn bytes(&mut self, len: usize, deadline: Duration) -> Result<Vec<u8>, ResidentError> {
        let mut out = vec![0u8; len];
        match tokio::time::timeout(deadline, self.stdout.read_exact(&mut out)).await {
            Ok(Ok(_)) => Ok(out),
            Ok(Err(e)) => Err(self.failed(format_args!("reading its answer: {e}"))),
            Err(_) => Err(self.failed(format_args!("gave no answer for {deadline:?}"))),
        }
    }
}

/// A session's resident helpers and the trees they read or made.
#[derive(Debug)]
pub(super) struct ResidentGit {
    hasher: Helper,
    reader: Helper,
    maker: Helper,
    trees: KeptTrees,
    deadline: Duration,
}

/// Trees by id, as read or made (a tree never changes), up to [`KEPT_ENTRIES`] entries.
#[derive(Debug, Default)]
struct KeptTrees {
    trees: HashMap<String, Arc<Entries>>,
    /// Entries held.
    kept: usize,
}

impl KeptTrees {
    fn keep(&mut self, id: String, entries: Arc<Entries>) {
        if self.kept + entries.len() > KEPT_ENTRIES {
            self.trees.clear();
            self.kept = 0;
        }
        self.kept += entries.len();
        self.trees.insert(id, entries);
    }
}

impl ResidentGit {
    /// Starts the three helpers on `git`'s store.
    pub(super) async fn start(
        git: &StoreGit,
        deadline: Duration,
    ) -> Result<ResidentGit, ResidentError> {
        Ok(ResidentGit {
            hasher: Helper::start(
                git,
                &["hash-object", "-w", "--no-filters", "--stdin-paths"],
                "hash-object",
            )
            .await?,
            reader: Helper::start(git, &["cat-file", "--batch"], "cat-file").await?,
            maker: Helper::start(git, &["mktree", "-z", "--missing", "--batch"], "mktree").await?,
            trees: KeptTrees::default(),
            deadline,
        })
    }

    /// The helpers' process ids (a test kills one).
    #[cfg(test)]
    pub(super) fn pids(&self) -> Vec<u32> {
        [&self.hasher, &self.reader, &self.maker]
            .iter()
            .filter_map(|h| h.running.id())
            .collect()
    }

    /// Writes the blob of each file of `paths` (absolute, regular files) and reads tree `base`
    /// (read from the store even when kept: it must still be there) at the same time: the
    /// blobs' ids, in order, and the tree's entries.
    pub(super) async fn hash_with_base(
        &mut self,
        paths: &[&str],
        base: &str,
    ) -> Result<(Vec<String>, Arc<Entries>), ResidentError> {
        let deadline = self.deadline;
        let (ids, root) = tokio::join!(
            hash_paths(&mut self.hasher, paths, deadline),
            read_tree(&mut self.reader, &mut self.trees, base, true, deadline),
        );
        match (ids, root) {
            (Ok(ids), Ok(root)) => Ok((ids, root)),
            (Err(ResidentError::Failed(e)), _) | (_, Err(ResidentError::Failed(e))) => {
                Err(ResidentError::Failed(e))
            }
            (Err(ResidentError::Declined), _) | (_, Err(ResidentError::Declined)) => {
                Err(ResidentError::Declined)
            }
        }
    }

    /// The tree `base` with `updates` (project-relative paths) made: every directory on their
    /// paths made again, deepest first; one emptied is dropped from its parent, as git's
    /// `write-tree` never writes an empty tree. Declined when a changed path's directory is not a
    /// directory of `base`.
    pub(super) async fn tree_with(
        &mut self,
        root: &Entries,
        updates: &[(&str, PathUpdate)],
    ) -> Result<String, ResidentError> {
        let deadline = self.deadline;
        let mut dirs: BTreeMap<String, Entries> = BTreeMap::new();
        dirs.insert(String::new(), root.clone());
        for (path, _) in updates {
            let mut dir = String::new();
            let mut parts: Vec<&str> = path.split('/').collect();
            parts.pop();
            for part in parts {
                let child = if dir.is_empty() {
                    part.to_owned()
                } else {
                    format!("{dir}/{part}")
                };
                if !dirs.contains_key(&child) {
                    let id = match dirs.get(&dir).and_then(|d| d.get(part.as_bytes())) {
                        Some(entry) if entry.mode == TREE_MODE => entry.id.clone(),
                        _ => return Err(ResidentError::Declined),
                    };
                    let entries =
                        read_tree(&mut self.reader, &mut self.trees, &id, false, deadline).await?;
                    dirs.insert(child.clone(), (*entries).clone());
                }
                dir = child;
            }
        }
        for (path, update) in updates {
            let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
            let Some(entries) = dirs.get_mut(dir) else {
                return Err(ResidentError::Declined);
            };
            match update {
                PathUpdate::Blob { id, exec } => {
                    let mode = if *exec { 0o100755 } else { 0o100644 };
                    if entries
                        .get(name.as_bytes())
                        .is_some_and(|e| e.mode == TREE_MODE)
                    {
                        return Err(ResidentError::Declined);
                    }
                    entries.insert(
                        name.as_bytes().to_vec(),
                        TreeEntry {
                            mode,
                            id: id.clone(),
                        },
                    );
                }
                PathUpdate::Removed => {
                    entries.remove(name.as_bytes());
                }
            }
        }
        let mut order: Vec<String> = dirs.keys().filter(|d| !d.is_empty()).cloned().collect();
        order.sort_by_key(|d| std::cmp::Reverse(d.matches('/').count()));
        for dir in order {
            let entries = dirs.remove(&dir).unwrap_or_default();
            let (parent, name) = dir.rsplit_once('/').unwrap_or(("", &dir));
            let made = if entries.is_empty() {
                None
            } else {
                Some(self.make_tree(entries).await?)
            };
            let Some(parent) = dirs.get_mut(parent) else {
                return Err(ResidentError::Declined);
            };
            match made {
                Some(id) => {
                    parent.insert(
                        name.as_bytes().to_vec(),
                        TreeEntry {
                            mode: TREE_MODE,
                            id,
                        },
                    );
                }
                None => {
                    parent.remove(name.as_bytes());
                }
            }
        }
        let root = dirs.remove("").unwrap_or_default();
        if root.is_empty() {
            return Ok(EMPTY_TREE.to_owned());
        }
        self.make_tree(root).await
    }

    /// Writes the tree of `entries`; its id.
    async fn make_tree(&mut self, entries: Entries) -> Result<String, ResidentError> {
        let mut input = Vec::new();
        for (name, entry) in &entries {
            let kind = match entry.mode {
                TREE_MODE => "tree",
                0o160000 => "commit",
                _ => "blob",
            };
            input.extend_from_slice(format!("{:06o} {kind} {}\t", entry.mode, entry.id).as_bytes());
            input.extend_from_slice(name);
            input.push(0);
        }
        // An empty entry ends the tree.
        input.push(0);
        let deadline = self.deadline;
        self.maker.send(&input, deadline).await?;
        let id = self.maker.line(deadline).await?;
        if !is_object_id(&id) {
            return Err(self.maker.failed(format_args!("answered {id:?}")));
        }
        self.trees.keep(id.clone(), Arc::new(entries));
        Ok(id)
    }

    /// Closes the helpers' input and waits for them to exit (each is killed past its grace).
    pub(super) async fn close(self) {
        let ResidentGit {
            hasher,
            reader,
            maker,
            ..
        } = self;
        for helper in [hasher, reader, maker] {
            let Helper { stdin, running, .. } = helper;
            drop(stdin);
            // Past the grace the helper is stopped (TERM, then KILL) and reaped all the same.
            let _ = running.finish(tokio::time::sleep(CLOSE_GRACE)).await;
        }
    }
}

/// Writes the blob of each file of `paths` through `hasher`; their ids, in order. A name
/// `--stdin-paths` would read otherwise (a newline, a leading quote) is declined.
async fn hash_paths(
    hasher: &mut Helper,
    paths: &[&str],
    deadline: Duration,
) -> Result<Vec<String>, ResidentError> {
    let mut input = Vec::new();
    for path in paths {
        if path.contains('\n') || path.starts_with('"') {
            return Err(ResidentError::Declined);
        }
        input.extend_from_slice(path.as_bytes());
        input.push(b'\n');
    }
    let what = hasher.what;
    let (stdin, stdout) = (&mut hasher.stdin, &mut hasher.stdout);
    // Written while the answers are read: neither pipe can fill and stop the other side.
    let write = async {
        stdin.write_all(&input).await?;
        stdin.flush().await
    };
    let read = async {
        let mut ids = Vec::with_capacity(paths.len());
        for _ in paths {
            ids.push(answer_line(stdout, what, deadline).await?);
        }
        Ok::<_, ResidentError>(ids)
    };
    let (written, ids) = tokio::join!(write, read);
    let ids = ids?;
    written.map_err(|e| hasher.failed(format_args!("writing its input: {e}")))?;
    if let Some(bad) = ids.iter().find(|id| !is_object_id(id)) {
        return Err(hasher.failed(format_args!("answered {bad:?}")));
    }
    Ok(ids)
}

/// Helper `what` failed: `how`.
fn failed(what: &str, how: impl fmt::Display) -> ResidentError {
    ResidentError::Failed(format!("git {what}: {how}"))
}

/// Reads one answer line of helper `what` from `stdout` (without its newline).
async fn answer_line(
    stdout: &mut BufReader<pipe::Receiver>,
    what: &str,
    deadline: Duration,
) -> Result<String, ResidentError> {
    let mut line = String::new();
    match tokio::time::timeout(deadline, stdout.read_line(&mut line)).await {
        Ok(Ok(0)) => Err(failed(what, "exited")),
        Ok(Ok(_)) if line.ends_with('\n') => {
            line.pop();
            Ok(line)
        }
        Ok(Ok(_)) => Err(failed(what, "exited mid-answer")),
        Ok(Err(e)) => Err(failed(what, format_args!("reading its answer: {e}"))),
        Err(_) => Err(failed(
            what,
            format_args!("gave no answer for {deadline:?}"),
        )),
    }
}

/// The entries of tree `id` through `reader`, kept in `trees` once read; with `fresh`, read
/// from the store whatever is kept.
async fn read_tree(
    reader: &mut Helper,
    trees: &mut KeptTrees,
    id: &str,
    fresh: bool,
    deadline: Duration,
) -> Result<Arc<Entries>, ResidentError> {
    if !fresh && let Some(entries) = trees.trees.get(id) {
        return Ok(entries.clone());
    }
    reader.send(format!("{id}\n").as_bytes(), deadline).await?;
    let header = reader.line(deadline).await?;
    let mut fields = header.split(' ');
    let (Some(answered), Some(kind), Some(size), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        // `<id> missing`: gone from the store (a garbage collection): not this capture.
        return if header.ends_with(" missing") {
            Err(ResidentError::Declined)
        } else {
            Err(reader.failed(format_args!("answered {header:?}")))
        };
    };
    let size: usize = size
        .parse()
        .map_err(|_| reader.failed(format_args!("answered {header:?}")))?;
    if answered != id || kind != "tree" {
        return Err(reader.failed(format_args!("answered {header:?} for {id}")));
    }
    let body = reader.bytes(size + 1, deadline).await?;
    let entries = parse_tree(&body[..size], id.len() / 2)
        .ok_or_else(|| reader.failed(format_args!("gave tree {id} unparsed")))?;
    let entries = Arc::new(entries);
    trees.keep(id.to_owned(), entries.clone());
    Ok(entries)
}

/// Whether `text` is a hex object id.
fn is_object_id(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A raw tree object's entries (`MODE NAME\0ID` each, the id `raw_len` bytes).
fn parse_tree(mut body: &[u8], raw_len: usize) -> Option<Entries> {
    let mut entries = Entries::new();
    while !body.is_empty() {
        let space = body.iter().position(|b| *b == b' ')?;
        let mode = u32::from_str_radix(std::str::from_utf8(&body[..space]).ok()?, 8).ok()?;
        let rest = &body[space + 1..];
        let nul = rest.iter().position(|b| *b == 0)?;
        let name = rest[..nul].to_vec();
        let raw = rest.get(nul + 1..nul + 1 + raw_len)?;
        let id: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        entries.insert(name, TreeEntry { mode, id });
        body = &rest[nul + 1 + raw_len..];
    }
    Some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_tree_is_read_entry_by_entry_and_a_torn_one_is_refused() {
        let mut raw = b"100644 a.txt\0".to_vec();
        raw.extend_from_slice(&[0xab; 20]);
        raw.extend_from_slice(b"40000 dir\0");
        raw.extend_from_slice(&[0x01; 20]);
        let entries = parse_tree(&raw, 20).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[&b"a.txt".to_vec()].mode, 0o100644);
        assert_eq!(entries[&b"a.txt".to_vec()].id, "ab".repeat(20));
        assert_eq!(entries[&b"dir".to_vec()].mode, TREE_MODE);
        assert!(parse_tree(&raw[..raw.len() - 1], 20).is_none());
        assert!(parse_tree(b"10x644 a\0", 20).is_none());
        assert!(is_object_id(&"ab".repeat(20)));
        assert!(!is_object_id("fatal: bad"));
    }
}
