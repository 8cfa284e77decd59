//! Machine-readable results: each benchmark binary, besides its human report on stdout, appends
//! one JSON line per figure to the file named by `INTENDANT_BENCH_REPORT` (when set), which
//! `bench/run.sh` aggregates over its runs into one table (`bench/report.py`).

use std::io::Write;

/// Variable naming the file the figures are appended to.
pub const REPORT_ENV: &str = "INTENDANT_BENCH_REPORT";

/// Which way a figure's ratio to its baseline is good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Smaller is better (times, memory): the goal is a ratio below a bound.
    Lower,
    /// Larger is better (throughput): the goal is a ratio above a bound.
    Higher,
}

/// One measured figure beside its baseline from the same run.
#[derive(Debug, Clone)]
pub struct Figure<'a> {
    /// Stable key of the table row, e.g. `runtime_batch`.
    pub row: &'a str,
    /// What was measured, e.g. `200 execAsAgent true in one batch`.
    pub measured: &'a str,
    /// The measured value.
    pub value: f64,
    /// What the baseline is.
    pub baseline: &'a str,
    /// The baseline's value.
    pub baseline_value: f64,
    /// Unit of both values (`ms`, `KiB`, `MB/s`).
    pub unit: &'a str,
    /// Which way is good.
    pub better: Better,
    /// The goal on the ratio (`None`: none).
    pub goal: Option<f64>,
    /// A goal on the value itself, in `unit` (`None`: none), e.g. a memory ceiling.
    pub limit: Option<f64>,
}

/// Appends `figure` to the report file, if one is named; an unwritable file is an error, so a
/// run never silently loses a figure.
pub fn record(figure: &Figure<'_>) -> std::io::Result<()> {
    let Some(path) = std::env::var_os(REPORT_ENV) else {
        return Ok(());
    };
    let line = serde_json::json!({
        "row": figure.row,
        "measured": figure.measured,
        "value": figure.value,
        "baseline": figure.baseline,
        "baseline_value": figure.baseline_value,
        "unit": figure.unit,
        "better": match figure.better { Better::Lower => "lower", Better::Higher => "higher" },
        "goal": figure.goal,
        "limit": figure.limit,
    });
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    writeln!(file, "{line}")
}

/// Appends a row that could not be measured on this machine (a peer that is not installed),
/// so the table says so instead of leaving the row out.
pub fn unavailable(row: &str, measured: &str, why: &str) -> std::io::Result<()> {
    let Some(path) = std::env::var_os(REPORT_ENV) else {
        return Ok(());
    };
    let line = serde_json::json!({"row": row, "measured": measured, "unavailable": why});
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    writeln!(file, "{line}")
}
