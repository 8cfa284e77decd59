//! `intendant-fake-model`: serve a scenario file on 127.0.0.1 over all four model wires.
//!
//! The first stdout line is `{"port":N}` (so a parent can bind port 0 and learn the port); a
//! human line goes to stderr. Runs until SIGINT / SIGTERM, then reports invariant violations on
//! stderr (exit 1 if any) and, with `--record`, writes every request as JSONL with credentials
//! masked.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use intendant_testkit::{FakeModelServer, Scenario};

/// jemalloc, as the daemon allocates: a benchmark runs this fixture on the daemon's cores, and
/// with glibc's malloc about 40% of its CPU went to allocating and freeing (a tenth to
/// `malloc_consolidate` before each request body's allocation alone).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Debug, Parser)]
#[command(
    name = "intendant-fake-model",
    about = "Serve a scripted fake model API on 127.0.0.1"
)]
struct Args {
    /// Scenario JSON file.
    #[arg(long)]
    scenario: PathBuf,
    /// Port on 127.0.0.1 (0 = any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// On shutdown, write every request received as JSONL here (credentials masked).
    #[arg(long)]
    record: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    let scenario = Scenario::load(&args.scenario)?;
    let turns = scenario.turns.len();
    let server = FakeModelServer::start_on_port(scenario, args.port).await?;
    // Listened for before the port is told: a parent may signal as soon as it has it.
    let stop = stop_signals()?;
    announce(&server, turns)?;
    stop.await;
    if let Some(path) = &args.record {
        write_record(&server, path)?;
    }
    let violations = server.invariant_violations();
    #[allow(clippy::print_stderr)]
    for violation in &violations {
        eprintln!("intendant-fake-model: violation: {violation}");
    }
    Ok(if violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[allow(clippy::print_stderr)]
fn announce(server: &FakeModelServer, turns: usize) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "{}",
        serde_json::json!({ "port": server.addr().port() })
    )?;
    stdout.flush()?;
    eprintln!(
        "intendant-fake-model: serving {turns} scripted turns on http://{} \
         (OpenAI base {}/v1, Anthropic and Gemini base {})",
        server.addr(),
        format_args!("http://{}", server.addr()),
        format_args!("http://{}", server.addr()),
    );
    Ok(())
}

/// SIGINT or SIGTERM, whichever comes first, listened for from this call on.
fn stop_signals() -> anyhow::Result<impl std::future::Future<Output = ()>> {
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

fn write_record(server: &FakeModelServer, path: &PathBuf) -> anyhow::Result<()> {
    let mut out = String::new();
    for request in server.requests() {
        out.push_str(&serde_json::to_string(&request.redacted())?);
        out.push('\n');
    }
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}
