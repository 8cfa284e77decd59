//! Read masks of the second layer: what commands must not read, applied in the runtime's mount
//! namespace ([`SANDBOX_READ_MASKS_ENV`](intendant_protocol::runtime::SANDBOX_READ_MASKS_ENV)).
//!
//! A hidden directory gets a small empty read-only tmpfs in its place, a hidden file an empty
//! read-only file, a `.env` file a read-only copy without its credential entries
//! ([`intendant_protocol::dotenv::scrub`]). Landlock cannot take reads away beneath a readable
//! tree; a mount over the path can, and what a command then sees is plain: `ENOENT` for a name
//! inside a hidden directory (a socket there cannot even be connected to), an empty file, never
//! a hang.
//!
//! The design decision to know: a write root (and a `Reveal` path) is never hidden. One that
//! lies beneath a hidden directory (the session's artifacts directory and a sub-agent's
//! worktree inside the state root) is held by an `O_PATH` handle taken before the tmpfs goes
//! on, and bound back from it, as `private_dev` does for the real device nodes. A path hidden
//! inside a write root has the directories between them pinned, as a guarded control file has
//! ([`super::control_files::pins`]). The cost is a `stat` per mask and a mount per path that
//! exists; nothing is walked.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use intendant_protocol::runtime::ReadMask;

use super::mount_calls::{
    MOUNT_ATTR_RDONLY, bind_self, cstring, mount, path_handle, setattr, via_fd,
};

/// The largest `.env` file shown filtered; a larger one is shown empty (bounded before it is
/// buffered, and no real `.env` comes near it).
pub const MAX_ENV_FILE_BYTES: u64 = 1024 * 1024;

/// Where the stage holding the files to bind is mounted for the moment it is used: on top of
/// the private `/dev`, which reappears when the stage is detached.
const STAGE: &str = "/dev";

/// Flags of every tmpfs this module mounts: nothing in it runs, no device in it opens.
const TMPFS_FLAGS: libc::c_ulong = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;

/// A path to hide that existed when the runtime started.
#[derive(Debug)]
struct Hidden {
    path: PathBuf,
    dir: bool,
}

/// What replaces a file: an empty file, or a `.env` file's filtered text.
#[derive(Debug)]
struct Replacement {
    target: PathBuf,
    text: Vec<u8>,
    mode: u32,
}

/// Applies `masks` in this process's mount namespace, which must already hold the layout of
/// `roots` (canonical write roots). Every step only hides; a failure leaves what was hidden so
/// far hidden, and the caller reports the layer as missing.
pub fn apply(masks: &[ReadMask], roots: &[PathBuf]) -> Result<(), String> {
    // `/dev` itself is the private one, never beneath a hidden path; a root deeper in it (a
    // directory in `/dev/shm`) is kept like any other.
    let dev = Path::new("/dev");
    let mut keeps: Vec<PathBuf> = roots
        .iter()
        .filter(|r| r.as_path() != dev)
        .cloned()
        .collect();
    let mut hidden: Vec<Hidden> = Vec::new();
    let mut replacements: Vec<Replacement> = Vec::new();
    for mask in masks {
        match mask {
            ReadMask::Reveal(path) => keeps.push(path.clone()),
            ReadMask::Hide(path) => hidden.extend(existing(path)),
            ReadMask::ScrubEnv(path) => replacements.extend(scrubbed(path)?),
        }
    }
    hidden.retain(|h| !keeps.contains(&h.path) && h.path.parent().is_some());
    // Shallow first (a keep is bound back before anything beneath it is hidden), equal paths
    // next to each other for the dedup.
    hidden.sort_by(|a, b| {
        let depth = |h: &Hidden| h.path.components().count();
        (depth(a), &a.path).cmp(&(depth(b), &b.path))
    });
    hidden.dedup_by(|a, b| a.path == b.path);
    // A path hidden inside a write root stays where it is hidden: its directories there are
    // pinned, or a command could move one and read the path, no longer at its name, under the
    // next runtime.
    let targets = hidden.iter().map(|h| h.path.as_path());
    let targets = targets.chain(replacements.iter().map(|r| r.target.as_path()));
    for dir in super::control_files::pins(roots, targets) {
        bind_self(&dir).map_err(|e| format!("cannot pin {}: {e}", dir.display()))?;
    }
    for h in hidden.iter().filter(|h| h.dir) {
        hide_dir(&h.path, &keeps).map_err(|e| format!("cannot hide {}: {e}", h.path.display()))?;
    }
    let empty_files = hidden.iter().filter(|h| !h.dir).map(|h| Replacement {
        target: h.path.clone(),
        text: Vec::new(),
        mode: 0o444,
    });
    // A `.env` also listed as hidden stays hidden: `deny_read` only tightens.
    let replacements = replacements
        .into_iter()
        .filter(|r| !hidden.iter().any(|h| h.path == r.target));
    let mut files: Vec<Replacement> = empty_files.chain(replacements).collect();
    // A file inside a directory hidden above is gone already: nothing to cover.
    files.retain(|f| std::fs::symlink_metadata(&f.target).is_ok());
    if files.is_empty() {
        return Ok(());
    }
    replace_files(&files).map_err(|e| format!("cannot hide or filter files: {e}"))
}

/// `path` as a mask target when it exists: its real location when it is a link (the mount
/// would land there anyway, and the write roots are compared as real paths).
fn existing(path: &Path) -> Option<Hidden> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_symlink() {
        return Some(Hidden {
            path: path.to_path_buf(),
            dir: meta.is_dir(),
        });
    }
    let real = std::fs::canonicalize(path).ok()?;
    let dir = std::fs::metadata(&real).ok()?.is_dir();
    Some(Hidden { path: real, dir })
}

/// The filtered copy of the `.env` file `path`, when it exists and holds a credential entry.
/// Read now, before anything is hidden; a file this process cannot read, commands cannot either.
fn scrubbed(path: &Path) -> Result<Option<Replacement>, String> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(_) => return Ok(None),
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot inspect {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    file.take(MAX_ENV_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let text = if bytes.len() as u64 > MAX_ENV_FILE_BYTES {
        Vec::new()
    } else {
        match intendant_protocol::dotenv::scrub(&String::from_utf8_lossy(&bytes)) {
            Some(text) => text.into_bytes(),
            None => return Ok(None),
        }
    };
    let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    Ok(Some(Replacement {
        target,
        text,
        mode: meta.permissions().mode() & 0o444,
    }))
}

/// An empty read-only tmpfs over the directory `path`, with the `keeps` beneath it bound back.
fn hide_dir(path: &Path, keeps: &[PathBuf]) -> std::io::Result<()> {
    // A directory inside one hidden above (and no kept path between) is gone already.
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    let beneath: Vec<&PathBuf> = keeps
        .iter()
        .filter(|k| k.starts_with(path) && k.as_path() != path)
        .collect();
    // Only the outermost: a keep inside another comes back with it.
    let outermost = beneath
        .iter()
        .filter(|k| !beneath.iter().any(|o| o != *k && k.starts_with(o)));
    let mut handles: Vec<(PathBuf, std::fs::File, bool)> = Vec::new();
    for keep in outermost {
        let Ok(file) = path_handle(keep) else {
            continue;
        };
        let dir = file.metadata()?.is_dir();
        handles.push(((*keep).clone(), file, dir));
    }
    let options = Some("mode=0755,size=4k,nr_inodes=256");
    if handles.is_empty() {
        return mount(
            Some("tmpfs"),
            path,
            Some("tmpfs"),
            TMPFS_FLAGS | libc::MS_RDONLY,
            options,
        );
    }
    mount(Some("tmpfs"), path, Some("tmpfs"), TMPFS_FLAGS, options)?;
    for (keep, file, dir) in &handles {
        if let Some(parent) = keep.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if *dir {
            std::fs::create_dir(keep)?;
        } else {
            std::fs::File::create(keep)?;
        }
        mount(
            Some(&via_fd(file)),
            keep,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        )?;
    }
    setattr(path, 0, MOUNT_ATTR_RDONLY, 0, 0)
}

/// Binds each replacement read-only over its target, from a stage tmpfs that is detached
/// again afterwards (the binds keep what they show).
fn replace_files(files: &[Replacement]) -> std::io::Result<()> {
    let stage = Path::new(STAGE);
    mount(
        Some("tmpfs"),
        stage,
        Some("tmpfs"),
        TMPFS_FLAGS,
        Some("mode=0755"),
    )?;
    let bound = stage_and_bind(stage, files);
    let detached = umount(stage);
    bound.and(detached)
}

fn stage_and_bind(stage: &Path, files: &[Replacement]) -> std::io::Result<()> {
    let mut staged: Vec<PathBuf> = Vec::new();
    for (n, file) in files.iter().enumerate() {
        let path = stage.join(n.to_string());
        let mut out = std::fs::File::create(&path)?;
        out.write_all(&file.text)?;
        out.set_permissions(std::fs::Permissions::from_mode(file.mode))?;
        staged.push(path);
    }
    // Read-only before the binds, which copy the flag.
    setattr(stage, 0, MOUNT_ATTR_RDONLY, 0, 0)?;
    for (source, file) in staged.iter().zip(files) {
        mount(Some(source), &file.target, None, libc::MS_BIND, None)?;
    }
    Ok(())
}

/// Detaches the mount at `path` (the top one).
fn umount(path: &Path) -> std::io::Result<()> {
    let target = cstring(path)?;
    // SAFETY: the path is NUL-terminated and outlives the call.
    if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
