//! `spawn_descriptors`: what the controller's open descriptors cost each child it starts. A
//! spawn copies the spawning thread's descriptor table into the child and the child's `exec`
//! closes every copy again, and a daemon holds about a dozen descriptors for each session, idle
//! ones too (docs/daemon.md, "Descriptors"). `SPAWNS` `true`s started as the runtime is
//! (`child::spawn_lasting`: from a lasting thread with a table of its own) while this process
//! holds `EXTRA` more descriptors, against the same with none added; and the same for a child
//! started on the calling thread (`child::spawn`, as the controller starts git, hooks and
//! workers), reported beside it. The four alternate for `ROUNDS` rounds, best of each.

use std::fs::File;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use intendant_bench::report::{Better, Figure};
use intendant_core::child::{self, ChildSpec, Ending, Limits, Overflow};

const SPAWNS: usize = 200;
const ROUNDS: usize = 7;
/// The descriptors added: about what 400 sessions hold in a daemon.
const EXTRA: usize = 5_000;
/// The most a lasting spawn may cost with `EXTRA` descriptors open against none.
const GOAL: f64 = 1.1;

#[derive(Debug, Clone, Copy)]
enum Via {
    Lasting,
    CallingThread,
}

/// CPU of this process and its reaped children, user and system.
fn cpu() -> Duration {
    use intendant_bench::runtime_cost::{children_cpu, own_cpu};
    own_cpu() + children_cpu()
}

/// CPU and wall time per spawn of `SPAWNS` `true`s, one after another.
async fn round(via: Via) -> Result<(Duration, Duration)> {
    let spec = ChildSpec {
        program: "/bin/true".into(),
        args: Vec::new(),
        env: Vec::new(),
        cwd: "/".into(),
        stdin: Vec::new(),
        passed: None,
    };
    let limits = Limits {
        max_stdout: 1024,
        stdout_overflow: Overflow::Drain,
        max_stderr: 1024,
        stderr_tail: 0,
        deadline: Some(Duration::from_secs(30)),
        grace: Duration::from_millis(100),
        drain: Duration::from_millis(500),
    };
    let (cpu_before, wall_before) = (cpu(), Instant::now());
    for _ in 0..SPAWNS {
        let running = match via {
            Via::Lasting => child::spawn_lasting(spec.clone(), limits, None).await?,
            Via::CallingThread => child::spawn(spec.clone(), limits)?,
        };
        let report = running.finish(std::future::pending()).await?;
        if report.ending != Ending::Exited(Some(0)) {
            bail!("`true` ended {:?}", report.ending);
        }
    }
    let per = |d: Duration| d / SPAWNS as u32;
    Ok((per(cpu() - cpu_before), per(wall_before.elapsed())))
}

/// Raises the soft descriptor limit to the hard one, as `serve` does; an error when `EXTRA` do
/// not fit.
fn raise_limit() -> Result<()> {
    match intendant_server::limits::raise_fd_limit() {
        Some(limit) if limit < (EXTRA + 100) as u64 => {
            bail!("the descriptor limit ({limit}) is below the {EXTRA} this benchmark opens")
        }
        _ => Ok(()),
    }
}

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    raise_limit()?;
    let runtime = intendant_bench::runtime()?;
    runtime.block_on(async {
        // (the way, with the extra descriptors) -> best CPU, best wall.
        let cases = [
            (Via::Lasting, false),
            (Via::Lasting, true),
            (Via::CallingThread, false),
            (Via::CallingThread, true),
        ];
        let mut best = [(Duration::MAX, Duration::MAX); 4];
        for _ in 0..ROUNDS {
            for (i, (via, extra)) in cases.iter().enumerate() {
                let held: Vec<File> = if *extra {
                    (0..EXTRA)
                        .map(|_| File::open("/dev/null"))
                        .collect::<std::io::Result<_>>()?
                } else {
                    Vec::new()
                };
                let (cpu, wall) = round(*via).await?;
                drop(held);
                best[i] = (best[i].0.min(cpu), best[i].1.min(wall));
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!("spawn_descriptors: {SPAWNS} `true`s, best of {ROUNDS} rounds, per spawn");
        for ((via, extra), (cpu, wall)) in cases.iter().zip(best) {
            let extra = if *extra { EXTRA } else { 0 };
            println!(
                "  {via:?}, {extra:>5} more descriptors: CPU {:.3} ms, wall {:.3} ms",
                ms(cpu),
                ms(wall)
            );
        }
        let ratio =
            |more: usize, none: usize| best[more].0.as_secs_f64() / best[none].0.as_secs_f64();
        println!("  lasting thread: {:.2}x (goal <= {GOAL}x)", ratio(1, 0));
        println!("  calling thread: {:.2}x", ratio(3, 2));
        for (row, measured, more, none, goal) in [
            (
                "spawn_descriptors",
                "CPU of a spawn as the runtime's, 5,000 more descriptors open",
                1,
                0,
                Some(GOAL),
            ),
            (
                "spawn_descriptors_calling_thread",
                "CPU of a spawn on the calling thread, 5,000 more descriptors open",
                3,
                2,
                None,
            ),
        ] {
            intendant_bench::report::record(&Figure {
                row,
                measured,
                value: ms(best[more].0),
                baseline: "the same with none added",
                baseline_value: ms(best[none].0),
                unit: "ms",
                better: Better::Lower,
                goal,
                limit: None,
            })?;
        }
        Ok(())
    })
}
