//! The mount system calls the namespace ([`super::mounts`]) and the read masks
//! ([`super::masks`]) are made of: `mount(2)`, `mount_setattr(2)`, and `O_PATH` handles to bind
//! what a tmpfs hides back through `/proc/self/fd`.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `MOUNT_ATTR_RDONLY` of `mount_setattr(2)`.
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// An `O_PATH` handle on `path`: it keeps what it names reachable after a tmpfs hides the path,
/// to be bound back through [`via_fd`].
pub fn path_handle(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)
}

/// The `/proc/self/fd` name of `fd`, a mount source for what it holds.
pub fn via_fd(fd: &std::fs::File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Binds `path` onto itself with everything mounted beneath it.
pub fn bind_self(path: &Path) -> std::io::Result<()> {
    mount(Some(path), path, None, libc::MS_BIND | libc::MS_REC, None)
}

/// `p` as a C string (a path with a NUL is invalid input).
pub fn cstring(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in path"))
}

/// `mount(2)`.
pub fn mount(
    source: Option<&(impl AsRef<Path> + ?Sized)>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> std::io::Result<()> {
    let source = source.map(|s| cstring(s.as_ref())).transpose()?;
    let target = cstring(target)?;
    let text = |s: &str| {
        CString::new(s).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL"))
    };
    let fstype = fstype.map(text).transpose()?;
    let data = data.map(text).transpose()?;
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is a NUL-terminated string that outlives the call, or NULL where
    // mount(2) accepts it.
    let rc = unsafe {
        libc::mount(
            ptr(&source),
            target.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `mount_setattr(2)` on the mount at `path`.
pub fn setattr(
    path: &Path,
    flags: libc::c_uint,
    set: u64,
    clear: u64,
    propagation: u64,
) -> std::io::Result<()> {
    let target = cstring(path)?;
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation,
        userns_fd: 0,
    };
    // SAFETY: the path is NUL-terminated and `attr` is a live `struct mount_attr` of the size
    // passed; the call reads both and writes neither.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            target.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
