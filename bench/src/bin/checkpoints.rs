//! `checkpoints`: what the checkpoint store costs, beside plain git doing the same work on a
//! copy of the same tree, in the same run.
//!
//! - `checkpoint_turn_small`: the per-turn overhead a session pays on a small project (200
//!   files): the checkpoint before and the one after a batch that changed one file, median of
//!   101; baseline one `git add -A && git write-tree` on a copy with a warm index. Goal: under
//!   5 ms.
//! - On a generated tree of `INTENDANT_BENCH_FILES` files (default 100,000) in a git
//!   repository: `checkpoint_first` (the first checkpoint, cold) against `git add -A && git
//!   write-tree` cold on the copy (goal <= 1.2x); `checkpoint_after_one` (a checkpoint after one
//!   file changed) against the same git commands with a warm index (goal <= 1.0x);
//!   `checkpoint_rewind` (a rewind of a turn that changed 1,000 files) against `git checkout
//!   -- .` of the same change (goal <= 1.2x); `checkpoint_storage` (what ten turns of one
//!   changed file each add to the store) against the tree's size (goal < 1%). Dirty pages are
//!   written back (`sync`) before each cold step and each rewind, on both sides, so neither pays
//!   for the other's writeback.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use intendant_bench::report::{Better, Figure};
use intendant_core::checkpoint::{CheckpointConfig, RewindRequest, SessionCheckpoints};

const SMALL_FILES: usize = 200;
const SMALL_ROUNDS: usize = 101;
const FILES_ENV: &str = "INTENDANT_BENCH_FILES";
const REWOUND_FILES: usize = 1000;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Writes `count` files of about 1 KiB under `root`, 100 per directory.
fn generate(root: &Path, count: usize) -> Result<u64> {
    let mut bytes = 0u64;
    for i in 0..count {
        let dir = root.join(format!("d{:04}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        let body = format!("file {i}\n{}\n", "x".repeat(1000));
        bytes += body.len() as u64;
        std::fs::write(dir.join(format!("f{i}.txt")), body)?;
    }
    Ok(bytes)
}

fn file(root: &Path, i: usize) -> std::path::PathBuf {
    root.join(format!("d{:04}", i / 100))
        .join(format!("f{i}.txt"))
}

/// Runs plain git in `dir` (no user configuration), timed.
fn git(dir: &Path, args: &[&str]) -> Result<Duration> {
    let start = Instant::now();
    // No automatic `gc` or maintenance: the copy's commit would start one in the background
    // (100,000 loose objects), and it would take the CPU of the steps measured after it.
    let out = Command::new("git")
        .args(["-c", "gc.auto=0", "-c", "maintenance.auto=false"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@b")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@b")
        .output()?;
    if !out.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(start.elapsed())
}

/// Writes every dirty page back (`sync`), so that a measured step does not pay for the writeback
/// of what was written before it (the generated trees, the other side's objects).
fn settle() -> Result<()> {
    let status = Command::new("sync").status()?;
    if !status.success() {
        bail!("sync failed");
    }
    Ok(())
}

fn add_and_write_tree(dir: &Path) -> Result<Duration> {
    Ok(git(dir, &["add", "-A"])? + git(dir, &["write-tree"])?)
}

fn du(path: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn report(figure: &Figure<'_>) -> Result<()> {
    let ratio = figure.value / figure.baseline_value;
    println!(
        "  {:<22} {:>10.3} {unit} vs {:>10.3} {unit} ({}) = {ratio:.3}x",
        figure.row,
        figure.value,
        figure.baseline_value,
        figure.baseline,
        unit = figure.unit
    );
    intendant_bench::report::record(figure)?;
    Ok(())
}

async fn small(work: &Path) -> Result<()> {
    let home = work.join("home-small");
    let project = work.join("small");
    let copy = work.join("small-copy");
    for dir in [&project, &copy] {
        std::fs::create_dir_all(dir)?;
        generate(dir, SMALL_FILES)?;
        git(dir, &["init", "-q"])?;
    }
    let config = CheckpointConfig::default();
    let cp = SessionCheckpoints::open(&home, &project, "bench-small", &config).await?;
    cp.before(0, None).await?;
    add_and_write_tree(&copy)?;
    let mut ours = Vec::with_capacity(SMALL_ROUNDS);
    let mut theirs = Vec::with_capacity(SMALL_ROUNDS);
    for round in 1..=SMALL_ROUNDS {
        let turn = u32::try_from(round)?;
        let start = Instant::now();
        cp.before(turn, None).await?;
        let before = start.elapsed();
        std::fs::write(
            file(&project, round % SMALL_FILES),
            format!("turn {round}\n"),
        )?;
        let start = Instant::now();
        cp.after(turn).await?;
        ours.push(before + start.elapsed());
        std::fs::write(file(&copy, round % SMALL_FILES), format!("turn {round}\n"))?;
        theirs.push(add_and_write_tree(&copy)?);
    }
    report(&Figure {
        row: "checkpoint_turn_small",
        measured: "checkpoints before and after a batch changing 1 of 200 files",
        value: ms(median(&mut ours)),
        baseline: "git add -A && git write-tree, warm",
        baseline_value: ms(median(&mut theirs)),
        unit: "ms",
        better: Better::Lower,
        goal: None,
        limit: Some(5.0),
    })
}

async fn large(work: &Path, files: usize) -> Result<()> {
    let home = work.join("home-large");
    let project = work.join("large");
    let copy = work.join("large-copy");
    let mut tree_bytes = 0;
    for dir in [&project, &copy] {
        std::fs::create_dir_all(dir)?;
        tree_bytes = generate(dir, files)?;
        git(dir, &["init", "-q"])?;
    }
    let config = CheckpointConfig::default();
    let cp = SessionCheckpoints::open(&home, &project, "bench-large", &config).await?;
    settle()?;
    let start = Instant::now();
    cp.before(1, None).await?;
    let first = start.elapsed();
    settle()?;
    let cold = add_and_write_tree(&copy)?;
    report(&Figure {
        row: "checkpoint_first",
        measured: &format!("first checkpoint of {files} files"),
        value: ms(first),
        baseline: "git add -A && git write-tree, cold",
        baseline_value: ms(cold),
        unit: "ms",
        better: Better::Lower,
        goal: Some(1.2),
        limit: None,
    })?;

    let store = cp.store().dir().to_path_buf();
    let stored_before = du(&store.join("git"));
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for turn in 0..10 {
        std::fs::write(file(&project, turn * 7), format!("turn {turn}\n"))?;
        let start = Instant::now();
        cp.after(1).await?;
        ours.push(start.elapsed());
        std::fs::write(file(&copy, turn * 7), format!("turn {turn}\n"))?;
        theirs.push(add_and_write_tree(&copy)?);
    }
    report(&Figure {
        row: "checkpoint_after_one",
        measured: &format!("checkpoint after 1 of {files} files changed (median of 10)"),
        value: ms(median(&mut ours)),
        baseline: "git add -A && git write-tree, warm",
        baseline_value: ms(median(&mut theirs)),
        unit: "ms",
        better: Better::Lower,
        goal: Some(1.0),
        limit: None,
    })?;
    let added = du(&store.join("git")).saturating_sub(stored_before);
    report(&Figure {
        row: "checkpoint_storage",
        measured: "store growth over ten turns of one changed file",
        value: added as f64 / 1024.0,
        baseline: "the tree's size",
        baseline_value: tree_bytes as f64 / 1024.0,
        unit: "KiB",
        better: Better::Lower,
        goal: Some(0.01),
        limit: None,
    })?;

    // A turn that changes 1,000 files, rewound; the copy commits, changes the same files and
    // checks them out again.
    cp.before(2, None).await?;
    git(&copy, &["commit", "-qm", "base"])?;
    for i in 0..REWOUND_FILES {
        let changed = format!("changed {i}\n");
        std::fs::write(file(&project, i * (files / REWOUND_FILES)), &changed)?;
        std::fs::write(file(&copy, i * (files / REWOUND_FILES)), &changed)?;
    }
    cp.after(2).await?;
    settle()?;
    let start = Instant::now();
    let outcome = cp
        .rewind(RewindRequest {
            turn: 2,
            code: true,
            conversation: false,
            force: false,
            conversation_items_now: 0,
        })
        .await?;
    let rewind = start.elapsed();
    if outcome.report.written.len() != REWOUND_FILES {
        bail!(
            "the rewind wrote {} files, not {REWOUND_FILES}",
            outcome.report.written.len()
        );
    }
    settle()?;
    let checkout = git(&copy, &["checkout", "--", "."])?;
    report(&Figure {
        row: "checkpoint_rewind",
        measured: &format!("rewind of a turn that changed {REWOUND_FILES} files"),
        value: ms(rewind),
        baseline: "git checkout -- . of the same change",
        baseline_value: ms(checkout),
        unit: "ms",
        better: Better::Lower,
        goal: Some(1.2),
        limit: None,
    })
}

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let files = match std::env::var(FILES_ENV) {
        Ok(v) => v.parse::<usize>().context(FILES_ENV)?,
        Err(_) => 100_000,
    };
    if files < REWOUND_FILES * 2 {
        bail!("{FILES_ENV} must be at least {}", REWOUND_FILES * 2);
    }
    let work = intendant_bench::work_dir()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    println!("checkpoints: the store beside plain git on a copy of the same tree");
    rt.block_on(small(work.path()))?;
    rt.block_on(large(work.path(), files))?;
    Ok(())
}
