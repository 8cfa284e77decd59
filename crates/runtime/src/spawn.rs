//! The lean start of `execAsAgent`'s shell: `bash -c <command>` as the leader of a new process
//! group, stdin `/dev/null`, stdout and stderr the command's log files, the environment of
//! [`crate::envguard`].
//!
//! A batch starts one shell per command, so this is the runtime's hot path, and on Linux it
//! does less per spawn than `std::process` does: that rebuilds the environment block from a
//! map, opens `/dev/null`, and maps and unmaps a fresh child stack (a TLB shootdown in a
//! process with threads), and glibc's `posix_spawn` then resets each of the 64 signals with two
//! system calls. Here the environment block, the shell's path, `/dev/null` and the child stack
//! are made once per process, and the child resets only the signals this process handles
//! (found once, at the first spawn: the runtime installs its handlers at start).
//!
//! The child is started with `clone(CLONE_VM | CLONE_VFORK)`, as `posix_spawn` does: it runs on
//! its own stack in the parent's memory, and the parent is suspended until the child has
//! called `execve` or exited. In between, the child makes only system calls and touches
//! nothing but the arguments it was given (an `execve` failure is written back there). Every
//! signal is blocked in the parent around the clone, so no handler of the parent can run in the
//! child before the child has reset it. Spawns are serialized by [`crate::child`]'s registry
//! lock, so one child stack serves them all.

#[cfg(target_os = "linux")]
pub use lean::{Shell, spawn_shell};
#[cfg(not(target_os = "linux"))]
pub use portable::{Shell, spawn_shell};

#[cfg(target_os = "linux")]
mod lean {
    use std::ffi::{CString, OsString};
    use std::io;
    use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;
    use std::sync::OnceLock;

    use crate::child::{self, Reap};

    /// A shell started by [`spawn_shell`]; reaped through [`Reap`].
    #[derive(Debug)]
    pub struct Shell {
        pid: libc::pid_t,
        status: Option<ExitStatus>,
    }

    impl Reap for Shell {
        fn id(&self) -> u32 {
            self.pid.unsigned_abs()
        }

        fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
            self.wait_with(libc::WNOHANG)
        }

        fn wait(&mut self) -> io::Result<ExitStatus> {
            // A blocking waitpid returns only once the child is reaped.
            self.wait_with(0)?
                .ok_or_else(|| io::Error::other("waitpid returned without a status"))
        }

        fn kill(&mut self) -> io::Result<()> {
            if self.status.is_some() {
                return Ok(());
            }
            // SAFETY: plain syscall on our own unreaped child, so the pid cannot be recycled.
            if unsafe { libc::kill(self.pid, libc::SIGKILL) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }
    }

    impl Shell {
        /// `waitpid` with `flags`, once the status is known remembered (a pid is reaped only once).
        fn wait_with(&mut self, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
            if let Some(status) = self.status {
                return Ok(Some(status));
            }
            let mut raw = 0;
            loop {
                // SAFETY: an out-int for the status of our own child.
                let rc = unsafe { libc::waitpid(self.pid, &mut raw, flags) };
                if rc == self.pid {
                    let status = ExitStatus::from_raw(raw);
                    self.status = Some(status);
                    return Ok(Some(status));
                }
                if rc == 0 {
                    return Ok(None);
                }
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }

    /// Starts `bash -c command` in a new process group with `stdout` and `stderr` as its output and
    /// `DISPLAY` set to `display` (else unset), and registers the group with the runtime's
    /// registry of what it started.
    pub fn spawn_shell(
        command: &str,
        display: Option<&str>,
        stdout: BorrowedFd<'_>,
        stderr: BorrowedFd<'_>,
    ) -> io::Result<Shell> {
        let command = CString::new(command).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "the command has a NUL byte")
        })?;
        let display = display
            .map(|d| CString::new(format!("DISPLAY={d}")))
            .transpose()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "DISPLAY has a NUL byte"))?;
        let prepared = prepared()?;
        let argv = [
            prepared.shell.as_ptr(),
            c"-c".as_ptr(),
            command.as_ptr(),
            std::ptr::null(),
        ];
        let with_display: Vec<*const libc::c_char>;
        let envp = match &display {
            None => prepared.envp.as_ptr(),
            Some(entry) => {
                with_display = prepared.envp[..prepared.envp.len() - 1]
                    .iter()
                    .copied()
                    .chain([entry.as_ptr(), std::ptr::null()])
                    .collect();
                with_display.as_ptr()
            }
        };
        let mut args = ChildArgs {
            path: prepared.shell.as_ptr(),
            argv: argv.as_ptr(),
            envp,
            stdio: [
                prepared.dev_null.as_raw_fd(),
                stdout.as_raw_fd(),
                stderr.as_raw_fd(),
            ],
            reset: prepared.handled.as_ptr(),
            reset_len: prepared.handled.len(),
            exec_errno: 0,
        };
        child::track_group(|| {
            // SAFETY: `args` and everything it points to outlive the child's use of them: the
            // clone returns only once the child has exec'd or exited.
            let pid = unsafe { clone_child(&mut args, prepared.stack.top) }?;
            // SAFETY: the child has exec'd or exited, so nothing writes `exec_errno` any more.
            let errno = unsafe { std::ptr::read_volatile(&raw const args.exec_errno) };
            if errno != 0 {
                let mut failed = Shell { pid, status: None };
                let _ = failed.wait();
                return Err(io::Error::from_raw_os_error(errno));
            }
            Ok(Shell { pid, status: None })
        })
    }

    /// What the child needs, all of it pointers into memory the parent keeps alive.
    #[repr(C)]
    struct ChildArgs {
        path: *const libc::c_char,
        argv: *const *const libc::c_char,
        envp: *const *const libc::c_char,
        /// Made the child's fds 0, 1 and 2.
        stdio: [RawFd; 3],
        /// Signals to reset to their default disposition before `execve`.
        reset: *const libc::c_int,
        reset_len: usize,
        /// Set by the child when `execve` fails.
        exec_errno: libc::c_int,
    }

    /// The per-process part of a spawn, made at the first one.
    struct Prepared {
        shell: CString,
        /// `NAME=value` pointers of the command environment (without `DISPLAY`), null-terminated.
        envp: Vec<*const libc::c_char>,
        /// Owns the strings `envp` points to.
        _env: Vec<CString>,
        dev_null: std::fs::File,
        /// The signals with a handler in this process, and `SIGPIPE` (ignored by Rust's runtime,
        /// default for the shell, as `std::process` does).
        handled: Vec<libc::c_int>,
        stack: ChildStack,
    }

    // SAFETY: the raw pointers point into `_env`'s heap strings, which never change or move after
    // `prepared` built them; the stack is used only under the spawn lock.
    unsafe impl Send for Prepared {}
    // SAFETY: as above; nothing in `Prepared` is mutated after it is built.
    unsafe impl Sync for Prepared {}

    fn prepared() -> io::Result<&'static Prepared> {
        static PREPARED: OnceLock<Result<Prepared, String>> = OnceLock::new();
        PREPARED
            .get_or_init(|| prepare().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| io::Error::other(format!("cannot prepare the shell spawn: {e}")))
    }

    fn prepare() -> io::Result<Prepared> {
        let env = child::child_env();
        let shell = shell_path(child::shell_program(env))?;
        let strings: Vec<CString> = env
            .iter()
            .filter(|(k, _)| k != "DISPLAY")
            .filter_map(|(k, v)| env_entry(k, v))
            .collect();
        let envp = strings
            .iter()
            .map(|s| s.as_ptr())
            .chain([std::ptr::null()])
            .collect();
        let dev_null = std::fs::File::open("/dev/null")?;
        Ok(Prepared {
            shell,
            envp,
            _env: strings,
            dev_null,
            handled: handled_signals(),
            stack: ChildStack::new()?,
        })
    }

    /// The shell's path for `execve`, which searches no `PATH`: a bare name would run a file of
    /// that name in the working directory, so a shell not found on `PATH` is an error.
    pub(super) fn shell_path(program: std::path::PathBuf) -> io::Result<CString> {
        if !program.is_absolute() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "no executable {} on the command environment's PATH",
                    program.display()
                ),
            ));
        }
        CString::new(program.into_os_string().into_vec())
            .map_err(|_| io::Error::other("the shell's path has a NUL byte"))
    }

    fn env_entry(name: &OsString, value: &OsString) -> Option<CString> {
        let mut entry = name.as_bytes().to_vec();
        entry.push(b'=');
        entry.extend_from_slice(value.as_bytes());
        CString::new(entry).ok()
    }

    /// The kernel's `struct sigaction` on Linux (the raw system call, unlike glibc's wrapper,
    /// also reaches the signals glibc keeps for itself).
    #[repr(C)]
    struct KernelSigaction {
        handler: usize,
        flags: libc::c_ulong,
        restorer: usize,
        mask: u64,
    }

    /// Signals 1 to 64 whose handler is a function in this process, and `SIGPIPE`.
    pub(super) fn handled_signals() -> Vec<libc::c_int> {
        let mut handled = vec![libc::SIGPIPE];
        for sig in 1..=64 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP || sig == libc::SIGPIPE {
                continue;
            }
            let mut old = KernelSigaction {
                handler: 0,
                flags: 0,
                restorer: 0,
                mask: 0,
            };
            // SAFETY: a query (null new action) into a live out-struct of the kernel's layout.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    std::ptr::null::<KernelSigaction>(),
                    &mut old,
                    8usize,
                )
            };
            if rc == 0 && old.handler != libc::SIG_DFL && old.handler != libc::SIG_IGN {
                handled.push(sig);
            }
        }
        handled
    }

    /// The child's stack: mapped once, with a guard page below it.
    struct ChildStack {
        top: *mut libc::c_void,
    }

    /// Room for the child's few calls; `posix_spawn` uses 32 KiB.
    const STACK_SIZE: usize = 64 * 1024;
    const GUARD_SIZE: usize = 4096;

    impl ChildStack {
        fn new() -> io::Result<ChildStack> {
            // SAFETY: a fresh anonymous mapping; nothing else refers to it.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    STACK_SIZE + GUARD_SIZE,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                    -1,
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: the lowest page of the mapping just made.
            if unsafe { libc::mprotect(base, GUARD_SIZE, libc::PROT_NONE) } != 0 {
                return Err(io::Error::last_os_error());
            }
            // The stack grows down from the end of the mapping (kept 16-byte aligned).
            // SAFETY: one past the end of the mapping.
            let top = unsafe { base.cast::<u8>().add(STACK_SIZE + GUARD_SIZE) }.cast();
            Ok(ChildStack { top })
        }
    }

    /// Blocks every signal, clones the child onto `stack_top`, and restores the mask.
    ///
    /// # Safety
    /// `args` must be valid for the child, and `stack_top` the top of a stack nothing else uses
    /// until this returns.
    unsafe fn clone_child(
        args: &mut ChildArgs,
        stack_top: *mut libc::c_void,
    ) -> io::Result<libc::pid_t> {
        let all = all_signals();
        let mut old = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: valid sets; the mask is restored below on every path.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &all, old.as_mut_ptr()) };
        // SAFETY: the caller's guarantees; `child_main` honours the vfork rules.
        let pid = unsafe {
            libc::clone(
                child_main,
                stack_top,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                std::ptr::from_mut(args).cast(),
            )
        };
        let err = io::Error::last_os_error();
        // SAFETY: `old` was filled by the first call.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut()) };
        if pid < 0 {
            return Err(err);
        }
        Ok(pid)
    }

    fn all_signals() -> libc::sigset_t {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigfillset initialises the whole set.
        unsafe {
            libc::sigfillset(set.as_mut_ptr());
            set.assume_init()
        }
    }

    /// The child, between clone and `execve`: raw system calls only, on its own stack.
    extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `ChildArgs` the parent keeps alive until the child has exec'd.
        let args = unsafe { &mut *arg.cast::<ChildArgs>() };
        let default = KernelSigaction {
            handler: libc::SIG_DFL,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        // SAFETY: each call in this block is a plain system call on the child's own state; the
        // pointers come from `args`, valid as above.
        unsafe {
            for i in 0..args.reset_len {
                let sig = *args.reset.add(i);
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    &raw const default,
                    std::ptr::null_mut::<KernelSigaction>(),
                    8usize,
                );
            }
            if libc::setpgid(0, 0) != 0 {
                return fail(args);
            }
            for (target, fd) in (0..).zip(args.stdio) {
                if libc::dup2(fd, target) < 0 {
                    return fail(args);
                }
            }
            let empty: u64 = 0;
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &raw const empty,
                std::ptr::null_mut::<u64>(),
                8usize,
            );
            libc::execve(args.path, args.argv, args.envp);
            fail(args)
        }
    }

    /// Records the failed call's errno for the parent and ends the child.
    ///
    /// # Safety
    /// Only in the child, after a failed call.
    unsafe fn fail(args: &mut ChildArgs) -> libc::c_int {
        // SAFETY: errno of the failed call; a write into the parent's `ChildArgs`.
        unsafe {
            let errno = io::Error::last_os_error()
                .raw_os_error()
                .filter(|e| *e != 0)
                .unwrap_or(libc::EIO);
            std::ptr::write_volatile(&raw mut args.exec_errno, errno);
            libc::_exit(127)
        }
    }
}

/// Other Unix systems start the shell with `std::process`, to the same effect.
#[cfg(not(target_os = "linux"))]
mod portable {
    use std::io;
    use std::os::fd::BorrowedFd;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    use crate::child;

    /// The started shell.
    pub type Shell = std::process::Child;

    /// See the Linux version.
    pub fn spawn_shell(
        command: &str,
        display: Option<&str>,
        stdout: BorrowedFd<'_>,
        stderr: BorrowedFd<'_>,
    ) -> io::Result<Shell> {
        let env = child::child_env();
        let mut cmd = Command::new(child::shell_program(env));
        cmd.arg("-c")
            .arg(command)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env_remove("DISPLAY")
            .stdin(Stdio::null())
            .stdout(stdout.try_clone_to_owned()?)
            .stderr(stderr.try_clone_to_owned()?)
            .process_group(0);
        if let Some(d) = display {
            cmd.env("DISPLAY", d);
        }
        child::spawn_group(&mut cmd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::child::Reap;
    use std::io::{self, Read};
    use std::os::fd::AsFd;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    fn run(command: &str, display: Option<&str>) -> (ExitStatus, String) {
        let out = tempfile::tempfile().unwrap();
        let err = tempfile::tempfile().unwrap();
        let mut shell = spawn_shell(command, display, out.as_fd(), err.as_fd()).unwrap();
        let status = shell.wait().unwrap();
        let mut text = String::new();
        let mut out = out;
        std::io::Seek::rewind(&mut out).unwrap();
        out.read_to_string(&mut text).unwrap();
        (status, text)
    }

    #[test]
    fn runs_the_command_in_its_own_group_with_dev_null_as_stdin() {
        let (status, out) = run("echo $$ $(cut -d' ' -f5 /proc/$$/stat); cat; exit 3", None);
        assert_eq!(status.code(), Some(3));
        let ids: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(ids.len(), 2, "{out:?}");
        assert_eq!(ids[0], ids[1], "the shell leads its own process group");
    }

    #[test]
    fn the_environment_is_the_scrubbed_one_and_display_only_when_asked() {
        let (_, out) = run(
            "echo \"${DISPLAY-unset}\"; env | grep -c '^INTENDANT_' || true",
            None,
        );
        assert_eq!(out, "unset\n0\n");
        let (_, out) = run("echo \"$DISPLAY\"", Some(":42"));
        assert_eq!(out, ":42\n");
    }

    fn status_mask(status: &str, field: &str) -> u64 {
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .unwrap_or_else(|| panic!("no {field} in {status:?}"));
        u64::from_str_radix(line.trim(), 16).unwrap()
    }

    #[test]
    fn the_shell_starts_with_nothing_blocked_and_sigpipe_at_its_default() {
        // `exec` keeps the check to the shell's own process. Ignored signals other than
        // SIGPIPE stay ignored across a spawn, as with `std::process`.
        let (_, out) = run("exec cat /proc/self/status", None);
        let ours = std::fs::read_to_string("/proc/self/status").unwrap();
        let pipe_bit = 1u64 << (libc::SIGPIPE - 1);
        assert_eq!(status_mask(&out, "SigBlk:"), 0);
        assert_eq!(
            status_mask(&out, "SigIgn:"),
            status_mask(&ours, "SigIgn:") & !pipe_bit
        );
        assert_eq!(status_mask(&out, "SigCgt:"), 0);
    }

    #[test]
    fn the_signals_to_reset_are_the_handled_ones_and_sigpipe() {
        extern "C" fn ignore(_: libc::c_int) {}
        // SAFETY: installs a handler that does nothing, for a signal no test sends.
        unsafe { libc::signal(libc::SIGUSR1, ignore as *const () as libc::sighandler_t) };
        let reset = lean::handled_signals();
        assert!(reset.contains(&libc::SIGUSR1), "{reset:?}");
        assert!(reset.contains(&libc::SIGPIPE), "{reset:?}");
        assert!(!reset.contains(&libc::SIGUSR2), "{reset:?}");
        assert!(!reset.contains(&libc::SIGKILL), "{reset:?}");
    }

    #[test]
    fn a_shell_not_found_on_path_is_an_error_not_a_file_in_the_working_directory() {
        let e = lean::shell_path("bash".into()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("PATH"), "{e}");
        assert_eq!(
            lean::shell_path("/usr/bin/bash".into()).unwrap().as_bytes(),
            b"/usr/bin/bash"
        );
    }

    #[test]
    fn a_command_with_a_nul_byte_is_refused_before_anything_runs() {
        let out = tempfile::tempfile().unwrap();
        let e = spawn_shell("echo a\0b", None, out.as_fd(), out.as_fd()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn reaping_is_remembered_and_kill_after_exit_is_harmless() {
        let out = tempfile::tempfile().unwrap();
        let mut shell = spawn_shell("exit 0", None, out.as_fd(), out.as_fd()).unwrap();
        let status = shell.wait().unwrap();
        assert_eq!(shell.try_wait().unwrap(), Some(status));
        shell.kill().unwrap();
    }

    #[test]
    fn kill_stops_a_running_shell() {
        let out = tempfile::tempfile().unwrap();
        let mut shell = spawn_shell("sleep 30", None, out.as_fd(), out.as_fd()).unwrap();
        assert_eq!(shell.try_wait().unwrap(), None);
        shell.kill().unwrap();
        assert_eq!(shell.wait().unwrap().signal(), Some(libc::SIGKILL));
    }
}
