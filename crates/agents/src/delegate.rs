//! The bounded delegation contract (`docs/agents.md`): one prompt in, one validated value out,
//! or one stable, sanitized error.
//!
//! Three stages, each checking in this order: the preflight (capability, model, input size,
//! executable, version, auth, schema, workspace), the launch (the run under core's child
//! supervisor), and the judgement (the CLI's own success rules, effective model, JSON Schema,
//! application validator).

use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use intendant_core::child::{self, ChildSpec, Ending, Limits, Overflow};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::auth::{AuthCandidate, AuthClass, BillingClass};
use crate::config::AgentConfig;
use crate::discover;
use crate::env::{self, HostEnv};
use crate::error::{CliError, ErrorCode};
use crate::profile::{
    AgentProfile, Delegation, EffortSpelling, Invocation, OverloadSign, TokenUsage, Transcript,
    TurnOutcome, Version,
};
use crate::schema::AnswerSchema;
use crate::workspace::Workspace;

/// Default deadline of one delegation.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// Default limit on the prompt, in bytes.
pub const DEFAULT_MAX_INPUT_BYTES: usize = 1 << 20;
/// Default limit on the CLI's stdout (and final message), in bytes.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 8 << 20;
/// Default limit on the schema, in bytes (it may travel in argv).
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// Default TERM-to-KILL grace period.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3);
/// stderr bytes kept for classification.
const STDERR_HEAD_BYTES: usize = 64 * 1024;

/// A caller's own check of the final value, run after JSON Schema validation.
pub trait ApplicationValidator: Send + Sync {
    /// `Err(reason)` rejects the value; the reason must not contain the value itself.
    fn validate(&self, value: &Value) -> Result<(), String>;
}

/// One delegation request.
#[derive(Clone)]
pub struct DelegationRequest {
    /// Profile name (`codex`, `claude-code`).
    pub agent: String,
    /// The rendered prompt (written to stdin only).
    pub prompt: String,
    /// The answer's JSON Schema.
    pub schema: Value,
    /// The requested model; `None` falls back to `[agent.<name>] model`.
    pub model: Option<String>,
    /// Optional reasoning effort.
    pub effort: Option<String>,
    /// Deadline.
    pub timeout: Duration,
    /// Prompt limit in bytes.
    pub max_input_bytes: usize,
    /// Output limit in bytes.
    pub max_output_bytes: usize,
    /// TERM-to-KILL grace period.
    pub grace: Duration,
    /// Extra `KEY=VALUE` config overrides (after the config's).
    pub config_overrides: Vec<String>,
    /// Extra environment variable names admitted into the child (after the config's).
    pub admitted_env: Vec<String>,
    /// Caller metadata echoed in the response.
    pub task: Option<Value>,
    /// Where the temporary workspace is created (default: `$TMPDIR`, else `/tmp`).
    pub temp_root: Option<PathBuf>,
    /// The application validator hook.
    pub validator: Option<Arc<dyn ApplicationValidator>>,
    /// The runtime the CLI runs below as its guard (`intendant-runtime --guard`), so it and
    /// what it started end if the delegating process dies (`None`: the CLI itself, which then
    /// runs on should this process be killed).
    pub guard: Option<PathBuf>,
}

impl std::fmt::Debug for DelegationRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelegationRequest")
            .field("agent", &self.agent)
            .field("prompt_bytes", &self.prompt.len())
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl DelegationRequest {
    /// A request with default limits.
    pub fn new(agent: &str, prompt: String, schema: Value) -> DelegationRequest {
        DelegationRequest {
            agent: agent.to_owned(),
            prompt,
            schema,
            model: None,
            effort: None,
            timeout: DEFAULT_TIMEOUT,
            max_input_bytes: DEFAULT_MAX_INPUT_BYTES,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            grace: DEFAULT_GRACE,
            config_overrides: Vec::new(),
            admitted_env: Vec::new(),
            task: None,
            temp_root: None,
            validator: None,
            guard: None,
        }
    }
}

/// Identity of the CLI that answered (serialized as the contract's `runtime`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CliInfo {
    /// Runtime kind (`codex-cli`).
    pub kind: String,
    /// Version read from the executable.
    pub version: String,
    /// Protocol spoken (`exec-jsonl`).
    pub protocol: String,
}

/// Money spent, stated truthfully: subscription use is never shown as an amount.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Monetary {
    /// Counted against subscription limits; no per-request amount exists.
    SubscriptionLimits,
    /// Metered, and the CLI reported the cost.
    Reported {
        /// Cost in USD as reported by the CLI.
        amount_usd: f64,
    },
    /// Metered, but the CLI does not report cost.
    Unreported,
    /// A custom endpoint; its billing is unknown to Intendant.
    EndpointDefined,
}

/// The successful result of one delegation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CliResponse {
    /// The validated final value.
    pub value: Value,
    /// Lifecycle event types seen, in first-seen order.
    pub events: Vec<String>,
    /// Attempts made (as far as the CLI reports).
    pub attempts: u32,
    /// Token usage.
    pub usage: TokenUsage,
    /// The model requested.
    pub requested_model: String,
    /// The model that answered.
    pub effective_model: String,
    /// `reported` when the CLI named the model; `pinned` when it cannot, and the model was fixed
    /// by argv with user configuration ignored.
    pub effective_model_source: String,
    /// The runtime.
    pub runtime: CliInfo,
    /// Auth class used.
    pub auth_class: AuthClass,
    /// Billing class.
    pub billing_class: BillingClass,
    /// Monetary state.
    pub monetary: Monetary,
    /// Wall-clock duration in milliseconds.
    pub duration_ms: u64,
    /// The request's task metadata, echoed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<Value>,
}

/// Whether `effective` is `requested`, allowing only a dated snapshot suffix
/// (`claude-x-4-5` answered by `claude-x-4-5-20250929`).
pub fn same_model(requested: &str, effective: &str) -> bool {
    if requested == effective {
        return true;
    }
    effective
        .strip_prefix(requested)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|suffix| {
            let digits: String = suffix.chars().filter(|c| *c != '-').collect();
            digits.len() == 8 && digits.chars().all(|c| c.is_ascii_digit())
        })
}

/// Runs one delegation. `cancel` resolving stops it with `runtime_cancelled`.
pub async fn delegate(
    req: &DelegationRequest,
    config: &AgentConfig,
    host: &HostEnv,
    cancel: impl Future<Output = ()>,
) -> Result<CliResponse, CliError> {
    let started = Instant::now();
    let profile = crate::profiles::find(&req.agent).ok_or_else(|| {
        CliError::new(
            ErrorCode::CliUnsupportedCapability,
            format!("no agent profile is called {:?}", req.agent),
        )
        .with_detail("known", crate::profiles::names().join(","))
    })?;
    let mut secrets: Vec<String> = Vec::new();
    let result = run_delegation(profile, req, config, host, cancel, started, &mut secrets).await;
    result.map_err(|e| e.redacting(&secrets))
}

/// Preflight, launch, judge: the three stages of one delegation, in the order of the checks.
async fn run_delegation(
    profile: &'static AgentProfile,
    req: &DelegationRequest,
    config: &AgentConfig,
    host: &HostEnv,
    cancel: impl Future<Output = ()>,
    started: Instant,
    secrets: &mut Vec<String>,
) -> Result<CliResponse, CliError> {
    let (prepared, workspace) = preflight(profile, req, config, host).await?;
    let transcript = launch(profile, req, host, &prepared, workspace, cancel, secrets).await?;
    judge(profile, req, prepared, &transcript, started)
}

/// What the preflight established: the CLI's delegation hooks and everything checked about it.
struct Prepared {
    protocol: &'static str,
    build_argv: fn(&Invocation) -> Vec<OsString>,
    interpret: fn(&Transcript, &[OverloadSign]) -> Result<TurnOutcome, CliError>,
    model: String,
    overrides: Vec<String>,
    admitted: Vec<String>,
    exe: PathBuf,
    version: Version,
    auth: AuthCandidate,
    schema: AnswerSchema,
}

/// Capability, model, input size, executable, version, auth, schema, workspace: everything that
/// can refuse the request before the CLI runs.
async fn preflight(
    profile: &'static AgentProfile,
    req: &DelegationRequest,
    config: &AgentConfig,
    host: &HostEnv,
) -> Result<(Prepared, Workspace), CliError> {
    let (protocol, build_argv, interpret) = match profile.delegation {
        Delegation::Supported {
            protocol,
            build_argv,
            interpret,
        } => (protocol, build_argv, interpret),
        Delegation::Unsupported { reason } => {
            return Err(CliError::new(
                ErrorCode::CliUnsupportedCapability,
                format!("{} cannot delegate: {reason}", profile.name),
            )
            .with_recovery("intendant delegate --agent codex|claude-code ..."));
        }
    };
    let model = req
        .model
        .clone()
        .or_else(|| config.model.clone())
        .map(|m| m.trim().to_owned())
        .filter(|m| !m.is_empty())
        .ok_or_else(|| {
            CliError::new(
                ErrorCode::CliModelRequired,
                format!("{} needs an explicit model", profile.name),
            )
            .with_recovery(format!(
                "pass --model MODEL or set [agent.{}] model in intendant.toml",
                profile.name
            ))
        })?;
    check_effort(profile, req.effort.as_deref())?;
    if req.prompt.len() > req.max_input_bytes {
        return Err(CliError::new(
            ErrorCode::CliInputTooLarge,
            "the prompt exceeds the input limit",
        )
        .with_detail("max_input_bytes", req.max_input_bytes as u64));
    }
    let mut overrides = config.config.clone();
    overrides.extend(req.config_overrides.iter().cloned());
    check_overrides(profile, &overrides)?;
    let mut admitted = config.env.clone();
    admitted.extend(req.admitted_env.iter().cloned());
    if let Some(bad) = admitted.iter().find(|n| !env::is_valid_env_name(n)) {
        return Err(CliError::new(
            ErrorCode::CliUnsupportedCapability,
            "an admitted environment variable name is not a plain name",
        )
        .with_detail("name", bad.clone()));
    }

    let exe = discover::find_executable(profile, config.path.as_deref(), host)?;
    let version = discover::probe_version(profile, &exe, host).await?;
    let auth = discover::choose_auth(profile, host, &overrides, &config.allowed_auth)?;

    let schema = AnswerSchema::compile(&req.schema)?;
    if schema.compact().len() > MAX_SCHEMA_BYTES {
        return Err(CliError::new(
            ErrorCode::CliInputTooLarge,
            "the schema exceeds its size limit",
        )
        .with_detail("max_schema_bytes", MAX_SCHEMA_BYTES as u64));
    }
    let temp_root = req
        .temp_root
        .clone()
        .or_else(|| {
            host.get("TMPDIR")
                .filter(|t| !t.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let workspace = Workspace::create(&temp_root, schema.compact())?;
    let prepared = Prepared {
        protocol,
        build_argv,
        interpret,
        model,
        overrides,
        admitted,
        exe,
        version,
        auth,
        schema,
    };
    Ok((prepared, workspace))
}

/// Runs the CLI in `workspace` under the supervisor and collects its transcript; a deadline, a
/// cancel or an output overflow is the error here. The workspace is gone when this returns.
async fn launch(
    profile: &'static AgentProfile,
    req: &DelegationRequest,
    host: &HostEnv,
    prepared: &Prepared,
    workspace: Workspace,
    cancel: impl Future<Output = ()>,
    secrets: &mut Vec<String>,
) -> Result<Transcript, CliError> {
    let child_env = env::child_env(
        host,
        &profile.env,
        &prepared.auth.admit_env,
        &prepared.admitted,
    );
    secrets.extend(child_env.secrets.iter().cloned());
    let invocation = Invocation {
        model: prepared.model.clone(),
        effort: req.effort.clone(),
        schema_json: prepared.schema.compact().to_owned(),
        schema_file: workspace.schema_file.clone(),
        result_file: workspace.result_file.clone(),
        workdir: workspace.workdir.clone(),
        config_overrides: prepared.overrides.clone(),
    };
    let spec = ChildSpec {
        program: prepared.exe.clone(),
        args: (prepared.build_argv)(&invocation),
        env: child_env.os_vars(),
        cwd: workspace.workdir.clone(),
        stdin: req.prompt.as_bytes().to_vec(),
        passed: None,
    };
    let limits = Limits {
        max_stdout: req.max_output_bytes,
        stdout_overflow: Overflow::Stop,
        max_stderr: STDERR_HEAD_BYTES,
        stderr_tail: 0,
        deadline: Some(req.timeout),
        grace: req.grace,
        drain: req.grace,
    };
    let spec = match &req.guard {
        Some(runtime) => child::guarded(spec, runtime),
        None => Ok(spec),
    };
    let finished = match spec {
        Ok(spec) => child::run(spec, limits, cancel).await,
        Err(e) => Err(e),
    }
    .map_err(|e| discover::spawn_error(profile, &prepared.exe, &e))?;
    let exit_code = match finished.ending {
        Ending::Exited(code) => code,
        Ending::TimedOut => {
            return Err(CliError::new(
                ErrorCode::CliTimeout,
                format!(
                    "{} did not finish in time; its process group was stopped",
                    profile.name
                ),
            )
            .with_detail("timeout_ms", req.timeout.as_millis() as u64));
        }
        Ending::Cancelled => {
            return Err(CliError::new(
                ErrorCode::CliCancelled,
                "the delegation was cancelled; the CLI's process group was stopped",
            ));
        }
        Ending::OutputTooLarge => {
            return Err(CliError::new(
                ErrorCode::CliOutputTooLarge,
                format!("{}'s output exceeded the output limit", profile.name),
            )
            .with_detail("max_output_bytes", req.max_output_bytes as u64));
        }
    };
    Ok(Transcript {
        exit_code,
        stdout: finished.stdout.bytes,
        stderr_head: finished.stderr.bytes,
        result_file: workspace.read_result(req.max_output_bytes)?,
    })
}

/// The CLI's own success rules, the effective model, JSON Schema, the application validator,
/// then the response with its billing stated truthfully.
fn judge(
    profile: &'static AgentProfile,
    req: &DelegationRequest,
    prepared: Prepared,
    transcript: &Transcript,
    started: Instant,
) -> Result<CliResponse, CliError> {
    let outcome = (prepared.interpret)(transcript, profile.overload_signs)?;
    let model = prepared.model;
    let (effective_model, source) = match outcome.effective_model {
        Some(m) => (m, "reported"),
        None => (model.clone(), "pinned"),
    };
    if !same_model(&model, &effective_model) {
        return Err(CliError::new(
            ErrorCode::CliModelMismatch,
            "the CLI answered with a model other than the requested one",
        )
        .with_detail("requested_model", model.clone())
        .with_detail("effective_model", effective_model));
    }
    prepared.schema.check(&outcome.value)?;
    if let Some(validator) = &req.validator {
        validator.validate(&outcome.value).map_err(|reason| {
            CliError::new(
                ErrorCode::CliApplicationInvalid,
                "the application validator rejected the answer",
            )
            .with_detail("reason", reason)
        })?;
    }
    let billing_class = prepared.auth.class.billing();
    let monetary = match (billing_class, outcome.reported_cost_usd) {
        (BillingClass::SubscriptionLimits, _) => Monetary::SubscriptionLimits,
        (BillingClass::Metered, Some(amount_usd)) => Monetary::Reported { amount_usd },
        (BillingClass::Metered, None) => Monetary::Unreported,
        (BillingClass::EndpointDefined, _) => Monetary::EndpointDefined,
    };
    Ok(CliResponse {
        value: outcome.value,
        events: outcome.events,
        attempts: outcome.attempts,
        usage: outcome.usage,
        requested_model: model,
        effective_model,
        effective_model_source: source.to_owned(),
        runtime: CliInfo {
            kind: profile.runtime.to_owned(),
            version: prepared.version.to_string(),
            protocol: prepared.protocol.to_owned(),
        },
        auth_class: prepared.auth.class,
        billing_class,
        monetary,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        task: req.task.clone(),
    })
}

/// An effort is a plain word, and only for CLIs that take one.
fn check_effort(profile: &AgentProfile, effort: Option<&str>) -> Result<(), CliError> {
    let Some(level) = effort else {
        return Ok(());
    };
    let plain = !level.is_empty()
        && level.len() <= 32
        && level
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let supported = match profile.flags.effort {
        EffortSpelling::Flag(_) | EffortSpelling::ConfigKey(_) => true,
        EffortSpelling::Unsupported => false,
    };
    if plain && supported {
        return Ok(());
    }
    Err(CliError::new(
        ErrorCode::CliUnsupportedCapability,
        if supported {
            format!("the effort level for {} must be a plain word", profile.name)
        } else {
            format!("{} takes no effort level", profile.name)
        },
    ))
}

/// Config overrides are `KEY=VALUE`, only for CLIs that take them, and only set the keys the
/// profile lets them set.
pub(crate) fn check_overrides(
    profile: &AgentProfile,
    overrides: &[String],
) -> Result<(), CliError> {
    if overrides.is_empty() {
        return Ok(());
    }
    if profile.flags.config_override.is_none() {
        return Err(CliError::new(
            ErrorCode::CliUnsupportedCapability,
            format!(
                "{} takes no config overrides; admit endpoint variables with --agent-env instead",
                profile.name
            ),
        ));
    }
    for entry in overrides {
        let Some((key, _)) = entry.split_once('=').filter(|(k, _)| !k.trim().is_empty()) else {
            return Err(CliError::new(
                ErrorCode::CliUnsupportedCapability,
                "a config override is not KEY=VALUE",
            )
            .with_detail(
                "override_key",
                entry.split('=').next().unwrap_or("").to_owned(),
            ));
        };
        // Only the key is ever reported: a value may hold a secret.
        let top = key.trim().split('.').next().unwrap_or("").trim();
        if !profile.flags.config_override_keys.contains(&top) {
            return Err(CliError::new(
                ErrorCode::CliPermissionDenied,
                format!(
                    "the {} config override {:?} would change a setting the delegation pins",
                    profile.name,
                    key.trim()
                ),
            )
            .with_detail("override_key", key.trim().to_owned())
            .with_detail("allowed_keys", profile.flags.config_override_keys.join(",")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_suffix_is_the_same_model() {
        assert!(same_model("m", "m"));
        assert!(same_model("claude-x-4-5", "claude-x-4-5-20250929"));
        assert!(same_model("claude-x-4-5", "claude-x-4-5-2025-09-29"));
        assert!(!same_model("claude-x-4", "claude-x-4-5"));
        assert!(!same_model("sonnet", "claude-sonnet-4-5"));
        assert!(!same_model("gpt-a", "gpt-b"));
    }

    #[test]
    fn subscription_use_is_never_an_amount() {
        let m = serde_json::to_value(Monetary::SubscriptionLimits).unwrap();
        assert_eq!(m, serde_json::json!({"state": "subscription_limits"}));
    }
}
