//! `intendant agents list|validate` and `intendant delegate`: the external-CLI frontends.
//!
//! Flags are parsed here and handed to `intendant-agents` as plain values; every decision
//! (profiles, auth, hardening, validation) lives in that crate. `delegate` prints exactly one JSON
//! document on stdout and exits 0 only on success.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use intendant_agents::config::AgentConfig;
use intendant_agents::delegate::{DEFAULT_MAX_INPUT_BYTES, DEFAULT_MAX_OUTPUT_BYTES};
use intendant_agents::readiness::{self, Readiness};
use intendant_agents::{CliError, DelegationRequest, ErrorCode, HostEnv, profiles};
use intendant_core::config::{CONFIG_FILE_NAME, ProjectConfig};
use intendant_core::dotenv::{EnvLookup, config_dir};
use intendant_core::runner::own_runtime;

/// Arguments of `intendant agents`.
#[derive(Debug, clap::Args)]
pub struct AgentsArgs {
    #[command(subcommand)]
    command: AgentsCommand,
}

#[derive(Debug, clap::Subcommand)]
enum AgentsCommand {
    /// Readiness of every known CLI (codex, claude-code, kimi).
    List(ListArgs),
    /// Readiness of one CLI; exits 0 only when it is ready.
    Validate(ValidateArgs),
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// One JSON array of readiness objects instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ValidateArgs {
    /// codex, claude-code or kimi.
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(profiles::names()))]
    name: String,
    /// One readiness JSON object (schema version 1) instead of a table.
    #[arg(long)]
    json: bool,
    /// Extra CLI config override, `KEY=VALUE` (codex `-c`); repeatable.
    #[arg(long = "agent-config", value_name = "KEY=VALUE")]
    agent_config: Vec<String>,
}

/// Arguments of `intendant delegate`.
#[derive(Debug, clap::Args)]
pub struct DelegateArgs {
    /// The CLI to delegate to.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(profiles::names()))]
    agent: String,
    /// The model; required unless `[agent.<name>] model` is set in intendant.toml.
    #[arg(long)]
    model: Option<String>,
    /// JSON Schema file (Draft 2020-12) the answer must match.
    #[arg(long, value_name = "FILE")]
    schema: PathBuf,
    /// Deadline in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    timeout: u64,
    /// Limit on the CLI's output in bytes.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_OUTPUT_BYTES)]
    max_output_bytes: usize,
    /// Limit on the prompt read from stdin, in bytes.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_INPUT_BYTES)]
    max_input_bytes: usize,
    /// Reasoning effort, for CLIs that take one.
    #[arg(long, value_name = "LEVEL")]
    effort: Option<String>,
    /// Extra CLI config override, `KEY=VALUE` (codex `-c`, e.g. a custom model provider).
    #[arg(long = "agent-config", value_name = "KEY=VALUE")]
    agent_config: Vec<String>,
    /// Extra environment variable admitted into the CLI's environment (e.g. ANTHROPIC_BASE_URL).
    #[arg(long = "agent-env", value_name = "NAME")]
    agent_env: Vec<String>,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The project's configuration, its security-relevant settings (`[agent.*] path`, `config`,
/// `env`...) honoured only once trusted (asked on a terminal, refused otherwise).
fn project_config() -> anyhow::Result<ProjectConfig> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let env = EnvLookup::load(&cwd, config_dir().as_deref());
    crate::wiring::checked_project(&cwd, &env, crate::wiring::can_ask_trust())
        .map(|review| review.config)
        .map_err(anyhow::Error::msg)
}

fn agent_config(config: &ProjectConfig, name: &str) -> anyhow::Result<AgentConfig> {
    AgentConfig::from_table(name, config.agent.workers.get(name))
        .with_context(|| format!("invalid {CONFIG_FILE_NAME}"))
}

fn print_line(text: &str) -> anyhow::Result<()> {
    print_text(&format!("{text}\n"))
}

#[allow(clippy::print_stdout)]
fn print_text(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Runs `intendant agents`.
pub fn run_agents(args: AgentsArgs) -> anyhow::Result<ExitCode> {
    let config = project_config()?;
    let host = HostEnv::current();
    let rt = runtime()?;
    match args.command {
        AgentsCommand::List(list) => {
            // The version probes start Node processes; running them side by side keeps `list`
            // about as fast as one `validate`.
            let configs = profiles::PROFILES
                .iter()
                .map(|profile| agent_config(&config, profile.name))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let items: Vec<Readiness> = rt.block_on(async {
                let mut probes = tokio::task::JoinSet::new();
                for (index, (profile, cfg)) in
                    profiles::PROFILES.iter().copied().zip(configs).enumerate()
                {
                    let host = host.clone();
                    probes.spawn(async move {
                        (index, readiness::check(profile, &cfg, &host, &[]).await)
                    });
                }
                let mut done: Vec<(usize, Readiness)> = probes.join_all().await;
                done.sort_by_key(|(index, _)| *index);
                done.into_iter().map(|(_, r)| r).collect()
            });
            if list.json {
                print_line(&serde_json::to_string(&items)?)?;
            } else {
                print_text(&readiness::render_table(&items))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        AgentsCommand::Validate(v) => {
            let profile =
                profiles::find(&v.name).with_context(|| format!("unknown agent {:?}", v.name))?;
            let cfg = agent_config(&config, profile.name)?;
            let r = rt.block_on(readiness::check(profile, &cfg, &host, &v.agent_config));
            if v.json {
                print_line(&serde_json::to_string(&r)?)?;
            } else {
                print_text(&readiness::render_table(std::slice::from_ref(&r)))?;
            }
            Ok(if r.ready {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

/// Reads the prompt from stdin, at most `limit` bytes.
fn read_prompt(limit: usize) -> Result<String, CliError> {
    let mut data = Vec::new();
    std::io::stdin()
        .lock()
        .take(limit as u64 + 1)
        .read_to_end(&mut data)
        .map_err(|e| {
            CliError::new(
                ErrorCode::CliInputTooLarge,
                "cannot read the prompt from stdin",
            )
            .with_detail("io_error", e.kind().to_string())
        })?;
    if data.len() > limit {
        return Err(CliError::new(
            ErrorCode::CliInputTooLarge,
            "the prompt on stdin exceeds the input limit",
        )
        .with_detail("max_input_bytes", limit as u64)
        .with_recovery("intendant delegate --max-input-bytes N ..."));
    }
    Ok(String::from_utf8_lossy(&data).into_owned())
}

/// Reads and parses the schema file (bounded).
fn read_schema(path: &Path) -> Result<serde_json::Value, CliError> {
    let limit = intendant_agents::delegate::MAX_SCHEMA_BYTES;
    let bad = |why: &str| {
        CliError::new(
            ErrorCode::CliSchemaInvalid,
            format!("cannot use the schema file {}: {why}", path.display()),
        )
        .with_detail("phase", "schema")
    };
    let file = std::fs::File::open(path).map_err(|e| bad(&e.kind().to_string()))?;
    let mut text = String::new();
    file.take(limit as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|e| bad(&e.kind().to_string()))?;
    if text.len() > limit {
        return Err(CliError::new(
            ErrorCode::CliInputTooLarge,
            "the schema file exceeds its size limit",
        )
        .with_detail("max_schema_bytes", limit as u64));
    }
    serde_json::from_str(&text).map_err(|_| bad("not JSON"))
}

/// Resolves on the first SIGINT or SIGTERM.
fn cancellation() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}

/// Runs `intendant delegate`.
pub fn run_delegate(args: DelegateArgs) -> anyhow::Result<ExitCode> {
    let config = project_config()?;
    let cfg = agent_config(&config, &args.agent)?;
    let host = HostEnv::current();
    let rt = runtime()?;
    let outcome = (|| {
        let schema = read_schema(&args.schema)?;
        let prompt = read_prompt(args.max_input_bytes)?;
        let mut req = DelegationRequest::new(&args.agent, prompt, schema);
        req.model = args.model.clone();
        req.effort = args.effort.clone();
        req.timeout = Duration::from_secs(args.timeout.max(1));
        req.max_input_bytes = args.max_input_bytes;
        req.max_output_bytes = args.max_output_bytes;
        req.config_overrides = args.agent_config.clone();
        req.admitted_env = args.agent_env.clone();
        // Below the runtime, the CLI ends should this process be killed; without one installed
        // it runs as it is.
        req.guard = own_runtime().ok();
        rt.block_on(async {
            // Registered before the CLI starts, so a Ctrl-C (or a supervisor's TERM) at any moment
            // stops the child's process group instead of killing this process around it.
            let cancel = cancellation().map_err(|e| {
                CliError::new(ErrorCode::CliCancelled, "cannot watch for Ctrl-C")
                    .with_detail("io_error", e.kind().to_string())
            })?;
            intendant_agents::delegate(&req, &cfg, &host, cancel).await
        })
    })();
    match outcome {
        Ok(resp) => {
            print_line(&serde_json::to_string(&resp)?)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            print_line(&e.to_json().to_string())?;
            Ok(ExitCode::FAILURE)
        }
    }
}
