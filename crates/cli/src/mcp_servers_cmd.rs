//! `intendant mcp-servers list|check`: the MCP servers a native session started here would use
//! (`[mcp_servers.NAME]`, see `intendant_core::mcp_client`), and, with `check`, each one
//! started as a session starts it (inside the sandbox) with the tools it offers.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use intendant_core::bus::EventBus;
use intendant_core::config::ProjectConfig;
use intendant_core::dotenv::{Endpoints, EnvLookup, config_dir};
use intendant_core::mcp_client::{McpHub, McpPlan, McpServer, Transport, config};
use intendant_core::prompts::detect_project_root;
use intendant_core::runner::own_runtime;
use intendant_core::runtime_env::{ReadRequest, ReadScope, inherited_env, read_masks};
use intendant_core::sandboxed::{SandboxWalls, Walls};
use intendant_core::session_log::intendant_home;
use intendant_core::trust::{TrustStore, review_project};

/// Flags of `intendant mcp-servers`.
#[derive(Debug, Args)]
pub struct McpServersArgs {
    #[command(subcommand)]
    command: McpServersCommand,
}

#[derive(Debug, Subcommand)]
enum McpServersCommand {
    /// Every configured server: where it is configured, how it is reached, whether it runs.
    List,
    /// Starts each enabled server as a session would (inside the sandbox), lists its tools,
    /// and stops it; exits 1 when one fails.
    Check,
}

/// Runs `intendant mcp-servers`: an invalid entry is an error (exit 2), as it is for a session.
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub fn run(args: McpServersArgs) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let project_root = detect_project_root(&cwd);
    let config_dir = config_dir();
    let home = intendant_home()?;
    let project = ProjectConfig::load(&project_root)?;
    let env = EnvLookup::load(&cwd, config_dir.as_deref());
    let review = review_project(&TrustStore::new(&home), &project_root, &env, Endpoints::All)?;
    let untrusted = review
        .untrusted
        .iter()
        .any(|u| u.settings.iter().any(|s| s.starts_with("[mcp_servers.")));
    let user = config::user_entries(config_dir.as_deref())?;
    let servers = match config::servers(&project.mcp_servers, &user) {
        Ok(servers) => servers,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(2));
        }
    };
    if servers.is_empty() {
        println!(
            "no MCP servers: none in {} ([mcp_servers.NAME]) or in {}",
            project_root.join("intendant.toml").display(),
            config_dir
                .map(|d| d.join(config::USER_FILE).display().to_string())
                .unwrap_or_else(|| config::USER_FILE.to_owned())
        );
        return Ok(ExitCode::SUCCESS);
    }
    match args.command {
        McpServersCommand::List => {
            for server in &servers {
                println!("{}", describe(server, untrusted));
            }
            Ok(ExitCode::SUCCESS)
        }
        McpServersCommand::Check => {
            if untrusted {
                eprintln!(
                    "the project's [mcp_servers] are not trusted yet: review {}, then run \
                     `intendant trust`",
                    project_root.join("intendant.toml").display()
                );
                return Ok(ExitCode::from(2));
            }
            check(
                servers,
                &project,
                &project_root,
                &home,
                config_dir.as_deref(),
            )
        }
    }
}

/// One line about `server`.
fn describe(server: &McpServer, untrusted: bool) -> String {
    let how = match &server.transport {
        Transport::Stdio {
            command,
            args,
            sandbox,
            ..
        } => {
            let mut line = std::iter::once(command.as_str())
                .chain(args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" ");
            if !*sandbox {
                line.push_str(" (sandbox = false)");
            }
            format!("stdio: {line}")
        }
        Transport::Http { url, .. } => format!("http: {url}"),
    };
    let state = match (
        server.enabled,
        untrusted && server.source == config::Source::Project,
    ) {
        (false, _) => "disabled",
        (true, true) => "not trusted yet",
        (true, false) => "enabled",
    };
    format!("{} ({}, {state}): {how}", server.name, server.source.name())
}

/// Starts `servers` in the sandbox a session of this project would have (without its own
/// network or cgroup), prints each one's tools, stops them.
fn check(
    servers: Vec<McpServer>,
    project: &ProjectConfig,
    project_root: &std::path::Path,
    home: &std::path::Path,
    config_dir: Option<&std::path::Path>,
) -> anyhow::Result<ExitCode> {
    let scratch = std::env::temp_dir().join(format!("intendant-mcp-check-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).context("cannot make a scratch directory")?;
    let result = check_in(servers, project, project_root, home, config_dir, &scratch);
    // Written by the servers checked: removed however deep they made it.
    let _ = intendant_core::remove_tree::remove_tree(&scratch);
    result
}

/// [`check`] with `scratch` as the servers' scratch root.
#[allow(clippy::print_stdout)]
fn check_in(
    servers: Vec<McpServer>,
    project: &ProjectConfig,
    project_root: &std::path::Path,
    home: &std::path::Path,
    config_dir: Option<&std::path::Path>,
    scratch: &std::path::Path,
) -> anyhow::Result<ExitCode> {
    let runtime_path = own_runtime()?;
    let sandbox = intendant_core::runtime_env::sandbox_enabled(None, &project.sandbox).then(|| {
        let write_paths = vec![project_root.to_path_buf(), scratch.to_path_buf()];
        let (masks, _) = read_masks(
            &ReadScope::from_env(home, config_dir),
            &ReadRequest {
                project_root,
                write_paths: &write_paths,
                env_files: &[],
                deny_read: &project.sandbox.deny_read,
                allow_read: &project.sandbox.allow_read,
            },
        );
        SandboxWalls {
            command_write_paths: write_paths,
            read_masks: masks,
            require_full: project.sandbox.require_full,
        }
    });
    let walls = Walls {
        runtime_path,
        env: inherited_env(std::env::vars_os()),
        sandbox,
        netns: None,
        placement: None,
    };
    let plan = McpPlan {
        servers: servers.into_iter().filter(|s| s.enabled).collect(),
        process_env: Arc::new(
            intendant_core::secrets::vars()
                .into_iter()
                .collect::<BTreeMap<String, String>>(),
        ),
    };
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let reports = runtime.block_on(async {
        let hub = McpHub::start(
            plan,
            walls,
            project_root.to_path_buf(),
            scratch.to_path_buf(),
            EventBus::new(),
        )
        .await;
        let reports = hub.report();
        hub.shutdown().await;
        reports
    });
    let mut failed = false;
    for report in reports {
        match report.state {
            Ok(tools) => {
                println!(
                    "{} ({}): ready, {} tools",
                    report.name,
                    report.source.name(),
                    tools.len()
                );
                for tool in tools {
                    let first_line = tool.description.lines().next().unwrap_or_default();
                    println!("    {}: {first_line}", tool.model_name);
                }
            }
            Err(reason) => {
                failed = true;
                println!(
                    "{} ({}): failed: {reason}",
                    report.name,
                    report.source.name()
                );
            }
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
