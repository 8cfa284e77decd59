//! `daemon_restart`: what a long history costs a daemon. A state root of 2,000 ended sessions
//! whose logs hold 200 MB (50 events of 2 KB each, numbered as sessions run side by side
//! number them), beside the same sessions with only their last event logged:
//! - the daemon's start (`intendant serve` until its socket answers), with the long logs
//!   against the short ones (goal: at most 1.5x; a start that read every log to find the
//!   highest seq took 5.4-5.6x);
//! - a client replaying the whole history from seq 0: every event, in order, and the daemon's
//!   peak resident memory meanwhile against its resident memory before (goal: at most 1.5x; a
//!   replay that read every log at once held the whole history);
//! - the same sessions each ended with a 32 KiB last answer, read back from the logs after the
//!   start: the daemon's resident memory once it has them against the sessions without answers
//!   (goal: at most 2x; one holding every answer whole held 64 MB more, 4x);
//! - on that daemon, what MCP's `list_sessions` of one status asks of it (the newest 50 of
//!   `done`, every session here, and the older ones counted) against the whole listing read a
//!   page at a time and filtered, as the call once had it read (goal: at most 0.1x).
//!
//! Each start is checked: the daemon numbers on after the highest seq the logs hold. Starts are
//! timed three times each, alternating, with the file cache warm (a restart after a crash
//! finds it so); the fastest counts. `INTENDANT_BENCH_SESSIONS` changes the count.
//!
//! Build first: `cargo build --profile profiling -p intendant-cli -p intendant-runtime
//! -p intendant-testkit -p intendant-bench`, then `target/profiling/daemon_restart`.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use intendant_bench::daemon::{command, connect};
use intendant_bench::report::{Better, Figure};
use intendant_core::host::SessionHost;
use intendant_core::session_log::{EVENTS_FILE, META_FILE, SessionMeta, logs_dir};
use intendant_protocol::daemon::{SessionStatus, SessionsPage, StreamItem};
use intendant_protocol::events::{AppEvent, EndStatus, RecordedStatus, SessionLogRecord};

/// Goal: the start with the long logs over the start with the short ones.
const START_GOAL: f64 = 1.5;
/// Goal: the daemon's peak RSS while replaying the history over its RSS before.
const REPLAY_GOAL: f64 = 1.5;
/// Events per session, and the bytes of each.
const RECORDS: u64 = 50;
const EVENT_BYTES: usize = 2_000;
/// Goal: the daemon's RSS with every session's long answer read back over its RSS without.
const ANSWERS_GOAL: f64 = 2.0;
/// The bytes of each session's last answer in that state root.
const ANSWER_BYTES: usize = 32 << 10;
/// The sessions one MCP `list_sessions` call gives by default.
const LIST_LIMIT: u32 = 50;
/// Goal: one status's newest page and its older ones counted, over the whole listing read and
/// filtered (what the call once cost the daemon).
const LIST_GOAL: f64 = 0.1;
/// Times each way of listing is timed, alternating; the fastest counts.
const LIST_ROUNDS: usize = 10;
/// Longest the daemon may take to answer after it was started.
const READY_WAIT: Duration = Duration::from_secs(60);

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let sessions: u64 = match std::env::var("INTENDANT_BENCH_SESSIONS") {
        Ok(v) => v
            .parse()
            .ok()
            .filter(|n| *n >= 1)
            .with_context(|| format!("INTENDANT_BENCH_SESSIONS={v} is not a count >= 1"))?,
        Err(_) => 2_000,
    };
    let intendant = intendant_bench::sibling_binary("intendant")?;
    let work = intendant_bench::work_dir()?;
    let long = work.path().join("long");
    let short = work.path().join("short");
    let answers = work.path().join("answers");
    let highest = write_history(&long.join("state"), sessions, RECORDS, 0)?;
    write_history(&short.join("state"), sessions, 1, 0)?;
    write_history(&answers.join("state"), sessions, 1, ANSWER_BYTES)?;
    let log_bytes = dir_bytes(&logs_dir(&long.join("state")))?;

    let rt = intendant_bench::runtime()?;
    let mut best = [Duration::MAX; 2];
    for _ in 0..3 {
        for (n, root) in [&short, &long].into_iter().enumerate() {
            let mut daemon = serve(&intendant, root)?;
            let started = Instant::now();
            let checked = rt.block_on(async {
                let host = connect(&root.join("state"), "daemon_restart", READY_WAIT).await?;
                let ready = started.elapsed();
                // Numbering goes on after the highest seq the logs hold.
                let stream = host.subscribe(None, Some(highest - 1)).await?;
                if stream.history_end() != highest {
                    bail!(
                        "the daemon's history ends at {}, not at the logs' highest seq {highest}",
                        stream.history_end()
                    );
                }
                Ok(ready)
            });
            intendant_bench::end_child(&mut daemon, libc::SIGTERM);
            best[n] = best[n].min(checked?);
        }
    }
    let [short_start, long_start] = best;

    let mut daemon = serve(&intendant, &long)?;
    let replay = rt.block_on(replay(daemon.id(), &long.join("state"), highest));
    intendant_bench::end_child(&mut daemon, libc::SIGTERM);
    let (before_kib, peak_kib, replayed_in) = replay?;

    let mut settled = [0u64; 2];
    let mut listing = None;
    for (n, root) in [&short, &answers].into_iter().enumerate() {
        let mut daemon = serve(&intendant, root)?;
        let read = rt.block_on(async {
            let kib = read_back(daemon.id(), &root.join("state"), n == 1).await?;
            // The listing costs once every answer is read back, the longest texts listed.
            if n == 1 {
                listing = Some(list_one_status(&root.join("state"), sessions).await?);
            }
            Ok::<_, anyhow::Error>(kib)
        });
        intendant_bench::end_child(&mut daemon, libc::SIGTERM);
        settled[n] = read?;
    }
    let [without_kib, with_kib] = settled;
    let (page_took, whole_took) = listing.context("the listing was not measured")?;

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let start_ratio = long_start.as_secs_f64() / short_start.as_secs_f64();
    let replay_ratio = peak_kib as f64 / before_kib as f64;
    let answers_ratio = with_kib as f64 / without_kib as f64;
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    println!(
        "daemon_restart: {sessions} ended sessions, {} MB of logs ({highest} events of {EVENT_BYTES} bytes), best of 3 starts each, warm cache",
        log_bytes / 1_000_000
    );
    println!(
        "  start, long logs          : {:>8.1} ms (the same sessions with one event logged each: {:.1} ms); {start_ratio:.2}x (goal <= {START_GOAL}: {})",
        ms(long_start),
        ms(short_start),
        verdict(start_ratio <= START_GOAL)
    );
    println!(
        "  replay from seq 0         : {highest} events in order in {:.0} ms; the daemon's RSS {before_kib} KiB before, {peak_kib} KiB at the peak: {replay_ratio:.2}x (goal <= {REPLAY_GOAL}: {})",
        ms(replayed_in),
        verdict(replay_ratio <= REPLAY_GOAL)
    );
    println!(
        "  answers read back         : {} KiB answers: the daemon's RSS {with_kib} KiB once it has them, {without_kib} KiB without: {answers_ratio:.2}x (goal <= {ANSWERS_GOAL}: {})",
        ANSWER_BYTES >> 10,
        verdict(answers_ratio <= ANSWERS_GOAL)
    );
    let list_ratio = page_took.as_secs_f64() / whole_took.as_secs_f64();
    println!(
        "  {:<26}: {:.2} ms (the page and the older ones counted, what MCP's list_sessions asks); every session listed and filtered, as it once did: {:.2} ms; {list_ratio:.3}x (goal <= {LIST_GOAL}: {})",
        format!("one status, newest {LIST_LIMIT}"),
        ms(page_took),
        ms(whole_took),
        verdict(list_ratio <= LIST_GOAL)
    );
    let mb = log_bytes / 1_000_000;
    intendant_bench::report::record(&Figure {
        row: "daemon_list_one_status",
        measured: &format!(
            "the newest {LIST_LIMIT} sessions of one status and the older ones counted, of {sessions} ended sessions (best of {LIST_ROUNDS})"
        ),
        value: ms(page_took),
        baseline: "the whole listing read a page at a time and filtered",
        baseline_value: ms(whole_took),
        unit: "ms",
        better: Better::Lower,
        goal: Some(LIST_GOAL),
        limit: None,
    })?;
    intendant_bench::report::record(&Figure {
        row: "daemon_restart",
        measured: &format!(
            "intendant serve until it answers, {sessions} ended sessions with {mb} MB of logs"
        ),
        value: ms(long_start),
        baseline: "the same sessions with one event logged each",
        baseline_value: ms(short_start),
        unit: "ms",
        better: Better::Lower,
        goal: Some(START_GOAL),
        limit: None,
    })?;
    intendant_bench::report::record(&Figure {
        row: "daemon_replay_rss",
        measured: &format!("the daemon's peak RSS while a client replays those {mb} MB from seq 0"),
        value: peak_kib as f64,
        baseline: "its RSS before",
        baseline_value: before_kib as f64,
        unit: "KiB",
        better: Better::Lower,
        goal: Some(REPLAY_GOAL),
        limit: None,
    })?;
    intendant_bench::report::record(&Figure {
        row: "daemon_answers_rss",
        measured: &format!(
            "the daemon's RSS once {sessions} ended sessions' {} KiB last answers are read back",
            ANSWER_BYTES >> 10
        ),
        value: with_kib as f64,
        baseline: "the same sessions without answers",
        baseline_value: without_kib as f64,
        unit: "KiB",
        better: Better::Lower,
        goal: Some(ANSWERS_GOAL),
        limit: None,
    })?;
    Ok(())
}

/// `intendant serve` on the state root beneath `root`, started.
fn serve(intendant: &Path, root: &Path) -> Result<std::process::Child> {
    command(intendant, root, 0)
        .current_dir(root)
        .arg("serve")
        .spawn()
        .context("starting intendant serve")
}

/// The RSS (KiB) of the daemon `pid` of state root `home` once it has read back what its
/// sessions ended with: the oldest session (read last) listed with its answer when they have
/// one (`answered`), else a second after the start; each side lists every session once, then
/// lets its memory settle.
async fn read_back(pid: u32, home: &Path, answered: bool) -> Result<u64> {
    let host = connect(home, "daemon_restart", READY_WAIT).await?;
    let started = Instant::now();
    let oldest = SessionsPage {
        limit: Some(1),
        ..SessionsPage::ALL
    };
    loop {
        let listed = host.sessions_page(&oldest).await?;
        let done = match answered {
            true => listed.first().is_some_and(|s| s.final_text.is_some()),
            false => started.elapsed() >= Duration::from_secs(1),
        };
        if done {
            break;
        }
        if started.elapsed() > READY_WAIT {
            bail!("the daemon did not read its sessions' answers back in time");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    host.sessions().await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    Ok(intendant_bench::status_kib(pid, "VmRSS")?)
}

/// What one status's newest [`LIST_LIMIT`] sessions cost the daemon of state root `home`,
/// holding `sessions` ended ones, through its socket: read as a page of that status with the
/// older ones counted (what MCP's `list_sessions` asks now), and as the whole listing read a
/// page at a time and filtered (what it asked before). Each is checked to give the same
/// sessions; the fastest of [`LIST_ROUNDS`] each counts.
async fn list_one_status(home: &Path, sessions: u64) -> Result<(Duration, Duration)> {
    let host = connect(home, "daemon_restart", READY_WAIT).await?;
    let done = SessionsPage {
        status: Some(SessionStatus::Done),
        ..SessionsPage::newest(LIST_LIMIT)
    };
    let mut best = [Duration::MAX; 2];
    for _ in 0..LIST_ROUNDS {
        let started = Instant::now();
        let page = host.sessions_page(&done).await?;
        let older = SessionsPage {
            before: page.first().map(|s| s.id.clone()),
            ..done.unlimited()
        };
        let omitted = host.sessions_count(&older).await?;
        best[0] = best[0].min(started.elapsed());

        let started = Instant::now();
        let mut whole: Vec<_> = host
            .sessions()
            .await?
            .into_iter()
            .filter(|s| s.status == SessionStatus::Done)
            .collect();
        let whole_omitted = whole.len().saturating_sub(LIST_LIMIT as usize);
        let newest = whole.split_off(whole_omitted);
        best[1] = best[1].min(started.elapsed());

        let ids = |listed: &[intendant_protocol::daemon::SessionSummary]| -> Vec<String> {
            listed.iter().map(|s| s.id.clone()).collect()
        };
        if ids(&page) != ids(&newest) || omitted != whole_omitted as u64 {
            bail!(
                "the page gave {} sessions and {omitted} older, the listing {} and {whole_omitted}",
                page.len(),
                newest.len()
            );
        }
        if omitted + page.len() as u64 != sessions {
            bail!("{omitted} older and {} listed of {sessions}", page.len());
        }
    }
    Ok((best[0], best[1]))
}

/// Reads the whole history from seq 0 on the daemon `pid` of state root `home`, checking every
/// seq up to `highest` arrives in order: its RSS before (KiB), its peak meanwhile, and how long
/// the replay took.
async fn replay(pid: u32, home: &Path, highest: u64) -> Result<(u64, u64, Duration)> {
    let host = connect(home, "daemon_restart", READY_WAIT).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = intendant_bench::status_kib(pid, "VmRSS")?;
    // The peak from here on (`VmHWM` reset to what is resident now).
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")?;
    let started = Instant::now();
    let mut events = host.subscribe(None, Some(0)).await?;
    let mut next = 1;
    while next <= highest {
        match events.next().await.context("the daemon ended the stream")? {
            StreamItem::Event(env) if env.seq == next => next += 1,
            StreamItem::Event(env) => bail!("seq {} arrived where {next} was due", env.seq),
            StreamItem::Lagged { next_seq } => {
                events = host.subscribe(None, Some(next_seq - 1)).await?;
            }
        }
    }
    let took = started.elapsed();
    let peak = intendant_bench::status_kib(pid, "VmHWM")?;
    Ok((before, peak, took))
}

/// Writes `sessions` ended sessions under the state root `home`, each log numbering `records`
/// events of its last ones (seqs taken in turn, as sessions run side by side take them, the
/// same last seqs whatever `records` is), after a last answer of `answer_bytes` when that is
/// not 0. Returns the highest seq.
fn write_history(home: &Path, sessions: u64, records: u64, answer_bytes: usize) -> Result<u64> {
    let filler = "h".repeat(EVENT_BYTES);
    for n in 0..sessions {
        let id = format!("20261205T060000Z-{n:06x}");
        let dir = logs_dir(home).join(&id);
        std::fs::create_dir_all(&dir)?;
        let mut meta = SessionMeta::new(home, &format!("history {n}"), "fake-model", "openai");
        meta.id = id;
        meta.status = RecordedStatus::Ended(EndStatus::Completed);
        std::fs::write(dir.join(META_FILE), serde_json::to_vec(&meta)?)?;
        let mut log = std::io::BufWriter::new(std::fs::File::create(dir.join(EVENTS_FILE))?);
        if answer_bytes > 0 {
            // Numbered where the event before the first written would be.
            let k = RECORDS - records - 1;
            let record = SessionLogRecord {
                ts: "2026-12-05T06:00:00.000Z".into(),
                seq: Some(k * sessions + n + 1),
                event: AppEvent::Done {
                    message: format!("{n} {}", "a".repeat(answer_bytes)),
                },
            };
            serde_json::to_writer(&mut log, &record)?;
            log.write_all(b"\n")?;
        }
        for k in RECORDS - records..RECORDS {
            let record = SessionLogRecord {
                ts: "2026-12-05T06:00:00.000Z".into(),
                seq: Some(k * sessions + n + 1),
                event: AppEvent::Warning {
                    message: format!("{n}/{k} {filler}"),
                },
            };
            serde_json::to_writer(&mut log, &record)?;
            log.write_all(b"\n")?;
        }
        log.flush()?;
    }
    Ok(RECORDS * sessions)
}

/// The bytes of the files directly in the directories under `dir`.
fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for session in std::fs::read_dir(dir)? {
        for file in std::fs::read_dir(session?.path())? {
            total += file?.metadata()?.len();
        }
    }
    Ok(total)
}
