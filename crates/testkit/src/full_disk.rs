//! A really full disk for tests: a small tmpfs mounted in a mount namespace of one thread (or of
//! one child process) alone, so the test sees `ENOSPC` from a real file system and nothing
//! else on the machine does. Mounting needs root; where this process may not, each helper says
//! so with `None` and the caller skips outside CI ([`skipped`]) and fails under it.

use std::ffi::CString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Mounts a `bytes`-sized tmpfs on `dir` in a new mount namespace of the calling thread alone;
/// `None` where this process may not (not root). The namespace ends with the thread, so call it
/// on a thread of the test's own.
pub fn small_tmpfs(dir: &Path, bytes: usize) -> Option<()> {
    if !is_root() {
        return None;
    }
    let mount = Mount::new(dir, bytes)?;
    // SAFETY: `enter` makes system calls with C strings that outlive them; the new mount
    // namespace is this thread's own (CLONE_NEWNS on one thread of the process).
    (unsafe { mount.enter() } == 0).then_some(())
}

/// Has `cmd`'s process (not this one) start in a mount namespace of its own with a `bytes`-sized
/// tmpfs on `dir`; `None` (and `cmd` unchanged) where this process may not (not root) or
/// `dir` has a NUL byte. The test reaches that tmpfs through `/proc/<pid>/root` + `dir`
/// ([`seen_by`]).
pub fn small_tmpfs_for(cmd: &mut Command, dir: &Path, bytes: usize) -> Option<()> {
    if !is_root() {
        return None;
    }
    let mount = Mount::new(dir, bytes)?;
    // SAFETY: between fork and exec the closure makes only system calls (unshare, mount) on
    // C strings allocated before the fork; it allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || match mount.enter() {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        });
    }
    Some(())
}

/// `run` started by a shell that first fills the file system of `dir` (a ballast `dir/ballast`,
/// as [`fill`] makes) and, once `run` exits, says on stderr what `dir` holds (`left: NAME...`,
/// sorted) and exits with `run`'s status: for a process that is to find no room from its start,
/// in a tmpfs that is gone with it ([`small_tmpfs_for`] the returned command). It gets `run`'s
/// directory and exactly the variables `run` sets (give it its whole environment, after
/// `env_clear`); its stdin is the caller's to set.
pub fn filled_first(run: &Command, dir: &Path) -> Command {
    let script = r#"dir=$1; shift
head -c 1G /dev/zero > "$dir/ballast" 2>/dev/null
"$@"; rc=$?
echo "left:" $(ls -A "$dir" | sort) >&2
exit $rc"#;
    let mut shell = Command::new("/bin/sh");
    shell
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(dir)
        .arg(run.get_program())
        .args(run.get_args())
        .env_clear()
        .envs(run.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))));
    if let Some(cwd) = run.get_current_dir() {
        shell.current_dir(cwd);
    }
    shell
}

/// `path` as process `pid` sees it (inside its mount namespace).
pub fn seen_by(pid: u32, path: &Path) -> PathBuf {
    let relative = path.strip_prefix("/").unwrap_or(path);
    Path::new("/proc")
        .join(pid.to_string())
        .join("root")
        .join(relative)
}

/// Fills the file system holding `dir` with the file `dir/ballast` until a write fails with
/// `ENOSPC`; returns the ballast (remove it to free the space).
pub fn fill(dir: &Path) -> PathBuf {
    let ballast = dir.join("ballast");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&ballast)
        .unwrap_or_else(|e| panic!("{}: {e}", ballast.display()));
    let block = vec![0_u8; 4096];
    loop {
        match file.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("{}: {e}", ballast.display()),
        }
    }
    // The last page may take a few bytes more.
    while file.write(b"x").is_ok_and(|n| n > 0) {}
    ballast
}

/// Says on stderr that a full-disk test was skipped (outside CI; under `CI` it panics instead):
/// mounting a tmpfs needs root.
#[allow(clippy::print_stderr)]
pub fn skipped() {
    let why = "mounting a small tmpfs needs root (and unshare(CLONE_NEWNS))";
    assert!(std::env::var_os("CI").is_none(), "{why}; CI is set");
    eprintln!("note: skipping the full-disk test: {why}");
}

fn is_root() -> bool {
    // SAFETY: geteuid reads the process's credentials and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The C strings of one tmpfs mount, made before any fork.
struct Mount {
    target: CString,
    options: CString,
}

impl Mount {
    /// `None` for a path with a NUL byte in it.
    fn new(dir: &Path, bytes: usize) -> Option<Mount> {
        Some(Mount {
            target: CString::new(dir.as_os_str().as_encoded_bytes()).ok()?,
            options: CString::new(format!("size={bytes},mode=0700")).ok()?,
        })
    }

    /// A new mount namespace for the calling task, nothing in it propagated back, and the tmpfs
    /// on the target: 0, or -1 with `errno` set.
    ///
    /// # Safety
    /// Only system calls; safe between fork and exec.
    unsafe fn enter(&self) -> i32 {
        // SAFETY: the flags and C strings given outlive each call.
        unsafe {
            if libc::unshare(libc::CLONE_NEWNS) != 0
                || libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
                || libc::mount(
                    c"tmpfs".as_ptr(),
                    self.target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    self.options.as_ptr().cast(),
                ) != 0
            {
                return -1;
            }
        }
        0
    }
}
