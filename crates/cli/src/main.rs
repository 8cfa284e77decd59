//! `intendant`: argument parsing and the terminal / `--json` frontends; nothing else.
//!
//! The process hardens itself before anything else (non-dumpable, credentials moved out of its
//! environment: see `intendant_core::secrets`). Flags are parsed once into [`Cli`] and a task
//! run's are validated into plain values (`flags`); each command lives in a file of its own
//! and returns the process exit code; what several commands share lives in a module named for
//! what it is, never in one command's file. Arrows run down only: `main` uses the commands,
//! the commands use the shared modules and the frontends, and nothing uses `main`.
//!
//! # Layout
//! - `alloc`: the process's allocator (jemalloc), configured to give freed pages back.
//! - `flags`: the flags of a task run and of output, and their validation into `RunOptions`.
//! - `stdin_text`: a text argument given as `-` (a task, a follow-up, a memory), read from
//!   stdin, bounded.
//! - `wiring`: how the library crates are joined here, for every command: the worker factory,
//!   the daemon's session supervisor, the trust question on the terminal.
//! - `run_task`: `intendant [TASK]`: a session assembled, run under a frontend, its exit status.
//! - `sub_agents`: the in-process host of a run's sub-agents, their approvals on the run's bus.
//! - `signals`: SIGINT / SIGTERM to the session's cancellation, and their exit statuses.
//! - `terminal`: the terminal frontend; `terminal::narrator` words each event, also for
//!   `sessions show`.
//! - `json`: the `--json` frontend (JSONL out, control messages in).
//! - the commands, one file each: `serve_cmd`, `ctl_cmd`, `mcp_cmd`, `sessions_cmd`,
//!   `agents_cmd` (also `delegate`), `trust_cmd`, `skills_cmd`, `mcp_servers_cmd`, `doctor_cmd`,
//!   `memory_cmd`, `completions_cmd`.

mod agents_cmd;
mod alloc;
mod checkpoints_cmd;
mod completions_cmd;
mod ctl_cmd;
mod doctor_cmd;
mod flags;
mod fleet_mirror;
mod fleet_resume;
mod fleet_worker;
mod json;
mod mcp_cmd;
mod mcp_servers_cmd;
mod memory_cmd;
mod run_task;
mod serve_cmd;
mod sessions_cmd;
mod signals;
mod skills_cmd;
mod stdin_text;
mod sub_agents;
mod terminal;
mod trust_cmd;
mod wiring;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use flags::{OutputArgs, RunArgs};

/// Lets AI models do real work on this machine without being trusted with it.
#[derive(Debug, Parser)]
#[command(name = "intendant", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The task to run in the current project (`-`: read it from stdin, as `intendant - <
    /// task.md`).
    task: Option<String>,
    /// With no task: start the daemon with the web dashboard (`intendant serve --web [ADDR]`).
    #[arg(long, value_name = "ADDR", conflicts_with = "task")]
    web: Option<Option<String>>,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// External agent CLIs: list and validate readiness.
    Agents(agents_cmd::AgentsArgs),
    /// Delegate one bounded task to an external CLI (prompt on stdin, JSON on stdout).
    Delegate(agents_cmd::DelegateArgs),
    /// Run the daemon of this state root in the foreground (sessions that outlive any
    /// terminal, reached with `intendant ctl`).
    Serve(serve_cmd::ServeArgs),
    /// Drive the daemon of this state root (`intendant serve`) over its control socket.
    Ctl(ctl_cmd::CtlArgs),
    /// The MCP server on stdio, for another agent (`claude mcp add intendant -- intendant mcp`);
    /// sessions run in the daemon of this state root, started in the background when none runs.
    Mcp(mcp_cmd::McpArgs),
    /// List and show recorded sessions.
    Sessions(sessions_cmd::SessionsArgs),
    /// List a session's checkpointed turns with the files each changed (`gc`: collect the
    /// stores' garbage).
    Checkpoints(checkpoints_cmd::CheckpointsArgs),
    /// Show what a session changed in the project: the whole session, one turn or a range of turns.
    Diff(checkpoints_cmd::DiffArgs),
    /// Put the project's files (and the conversation a resume continues) back to before a
    /// turn; `--undo` undoes the last rewind.
    Rewind(checkpoints_cmd::RewindArgs),
    /// Print shell completions for SHELL (bash, zsh, fish, elvish, powershell).
    Completions(completions_cmd::CompletionsArgs),
    /// Trust the current content of a project's intendant.toml and .env files (their sandbox,
    /// approval, agent and endpoint settings count only once trusted).
    Trust(trust_cmd::TrustArgs),
    /// The Agent Skills a session started here offers (`list`, `show NAME`).
    Skills(skills_cmd::SkillsArgs),
    /// The MCP servers a session started here uses (`list`, `check`).
    McpServers(mcp_servers_cmd::McpServersArgs),
    /// The memories sessions search (`list`, `show`, `add`, `edit`, `rm`, `search`), and a
    /// backup of the database they are in (`backup FILE`).
    Memory(memory_cmd::MemoryArgs),
    /// Say which walls are up on this machine (Landlock and its ABI, the mount namespace, user
    /// namespaces, seccomp, session cgroups, root, the state root), each probed by the kernel.
    Doctor(doctor_cmd::DoctorArgs),
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            report_fatal(&e);
            ExitCode::FAILURE
        }
    }
}

/// A fatal error on stderr in one line, `intendant: ...`: its message, then each cause the
/// message does not already say (the default `Error: ...` / `Caused by:` said most of them twice).
#[allow(clippy::print_stderr)]
fn report_fatal(e: &anyhow::Error) {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
    }
    eprintln!("intendant: {text}");
}

fn run() -> anyhow::Result<ExitCode> {
    // First, before any thread or child exists: the commands this process supervises run as the
    // same user, so it must be neither readable nor writable through `/proc/<pid>/{mem,fd,
    // environ}` (non-dumpable), and its credentials must live only in its memory.
    intendant_runtime::hardening::harden_process()
        .map_err(|e| anyhow::anyhow!("process hardening failed: {e}"))?;
    // SAFETY: nothing has started another thread yet; this is the start of `main`.
    unsafe { intendant_core::secrets::seclude() }
        .map_err(|e| anyhow::anyhow!("cannot seclude the credential variables: {e}"))?;
    // SAFETY: still no other thread. The service manager's socket is `serve`'s alone: no child
    // of any command inherits it.
    unsafe { intendant_server::systemd::take_from_env() };
    let cli = Cli::parse();
    terminal::style::configure(terminal::style::Display {
        color: cli.output.color,
        verbose: cli.output.verbose,
    });
    match cli.command {
        Some(Command::Agents(args)) => agents_cmd::run_agents(args),
        Some(Command::Delegate(args)) => agents_cmd::run_delegate(args),
        Some(Command::Serve(args)) => serve_cmd::run(args),
        Some(Command::Ctl(args)) => ctl_cmd::run(args),
        Some(Command::Mcp(args)) => mcp_cmd::run(args),
        Some(Command::McpServers(args)) => mcp_servers_cmd::run(args),
        Some(Command::Sessions(args)) => sessions_cmd::run(args),
        Some(Command::Checkpoints(args)) => checkpoints_cmd::run_checkpoints(args),
        Some(Command::Diff(args)) => checkpoints_cmd::run_diff(args),
        Some(Command::Rewind(args)) => checkpoints_cmd::run_rewind(args),
        Some(Command::Trust(args)) => trust_cmd::run(args),
        Some(Command::Skills(args)) => skills_cmd::run(args),
        Some(Command::Doctor(args)) => doctor_cmd::run(args),
        Some(Command::Memory(args)) => memory_cmd::run(args),
        Some(Command::Completions(args)) => completions_cmd::run(&args, Cli::command()),
        None if cli.web.is_some() => serve_cmd::run(serve_cmd::ServeArgs {
            web: cli.web,
            ..serve_cmd::ServeArgs::default()
        }),
        None => run_task::run(cli.task, cli.run),
    }
}
