//! The flags every command shares, parsed once by clap into [`RunArgs`] and [`OutputArgs`],
//! then validated into [`RunOptions`], the plain values a task run works from: the rest of the
//! program never sees two flags that must be read together.

use std::path::PathBuf;

use clap::Args;
use intendant_agents::worker::factory::command_not_acp;
use intendant_core::autonomy::AutonomyLevel;
use intendant_core::session::assemble::ResumeFrom;
use intendant_protocol::daemon::Backend;

use crate::terminal::style::ColorChoice;

/// How the terminal frontend renders (every subcommand that prints for people).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Output")]
pub struct OutputArgs {
    /// Colour: auto (when the output is a terminal; honours NO_COLOR, CLICOLOR and
    /// CLICOLOR_FORCE), always or never.
    #[arg(long, value_name = "WHEN", value_enum, default_value_t, global = true)]
    pub color: ColorChoice,
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
    pub autonomy: AutonomyLevel,
    /// Force the write sandbox on.
    #[arg(long, conflicts_with = "no_sandbox", help_heading = "Safety")]
    pub sandbox: bool,
    /// Force the write sandbox off.
    #[arg(long, help_heading = "Safety")]
    pub no_sandbox: bool,
    /// What network commands get: proxy (the session's own network, egress through the
    /// controller's policy proxy), none (the session's own loopback only) or host (the host's
    /// network). Default: `[sandbox] network`, else proxy; a resume keeps the session's,
    /// within those settings.
    #[arg(long, value_name = "MODE", help_heading = "Safety")]
    pub network: Option<intendant_core::network::NetworkMode>,
    /// Session token budget (input + output tokens); the run stops when it is spent. A resume
    /// keeps the session's.
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
    /// Resume this project's session worked on last (a top session, not a sub-agent).
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

/// A task run's flags, validated.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Headless JSONL instead of the terminal.
    pub json: bool,
    /// The provider asked for, if any.
    pub provider: Option<String>,
    /// The model asked for, if any.
    pub model: Option<String>,
    /// The scenario of `--provider mock`.
    pub scenario: Option<PathBuf>,
    /// The session's autonomy level.
    pub autonomy: AutonomyLevel,
    /// The write sandbox forced on (`Some(true)`) or off, or left to the configuration.
    pub sandbox: Option<bool>,
    /// The network commands get, or left to the configuration.
    pub network: Option<intendant_core::network::NetworkMode>,
    /// The session's token budget.
    pub max_tokens: Option<u64>,
    /// The cap on model turns.
    pub max_turns: u32,
    /// The earlier session to continue, if any.
    pub resume: Option<ResumeFrom>,
    /// Whether the orchestration prompt is appended.
    pub orchestrate: bool,
    /// The worker asked for, or none for the configured default.
    pub backend: Option<Backend>,
}

impl RunArgs {
    /// The plain values these flags ask for; an error names the flags that cannot go together.
    pub fn validate(self) -> Result<RunOptions, String> {
        let resume = match (self.resume, self.continue_latest) {
            (Some(id), _) => Some(ResumeFrom::Id(id)),
            (None, true) => Some(ResumeFrom::Latest),
            (None, false) => None,
        };
        let sandbox = match (self.sandbox, self.no_sandbox) {
            (true, _) => Some(true),
            (false, true) => Some(false),
            (false, false) => None,
        };
        Ok(RunOptions {
            backend: agent_backend(self.agent.as_deref(), &self.agent_command)?,
            json: self.json,
            provider: self.provider,
            model: self.model,
            scenario: self.scenario,
            autonomy: self.autonomy,
            sandbox,
            network: self.network,
            max_tokens: self.max_tokens,
            max_turns: self.max_turns,
            resume,
            orchestrate: self.orchestrate,
        })
    }
}

/// The backend `--agent NAME` and the command line after `--` name (`intendant` and `ctl
/// start` alike): none, or that agent with the command (which only `acp` takes; the worker
/// factory refuses it for any other).
pub fn agent_backend(name: Option<&str>, command: &[String]) -> Result<Option<Backend>, String> {
    match (name.map(Backend::named), command.is_empty()) {
        (None, true) => Ok(None),
        (None, false) => Err(command_not_acp(None)),
        (Some(backend), true) => Ok(Some(backend)),
        (Some(Backend::Agent { name, .. }), false) => Ok(Some(Backend::Agent {
            name,
            command: command.to_vec(),
        })),
        (Some(Backend::Native), false) => Err(command_not_acp(Some("native"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        run: RunArgs,
    }

    fn options(args: &[&str]) -> Result<RunOptions, String> {
        Flags::try_parse_from([&["intendant"][..], args].concat())
            .map_err(|e| e.to_string())?
            .run
            .validate()
    }

    #[test]
    fn paired_flags_become_one_value() {
        let plain = options(&[]).unwrap();
        assert_eq!(
            (plain.sandbox, plain.resume, plain.backend),
            (None, None, None)
        );
        assert_eq!(options(&["--sandbox"]).unwrap().sandbox, Some(true));
        assert_eq!(options(&["--no-sandbox"]).unwrap().sandbox, Some(false));
        assert_eq!(
            options(&["--resume", "abc"]).unwrap().resume,
            Some(ResumeFrom::Id("abc".into()))
        );
        assert_eq!(
            options(&["--continue"]).unwrap().resume,
            Some(ResumeFrom::Latest)
        );
        assert_eq!(
            options(&["--agent", "acp", "--", "agent-bin", "--stdio"])
                .unwrap()
                .backend,
            Some(Backend::Agent {
                name: "acp".into(),
                command: vec!["agent-bin".into(), "--stdio".into()],
            })
        );
        assert_eq!(
            options(&["--agent", "native"]).unwrap().backend,
            Some(Backend::Native)
        );
    }

    #[test]
    fn a_command_line_for_anything_but_acp_is_refused() {
        for args in [
            &["--", "agent-bin"][..],
            &["--agent", "native", "--", "agent-bin"],
        ] {
            let refused = options(args).unwrap_err();
            assert!(
                refused.contains("is the ACP agent's"),
                "{args:?}: {refused}"
            );
        }
        assert!(options(&["--sandbox", "--no-sandbox"]).is_err());
        assert!(options(&["--resume", "a", "--continue"]).is_err());
    }
}
