//! The mount namespace of the second layer: the whole tree read-only except the write roots,
//! a minimal `/dev`, the control files of [`super::control_files`] read-only inside the
//! roots, and the read masks of [`super::masks`] (hidden paths, filtered `.env` files). Set up
//! once per runtime process; every command inherits it.
//!
//! Landlock cannot see `chmod`, `chown`, timestamps, extended attributes or device writes;
//! a read-only mount refuses all of them (`EROFS`), and a `/dev` that holds only the usual
//! character devices leaves no disk to open. As root the namespace is made directly; as an
//! ordinary user inside a new user namespace that maps only the user's own uid and gid, so
//! nothing gains a privilege outside it. The design decision to know: every step only takes
//! access away (mounts read-only, binds over what exists), so a step that fails midway leaves
//! the process no less confined than before it; the caller reports the layer as unavailable.

use std::path::{Path, PathBuf};

use intendant_protocol::runtime::ReadMask;

use super::control_files::Guard;
use super::mount_calls::{MOUNT_ATTR_RDONLY, bind_self, mount, path_handle, setattr, via_fd};

/// How to create the namespace: for real, or pretending the kernel refuses (test hook).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespaceProbe {
    /// Ask the kernel.
    Kernel,
    /// Report namespaces as unavailable without trying.
    SimulateUnavailable,
}

/// The character devices bound into the private `/dev`.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// Links of the private `/dev`: name, target.
const DEV_LINKS: &[(&str, &str)] = &[
    ("ptmx", "pts/ptmx"),
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
];

/// `MS_PRIVATE` as `struct mount_attr` takes it: nothing propagates in or out of the copy.
const PROPAGATION_PRIVATE: u64 = 1 << 18;
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// Moves this process into a fresh mount namespace laid out for `roots` (canonical) and
/// `guards`. Must run before any thread is started (`unshare(CLONE_NEWUSER)` requires it).
pub fn isolate(
    roots: &[PathBuf],
    guards: &[Guard],
    masks: &[ReadMask],
    probe: NamespaceProbe,
) -> Result<(), String> {
    match probe {
        NamespaceProbe::SimulateUnavailable => {
            return Err("user namespaces are unavailable (simulated)".into());
        }
        NamespaceProbe::Kernel => {}
    }
    let cwd = std::env::current_dir().ok();
    enter_namespace()?;
    setattr(
        Path::new("/"),
        AT_RECURSIVE,
        MOUNT_ATTR_RDONLY,
        0,
        PROPAGATION_PRIVATE,
    )
    .map_err(|e| format!("cannot make the mount tree private and read-only: {e}"))?;
    let dev = Path::new("/dev");
    let mut writable: Vec<&PathBuf> = roots.iter().filter(|r| !r.starts_with(dev)).collect();
    writable.sort_by_key(|r| r.components().count());
    for root in writable {
        bind_self(root)
            .and_then(|()| writable_again(root))
            .map_err(|e| format!("cannot bind {} writable: {e}", root.display()))?;
    }
    private_dev().map_err(|e| format!("cannot set up a private /dev: {e}"))?;
    for guard in guards {
        let done = match guard {
            Guard::Pin(p) => bind_self(p),
            Guard::ReadOnly(p) => {
                bind_self(p).and_then(|()| setattr(p, AT_RECURSIVE, MOUNT_ATTR_RDONLY, 0, 0))
            }
            Guard::Reopen(p) => bind_self(p).and_then(|()| writable_again(p)),
        };
        done.map_err(|e| format!("cannot protect {guard:?}: {e}"))?;
    }
    super::masks::apply(masks, roots).map_err(|e| format!("reads are not confined: {e}"))?;
    // The working directory still points into the mounts as they were before the binds;
    // entering it again by name resolves it through the new ones.
    if let Some(dir) = cwd {
        std::env::set_current_dir(&dir)
            .map_err(|e| format!("cannot re-enter {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// A new mount namespace: directly with `CAP_SYS_ADMIN`, else inside a user namespace that
/// maps only this process's own uid and gid.
fn enter_namespace() -> Result<(), String> {
    // SAFETY: unshare takes flags only; the process is single-threaded here.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } == 0 {
        return Ok(());
    }
    let direct = std::io::Error::last_os_error();
    // SAFETY: as above; geteuid/getegid cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // SAFETY: unshare takes flags only; the process is still single-threaded.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        let err = std::io::Error::last_os_error();
        return Err(format!(
            "no mount namespace ({direct}) and no user namespace for uid {uid} ({err}); the kernel or its policy refuses unprivileged user namespaces (sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone, or AppArmor's kernel.apparmor_restrict_unprivileged_userns)"
        ));
    }
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|e| format!("cannot write {file}: {e}"))
    };
    crate::hardening::while_dumpable(|| {
        write("/proc/self/setgroups", "deny".into())?;
        write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        write("/proc/self/gid_map", format!("{gid} {gid} 1"))
    })
    .map_err(|e| format!("cannot make this process dumpable to map its ids: {e}"))?
}

/// `/dev` as a small tmpfs with [`DEVICES`] bound in from the real one, a private `devpts`
/// instance, the host's `/dev/shm` (shared memory stays shared, and writable as before) and
/// the usual links; then the tmpfs itself read-only.
fn private_dev() -> std::io::Result<()> {
    let dev = Path::new("/dev");
    let shm = dev.join("shm");
    let mut sources = Vec::new();
    for name in DEVICES {
        let path = dev.join(name);
        let fd = path_handle(&path)?;
        sources.push((path, fd));
    }
    let shm_source = path_handle(&shm).ok();
    mount(
        Some("tmpfs"),
        dev,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("mode=0755,size=64k"),
    )?;
    for (path, fd) in &sources {
        std::fs::File::create(path)?;
        mount(Some(&via_fd(fd)), path, None, libc::MS_BIND, None)?;
    }
    let pts = dev.join("pts");
    std::fs::create_dir(&pts)?;
    mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )?;
    std::fs::create_dir(&shm)?;
    match &shm_source {
        Some(fd) => {
            mount(
                Some(&via_fd(fd)),
                &shm,
                None,
                libc::MS_BIND | libc::MS_REC,
                None,
            )?;
            writable_again(&shm)?;
        }
        None => mount(
            Some("tmpfs"),
            &shm,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some("mode=1777"),
        )?,
    }
    for (name, target) in DEV_LINKS {
        std::os::unix::fs::symlink(target, dev.join(name))?;
    }
    setattr(dev, 0, MOUNT_ATTR_RDONLY, 0, 0)
}

/// Clears the read-only flag the whole tree got, on the mount at `path` alone. A mount the
/// kernel locked read-only for this user namespace stays so, as it was outside: nothing is
/// lost, writes there failed before too.
fn writable_again(path: &Path) -> std::io::Result<()> {
    match setattr(path, 0, 0, MOUNT_ATTR_RDONLY, 0) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(()),
        other => other,
    }
}
