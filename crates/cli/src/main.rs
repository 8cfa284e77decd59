//! `intendant`: argument parsing and the terminal / `--json` frontends; nothing else.
//!
//! The process hardens itself before anything else (non-dumpable, credentials moved out of its
//! environment: see `intendant_core::secrets`). Flags are parsed once into [`Cli`]; each
//! subcommand lives in a module of its own and returns the process exit code. Running a task is `run_task`; the frontends only render
//! events and turn input into intents.

mod agents_cmd;
mod completions_cmd;
mod ctl_cmd;
mod doctor_cmd;
mod json;
mod mcp_cmd;
mod run_task;
mod serve_cmd;
mod sessions_cmd;
mod signals;
mod sub_agents;
mod terminal;
mod trust_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};

/// Lets AI models do real work on this machine without being trusted with it.
#[derive(Debug, Parser)]
#[command(name = "intendant", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The task to run in the current project.
    task: Option<String>,
    /// With no task: start the daemon with the web dashboard (`intendant serve --web [ADDR]`).
    #[arg(long, value_name = "ADDR", conflicts_with = "task")]
    web: Option<Option<String>>,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    output: OutputArgs,
}

/// How the terminal frontend renders (every subcommand that prints for people).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Output")]
pub struct OutputArgs {
    /// Colour: auto (when the output is a terminal; honours NO_COLOR, CLICOLOR and
    /// CLICOLOR_FORCE), always or never.
    #[arg(long, value_name = "WHEN", value_enum, default_value_t, global = true)]
    pub color: terminal::style::ColorChoice,
    /// Also show raw tool results and whole reasoning.
    #[arg(long, short, global = true)]
    pub verbose: bool,
}

/// Flags of a task run.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Headless JSONL: one event per stdout line; stdin takes control messages and follow-ups.
    #[arg(long, help_heading = "Output")]
    pub json: bool,
    /// Model provider: openai, anthropic, gemini, openai-chat or mock (default: $PROVIDER, else
    /// the first of OpenAI, Anthropic, Gemini with a key).
    #[arg(long, help_heading = "Model")]
    pub provider: Option<String>,
    /// Model name (default: $MODEL_NAME, else the provider's default).
    #[arg(long, help_heading = "Model")]
    pub model: Option<String>,
    /// Scenario file for `--provider mock` (the in-process fake model).
    #[arg(long, value_name = "FILE", help_heading = "Model")]
    pub scenario: Option<PathBuf>,
    /// Autonomy level: low, medium, high or full (what runs without asking; see README).
    #[arg(
        long,
        value_name = "LEVEL",
        default_value = "medium",
        help_heading = "Safety"
    )]
    pub autonomy: intendant_core::autonomy::AutonomyLevel,
    /// Force the write sandbox on.
    #[arg(long, conflicts_with = "no_sandbox", help_heading = "Safety")]
    pub sandbox: bool,
    /// Force the write sandbox off.
    #[arg(long, help_heading = "Safety")]
    pub no_sandbox: bool,
    /// Session token budget (input + output tokens); the run stops when it is spent.
    #[arg(
        long,
        value_name = "N",
        env = "INTENDANT_MAX_TOKENS",
        help_heading = "Limits"
    )]
    pub max_tokens: Option<u64>,
    /// Safety cap on model turns.
    #[arg(long, value_name = "N", default_value_t = intendant_core::agent_loop::MAX_TURNS, help_heading = "Limits")]
    pub max_turns: u32,
    /// Resume the session with this id (or unique id prefix).
    #[arg(
        long,
        value_name = "ID",
        conflicts_with = "continue_latest",
        help_heading = "Session"
    )]
    pub resume: Option<String>,
    /// Resume the latest session of this project.
    #[arg(long = "continue", help_heading = "Session")]
    pub continue_latest: bool,
    /// Append the orchestration prompt: the model is asked to split the task among sub-agents
    /// (each in its own git worktree) where its parts can proceed independently.
    #[arg(long, help_heading = "Session")]
    pub orchestrate: bool,
    /// Run the session with an external agent CLI as the worker: codex, claude-code, kimi,
    /// `acp -- COMMAND ARGS...` or the NAME of an [agent.acp.NAME] entry (default: the
    /// project's [agent] default_backend, else Intendant's own loop; `native` names that).
    #[arg(long, value_name = "NAME", help_heading = "Model")]
    pub agent: Option<String>,
    /// The ACP agent's command line, for `--agent acp`.
    #[arg(last = true, value_name = "COMMAND", help_heading = "Model")]
    pub agent_command: Vec<String>,
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
    /// Print shell completions for SHELL (bash, zsh, fish, elvish, powershell).
    Completions(completions_cmd::CompletionsArgs),
    /// Trust the current content of a project's intendant.toml and .env files (their sandbox,
    /// approval, agent and endpoint settings count only once trusted).
    Trust(trust_cmd::TrustArgs),
    /// Say which walls are up on this machine (Landlock and its ABI, the mount namespace, user
    /// namespaces, seccomp, session cgroups, root, the state root), each probed by the kernel.
    Doctor(doctor_cmd::DoctorArgs),
}

fn main() -> anyhow::Result<ExitCode> {
    // First, before any thread or child exists: the commands this process supervises run as the
    // same user, so it must be neither readable nor writable through `/proc/<pid>/{mem,fd,
    // environ}` (non-dumpable), and its credentials must live only in its memory.
    intendant_runtime::hardening::harden_process()
        .map_err(|e| anyhow::anyhow!("process hardening failed: {e}"))?;
    // SAFETY: nothing has started another thread yet; this is the start of `main`.
    unsafe { intendant_core::secrets::seclude() }
        .map_err(|e| anyhow::anyhow!("cannot seclude the credential variables: {e}"))?;
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
        Some(Command::Sessions(args)) => sessions_cmd::run(args),
        Some(Command::Trust(args)) => trust_cmd::run(args),
        Some(Command::Doctor(args)) => doctor_cmd::run(args),
        Some(Command::Completions(args)) => completions_cmd::run(&args, Cli::command()),
        None if cli.web.is_some() => serve_cmd::run(serve_cmd::ServeArgs {
            web: cli.web,
            ..serve_cmd::ServeArgs::default()
        }),
        None => run_task::run(cli.task, cli.run),
    }
}
