//! Process-level hardening applied first thing in `main`.
//!
//! The runtime carries the controller's per-spawn protocol token in memory, and its stdout is
//! the controller's result channel. A model-driven command running as the same user could,
//! through `/proc/<runtime pid>/{fd/1,mem,environ}`, forge a result line or steal the token.
//! Marking the process non-dumpable makes the kernel refuse those opens to anything without
//! `CAP_SYS_PTRACE` (so root is not stopped by this layer: see the README's security section).
//! Children get a fresh dumpable flag at `execve`, which is what they need and harmless. The
//! controller (`intendant`) calls the same function first thing in its `main`, for the same reason.

/// `prctl(2)` reads its variadic arguments as `unsigned long`, so they are passed at that width.
#[cfg(any(target_os = "linux", target_os = "android"))]
const NO_ARG: libc::c_ulong = 0;

/// The `PR_SET_DUMPABLE` value for "not dumpable" (the kernel's `SUID_DUMP_DISABLE`).
#[cfg(any(target_os = "linux", target_os = "android"))]
const SUID_DUMP_DISABLE: libc::c_ulong = 0;

/// Makes this process non-dumpable so same-user descendants cannot read its memory, environ or
/// file descriptors through `/proc`.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn harden_process() -> std::io::Result<()> {
    set_dumpable(SUID_DUMP_DISABLE)?;
    if is_dumpable()? {
        return Err(std::io::Error::other(
            "PR_SET_DUMPABLE 0 did not take effect",
        ));
    }
    Ok(())
}

/// Runs `f` with this process dumpable again, then restores the flag. Only for setup before
/// any input is read or any child exists: a user namespace's `/proc/self/{uid,gid}_map` and
/// `setgroups` belong to root while the process is non-dumpable, so its own maps could not be
/// written.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn while_dumpable<T>(f: impl FnOnce() -> T) -> std::io::Result<T> {
    let was = is_dumpable()?;
    if !was {
        set_dumpable(SUID_DUMP_USER)?;
    }
    let out = f();
    if !was {
        set_dumpable(SUID_DUMP_DISABLE)?;
    }
    Ok(out)
}

/// The `PR_SET_DUMPABLE` value for "dumpable" (the kernel's `SUID_DUMP_USER`).
#[cfg(any(target_os = "linux", target_os = "android"))]
const SUID_DUMP_USER: libc::c_ulong = 1;

#[cfg(any(target_os = "linux", target_os = "android"))]
fn set_dumpable(value: libc::c_ulong) -> std::io::Result<()> {
    // SAFETY: PR_SET_DUMPABLE takes one integer argument and touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, value, NO_ARG, NO_ARG, NO_ARG) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Other platforms: nothing to do in-process yet (no `/proc` aliasing of descriptors).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn harden_process() -> std::io::Result<()> {
    Ok(())
}

/// Raises this process's `oom_score_adj` to
/// [`SESSION_OOM_SCORE_ADJ`](intendant_protocol::runtime::SESSION_OOM_SCORE_ADJ) (never lowers
/// it), so it and everything it starts, which inherits the value, go before the controller when
/// memory runs out: a command that exhausts memory loses its own processes, not the daemon and
/// every session it holds. Call it before [`harden_process`]: a process that is not dumpable has
/// its `/proc/self` files owned by root, which an ordinary user cannot write.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn prefer_for_oom_kill() -> std::io::Result<()> {
    use intendant_protocol::runtime::SESSION_OOM_SCORE_ADJ;
    const PATH: &str = "/proc/self/oom_score_adj";
    let now = std::fs::read_to_string(PATH)?;
    let now: i32 = now.trim().parse().map_err(|_| {
        std::io::Error::other(format!("{PATH} reads {:?}, not a number", now.trim()))
    })?;
    if now >= SESSION_OOM_SCORE_ADJ {
        return Ok(());
    }
    std::fs::write(PATH, SESSION_OOM_SCORE_ADJ.to_string())
}

/// Lowers this process's priority to nice
/// [`SESSION_NICE`](intendant_protocol::runtime::SESSION_NICE) (never raises it), so what it
/// starts, which inherits the value, yields the CPU to the controller. Call it while the process
/// has one thread (a nice value is a thread's, and a thread made later inherits its maker's).
pub fn yield_to_controller() -> std::io::Result<()> {
    use intendant_protocol::runtime::SESSION_NICE;
    let now = rustix::process::getpriority_process(None)?;
    if now >= SESSION_NICE {
        return Ok(());
    }
    rustix::process::setpriority_process(None, SESSION_NICE)?;
    Ok(())
}

/// Other platforms: no `oom_score_adj`.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn prefer_for_oom_kill() -> std::io::Result<()> {
    Ok(())
}

/// Whether this process is currently dumpable.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn is_dumpable() -> std::io::Result<bool> {
    // SAFETY: PR_GET_DUMPABLE takes no pointer and returns the flag.
    let rc = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, NO_ARG, NO_ARG, NO_ARG, NO_ARG) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(rc != 0)
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;

    #[test]
    fn harden_process_clears_the_dumpable_flag() {
        // The flag is read back from the kernel; the attack itself (a same-uid command opening
        // /proc/<runtime>/fd/1) is exercised through the binary in tests/suite/security_forgery.rs.
        harden_process().unwrap();
        assert!(!is_dumpable().unwrap());
    }
}
