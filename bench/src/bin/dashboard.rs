//! `dashboard`: the web dashboard in Debian's chromium against the built `intendant serve --web`
//! with the scripted model, each figure beside a bare SSE client reading the same events in the
//! same run. Budget: first render of a 1,000-event session under 300 ms, first load under
//! 200 KB.
//!
//! The browser side is `crates/server/web-tests/dashboard.bench.mjs` (playwright-core, which
//! says how each sample is taken); this binary finds node, chromium and playwright-core, runs
//! it, and turns its raw samples into figures. Without one of them it records `unavailable`
//! rows and exits 0.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use intendant_bench::report::{self, Better, Figure};
use serde_json::Value;

/// The rows this benchmark records, with what each measures.
const ROWS: [(&str, &str); 4] = [
    (
        "dashboard_latency_p50",
        "bus to DOM, 20 sessions streaming (p50)",
    ),
    (
        "dashboard_latency_p99",
        "bus to DOM, 20 sessions streaming (p99)",
    ),
    (
        "dashboard_first_render",
        "first render of a 1,000-event session",
    ),
    ("dashboard_first_load", "bytes the first load fetches"),
];

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let web_tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/server/web-tests");
    let chromium = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    let node = intendant_testkit::clis::node24();
    let missing = if !chromium.is_file() {
        Some("chromium not installed (apt-get install chromium)")
    } else if node.is_none() {
        Some("Node 24 not installed (scripts/install-clis.sh)")
    } else if !web_tests
        .join("node_modules/playwright-core/package.json")
        .is_file()
    {
        Some("playwright-core not installed (npm ci in crates/server/web-tests)")
    } else {
        None
    };
    let (Some(node), None) = (node, missing) else {
        let why = missing.unwrap_or("node not found");
        println!("dashboard: {why}");
        for (row, measured) in ROWS {
            report::unavailable(row, measured, why)?;
        }
        return Ok(());
    };
    let intendant = intendant_bench::sibling_binary("intendant")?;
    intendant_bench::sibling_binary("intendant-runtime")?;
    let out = Command::new(node)
        .arg("dashboard.bench.mjs")
        .current_dir(&web_tests)
        .env("INTENDANT_BIN", &intendant)
        .env("CHROMIUM", &chromium)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .context("running node")?;
    if !out.status.success() {
        bail!("dashboard.bench.mjs failed: {}", out.status);
    }
    let stdout = String::from_utf8(out.stdout)?;
    let samples: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .context("dashboard.bench.mjs printed no samples")?;

    let latency = &samples["latency"];
    let page = numbers(&latency["page_ms"])?;
    let bare = numbers(&latency["sse_ms"])?;
    println!(
        "dashboard: {} events of {} watched tabs, {} sessions streaming",
        page.len(),
        latency["watched"],
        latency["sessions"]
    );
    for (row, p) in [
        ("dashboard_latency_p50", 0.50),
        ("dashboard_latency_p99", 0.99),
    ] {
        let (ours, theirs) = (percentile(&page, p), percentile(&bare, p));
        println!(
            "  {row}: page {ours:.1} ms, bare SSE client {theirs:.1} ms ({:.2}x)",
            ours / theirs
        );
        report::record(&Figure {
            row,
            measured: &format!(
                "bus (envelope ts) to the transcript line in the DOM, {} sessions streaming, p{}",
                latency["sessions"],
                p * 100.0
            ),
            value: ours,
            baseline: "the same envelopes to a bare SSE client (fetch of /api/events)",
            baseline_value: theirs,
            unit: "ms",
            better: Better::Lower,
            goal: None,
            limit: None,
        })?;
    }

    let render = &samples["first_render"];
    let (ours, theirs) = (
        median(numbers(&render["page_ms"])?),
        median(numbers(&render["sse_ms"])?),
    );
    println!(
        "  dashboard_first_render: {} events, page {ours:.0} ms, bare SSE client {theirs:.0} ms \
         (median of each; budget 300 ms: {})",
        render["events"],
        if ours < 300.0 { "met" } else { "not met" }
    );
    report::record(&Figure {
        row: "dashboard_first_render",
        measured: &format!(
            "a fresh navigation to a {}-event session until its last line is in the DOM, median",
            render["events"]
        ),
        value: ours,
        baseline: "a bare SSE client reading the same events from after=0, median",
        baseline_value: theirs,
        unit: "ms",
        better: Better::Lower,
        goal: None,
        limit: Some(300.0),
    })?;

    let load = &samples["first_load"];
    let (ours, theirs) = (
        load["bytes"].as_f64().unwrap_or(0.0) / 1000.0,
        load["embedded_bytes"].as_f64().unwrap_or(0.0) / 1000.0,
    );
    println!(
        "  dashboard_first_load: {ours:.1} KB ({}), embedded assets {theirs:.1} KB (budget 200 KB: {})",
        load["files"],
        if ours < 200.0 { "met" } else { "not met" }
    );
    report::record(&Figure {
        row: "dashboard_first_load",
        measured: "bytes the first load fetches but the API (HTML, script, styles)",
        value: ours,
        baseline: "the embedded assets (index.html, app.js, app.css)",
        baseline_value: theirs,
        unit: "KB",
        better: Better::Lower,
        goal: None,
        limit: Some(200.0),
    })?;
    Ok(())
}

fn numbers(v: &Value) -> Result<Vec<f64>> {
    let list: Vec<f64> = v
        .as_array()
        .context("samples are not a list")?
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    if list.is_empty() {
        bail!("no samples");
    }
    Ok(list)
}

/// Nearest-rank percentile `p` (0..1) of `samples`.
fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn median(samples: Vec<f64>) -> f64 {
    percentile(&samples, 0.5)
}
