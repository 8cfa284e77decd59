//! `intendant-runtime`: see the library docs and `docs/runtime-protocol.md`.
//!
//! Exit status: 0 the whole batch ran; 1 a command aborted the batch; 2 the input was rejected
//! (oversized, unreadable or not an `AgentInput`) and nothing ran; 3 the process could not be
//! set up (hardening, sandbox, log dir) and nothing ran; 4 stdout was closed mid-batch. The
//! modes `--hold-network`, `--sandboxed-stdio` and `--guard` are described where they are
//! handled.

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::process::ExitCode;

use intendant_protocol::runtime::{SANDBOX_OOM_WARNING, SANDBOX_PRIORITY_WARNING};
use intendant_runtime::batch::{self, BatchOutcome, Runtime};
use intendant_runtime::{child, guard, hardening, input, logdir, netns, sandbox, sandboxed};

/// Every command ran.
const EXIT_COMPLETED: u8 = 0;
/// A command aborted the batch.
const EXIT_ABORTED: u8 = 1;
/// The input was rejected; nothing ran.
const EXIT_BAD_INPUT: u8 = 2;
/// Setup failed; nothing ran.
const EXIT_SETUP_FAILED: u8 = 3;
/// stdout went away mid-batch.
const EXIT_OUTPUT_CLOSED: u8 = 4;
/// `--sandboxed-stdio`, `--guard`: the program could not be executed (a shell's "not found").
const EXIT_EXEC_FAILED: u8 = 127;

/// Keeps every thread on the main malloc arena. glibc gives each new thread that allocates an
/// arena of its own (a 128 MiB reservation trimmed by two `munmap`s, an `mprotect`, fresh page
/// faults, and the teardown at exit): a cost the runtime paid at every start for its
/// `parent-watch` thread alone. Its few threads allocate little, so sharing one arena costs
/// nothing measurable.
fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator tunable; called before any thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// A mode's parsed arguments, or exit 2 with the reason (its usage) on stderr.
#[allow(clippy::print_stderr)] // a binary: diagnostics go to stderr
fn arguments<T>(parsed: Result<T, String>) -> Result<T, ExitCode> {
    parsed.map_err(|e| {
        eprintln!("intendant-runtime: {e}");
        ExitCode::from(EXIT_BAD_INPUT)
    })
}

/// `--hold-network`: holds a session's network namespace until stdin closes. It stays dumpable
/// (an ordinary user's controller opens its `/proc/<pid>/ns/` entries) and holds no secret.
#[allow(clippy::print_stderr)] // a binary: diagnostics go to stderr, its report to stdout
fn hold_network(args: impl Iterator<Item = std::ffi::OsString>) -> ExitCode {
    let args = match arguments(netns::HolderArgs::parse(args)) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match netns::hold(&args, &mut io::stdout(), &mut io::stdin()) {
        Ok(()) => ExitCode::from(EXIT_COMPLETED),
        Err(e) => {
            eprintln!("intendant-runtime: {e}");
            ExitCode::from(EXIT_SETUP_FAILED)
        }
    }
}

/// `--sandboxed-stdio PID -- PROGRAM [ARG...]`: the walls a batch gets (in the same order as in
/// [`main`]), then the start line, then the program below this process as its guard
/// ([`guard`]). It exits as the program did; the exit codes of its own are the batch's (2:
/// arguments or start line, 3: setup), and 127 when the program cannot be executed.
#[allow(clippy::print_stderr)] // a binary: diagnostics go to stderr, which the program inherits
fn sandboxed_stdio(args: impl Iterator<Item = std::ffi::OsString>) -> ExitCode {
    let args = match arguments(guard::GuardArgs::parse(args)) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if let Err(code) = raise_walls() {
        return code;
    }
    // Unbuffered: std's stdin would read ahead into the program's input.
    let mut stdin = std::fs::File::from(match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("intendant-runtime: cannot use stdin: {e}");
            return ExitCode::from(EXIT_SETUP_FAILED);
        }
    });
    match sandboxed::await_start(&mut stdin) {
        Ok(true) => {}
        Ok(false) => return ExitCode::from(EXIT_COMPLETED),
        Err(e) => {
            eprintln!("intendant-runtime: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    drop(stdin);
    let mut program = sandboxed::command(&args, sandboxed::program_env(std::env::vars_os()));
    guarded(args.parent, &args.program, &mut program)
}

/// `--guard PID -- PROGRAM [ARG...]`: an agent CLI worker run below the guard, which ends it and
/// all it started when the controller (PID) dies ([`guard`]). Nothing else of the walls: the
/// worker is a program outside them, already in its session's cgroups and at its nice value.
/// Exits as the program did; 2 for bad arguments, 3 when the guard cannot be set up, 127 when
/// the program cannot be executed.
#[allow(clippy::print_stderr)] // a binary: diagnostics go to stderr, which the program inherits
fn guard_program(args: impl Iterator<Item = std::ffi::OsString>) -> ExitCode {
    let args = match arguments(guard::GuardArgs::parse(args)) {
        Ok(a) => a,
        Err(code) => return code,
    };
    // Before the hardening, which gives `/proc/self` to root (as `raise_walls` does).
    let _ = hardening::prefer_for_oom_kill();
    if let Err(e) = hardening::harden_process() {
        eprintln!("intendant-runtime: process hardening failed: {e}");
        return ExitCode::from(EXIT_SETUP_FAILED);
    }
    guarded(args.parent, &args.program, &mut args.command())
}

/// Runs `command` (`program`) under the guard of controller `parent` and exits as it did.
#[allow(clippy::print_stderr)] // a binary: diagnostics go to stderr, which the program inherits
fn guarded(
    parent: libc::pid_t,
    program: &std::ffi::OsStr,
    command: &mut std::process::Command,
) -> ExitCode {
    match guard::run(parent, command) {
        Ok(guard::Ended::Exited(code)) => ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX)),
        Ok(guard::Ended::Signalled(signal)) => {
            guard::raise(signal);
            ExitCode::from(u8::try_from(128 + signal).unwrap_or(u8::MAX))
        }
        Ok(guard::Ended::ControllerGone) => ExitCode::from(EXIT_COMPLETED),
        Err(guard::GuardError::Exec(e)) => {
            eprintln!(
                "intendant-runtime: cannot execute {}: {e}",
                program.to_string_lossy()
            );
            ExitCode::from(EXIT_EXEC_FAILED)
        }
        Err(e) => {
            eprintln!("intendant-runtime: {e}");
            ExitCode::from(EXIT_SETUP_FAILED)
        }
    }
}

/// Marks the process the out-of-memory killer's first choice and lowers its priority below the
/// controller's (each only warned of when it cannot be), hardens it, joins the session's network and applies the sandbox, in that order (the sandbox's
/// filter refuses `setns`): the walls of a batch and of a sandboxed program alike. A failure is
/// said on stderr and is the exit code to return.
#[allow(clippy::print_stderr)] // a binary: diagnostics go to stderr, protocol lines to stdout
fn raise_walls() -> Result<(), ExitCode> {
    if let Err(e) = hardening::prefer_for_oom_kill() {
        eprintln!(
            "{SANDBOX_OOM_WARNING}: {e}; a command that exhausts memory may have the controller killed first"
        );
    }
    if let Err(e) = hardening::yield_to_controller() {
        eprintln!(
            "{SANDBOX_PRIORITY_WARNING}: {e}; busy commands may slow the controller as much as themselves"
        );
    }
    if let Err(e) = hardening::harden_process() {
        eprintln!("intendant-runtime: process hardening failed: {e}");
        return Err(ExitCode::from(EXIT_SETUP_FAILED));
    }
    if let Err(e) = netns::join_from_env() {
        eprintln!("intendant-runtime: {e}");
        return Err(ExitCode::from(EXIT_SETUP_FAILED));
    }
    match sandbox::apply_from_env() {
        Ok(status) => {
            for warning in status.warnings() {
                eprintln!("{warning}");
            }
            Ok(())
        }
        Err(e) => {
            eprintln!("intendant-runtime: {e}");
            Err(ExitCode::from(EXIT_SETUP_FAILED))
        }
    }
}

#[allow(clippy::print_stderr)] // a binary: diagnostics go to stderr, protocol lines to stdout
fn main() -> ExitCode {
    // Order matters: harden and sandbox before reading a byte of input or running anything,
    // and before any thread exists (a user namespace needs a single-threaded process, and
    // Landlock and the syscall filter bind only threads started after them); then bind to
    // the parent (its watcher thread is confined too, and entering a user namespace would
    // have cleared the parent-death signal).
    let mut args = std::env::args_os().skip(1);
    match args.next() {
        Some(mode) if mode == netns::HOLD_NETWORK_ARG => return hold_network(args),
        Some(mode) if mode == sandboxed::SANDBOXED_STDIO_ARG => return sandboxed_stdio(args),
        Some(mode) if mode == guard::GUARD_ARG => return guard_program(args),
        Some(_) | None => {}
    }
    one_malloc_arena();
    if let Err(code) = raise_walls() {
        return code;
    }
    if let Err(e) = child::bind_to_parent() {
        eprintln!("intendant-runtime: {e}");
        return ExitCode::from(EXIT_SETUP_FAILED);
    }
    let input = match input::read_stdin() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("intendant-runtime: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let log_dir = match logdir::resolve() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("intendant-runtime: {e}");
            return ExitCode::from(EXIT_SETUP_FAILED);
        }
    };
    let mut runtime = Runtime::new(&log_dir, input.human_response_token.clone());
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut diag = io::stderr();
    let outcome = batch::run_batch(&input, &mut runtime, &mut out, &mut diag);
    // Stop PTY shells and virtual displays before reporting the exit status.
    drop(runtime);
    match outcome {
        BatchOutcome::Completed => ExitCode::from(EXIT_COMPLETED),
        BatchOutcome::Aborted { nonce } => {
            let _ = writeln!(
                diag,
                "intendant-runtime: command {nonce} failed; batch aborted"
            );
            ExitCode::from(EXIT_ABORTED)
        }
        BatchOutcome::OutputClosed(e) => {
            let _ = writeln!(diag, "intendant-runtime: stdout closed: {e}");
            ExitCode::from(EXIT_OUTPUT_CLOSED)
        }
        // The death handler ends the process by the signal once everything is killed.
        BatchOutcome::Terminated => loop {
            std::thread::park();
        },
    }
}
