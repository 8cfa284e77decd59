//! `runtime_invocation`: the whole cost of one `intendant-runtime` process, start to exit, as a
//! session turn pays it: `N` separate invocations, each a batch of one `execAsAgent` `true`,
//! against `N` plain `bash -c true` spawns, in the same run. Reported, no goal: it is the fixed
//! cost every agent turn pays (the daemon benchmark's 1000 turns are 1000 runtimes).
//!
//! The runtime is started as the controller starts it (`core::runner`): sandboxed with both
//! layers required, in a project root that is a git repository, with the controller's default
//! write set (project root, `/tmp`, the artifacts dir, `~/.cargo`, `~/.rustup`, `~/.cache`),
//! so the guards' walk of those roots and the mounts over them are part of what is measured.
//!
//! CPU is the children's user + system time (`getrusage(RUSAGE_CHILDREN)`) over each side's
//! `N` runs; wall is the side's elapsed time. The sides alternate in `ROUNDS` rounds of `N`
//! and the fastest round of each is compared. `runtime_invocation [N]` (default 200).

use anyhow::{Context, Result};
use intendant_bench::report::{Better, Figure};
use intendant_bench::runtime_cost::{Cost, Project, measure};

const DEFAULT_INVOCATIONS: usize = 200;
const ROUNDS: usize = 3;

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let n = match std::env::args().nth(1) {
        Some(a) => a
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .with_context(|| format!("invocations must be a positive number, got {a:?}"))?,
        None => DEFAULT_INVOCATIONS,
    };
    let runtime = intendant_bench::sibling_binary("intendant-runtime")?;
    let work = intendant_bench::work_dir()?;
    let mut project = Project::create(work.path())?;

    let mut ours = Cost::WORST;
    let mut plain = Cost::WORST;
    for _ in 0..ROUNDS {
        plain = plain.best(measure(n, plain_spawn)?);
        ours = ours.best(measure(n, || project.invoke(&runtime))?);
    }
    let per = |d: std::time::Duration| d.as_secs_f64() * 1000.0 / n as f64;
    println!("runtime_invocation: {n} runtimes of one `true` each, best of {ROUNDS} rounds");
    println!(
        "  intendant-runtime, per invocation : {:>7.3} ms wall, {:>7.3} ms CPU",
        per(ours.wall),
        per(ours.cpu)
    );
    println!(
        "  bash -c true, per spawn           : {:>7.3} ms wall, {:>7.3} ms CPU",
        per(plain.wall),
        per(plain.cpu)
    );
    println!(
        "  ratio: wall {:.2}x, CPU {:.2}x",
        ours.wall.as_secs_f64() / plain.wall.as_secs_f64(),
        ours.cpu.as_secs_f64() / plain.cpu.as_secs_f64()
    );
    for (row, measured, value, baseline) in [
        (
            "runtime_invocation_cpu",
            "CPU of one sandboxed runtime (one `true`, both layers, controller's write set)",
            per(ours.cpu),
            per(plain.cpu),
        ),
        (
            "runtime_invocation_wall",
            "wall of one sandboxed runtime (one `true`, both layers, controller's write set)",
            per(ours.wall),
            per(plain.wall),
        ),
    ] {
        intendant_bench::report::record(&Figure {
            row,
            measured,
            value,
            baseline: "one `bash -c true` spawn",
            baseline_value: baseline,
            unit: "ms",
            better: Better::Lower,
            goal: None,
            limit: None,
        })?;
    }
    Ok(())
}

fn plain_spawn() -> Result<()> {
    Ok(intendant_bench::bash_true()?)
}
