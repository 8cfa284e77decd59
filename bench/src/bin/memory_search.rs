//! `memory_search`: what a session's `memory_search` costs over 100,000 memories
//! (`INTENDANT_BENCH_MEMORIES`), beside a `LIKE` scan of the same table in the same run.
//!
//! The memories are generated from a fixed seed: 20 to 60 words each, drawn from a vocabulary of
//! 20,000 words with a Zipf-like skew (a few words very common, most rare), 90% in one project's
//! scope, 5% in the user's and 5% in other projects'. Each of 300 queries is one or two words of
//! middling frequency (vocabulary ranks 100 to 5,000), searched in the project and the user's
//! scopes for the best 10, exactly as the tool does (`Memories::search`: FTS5 `MATCH`, bm25,
//! the scope filter). The baseline runs the same queries as `text LIKE '%word%'` for every word
//! over the same scopes, newest first, 10 rows: what a store without a full-text index would do.
//!
//! - `memory_search_p50`: the median query against the scan's median.
//! - `memory_search_p99`: the 99th percentile against the scan's. Goal: under 10 ms, and at
//!   least 20x faster than the scan (ratio <= 0.05).

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use intendant_bench::report::{Better, Figure};
use intendant_store::Store;
use intendant_store::memory::{Memories, Scope, ScopeFilter};

const MEMORIES_ENV: &str = "INTENDANT_BENCH_MEMORIES";
const DEFAULT_MEMORIES: usize = 100_000;
const VOCABULARY: usize = 20_000;
const QUERIES: usize = 300;
const LIMIT: usize = 10;
const PROJECT: &str = "/work/bench-project";

/// A small fixed-seed generator (xorshift64*): the same memories and queries every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A vocabulary rank skewed toward the common words (rank r drawn about as often as 1/r).
    fn zipf(&mut self) -> usize {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((VOCABULARY as f64).powf(u) as usize).saturating_sub(1)
    }
}

/// Word `rank` of the vocabulary: distinct, pronounceable, 5 to 9 letters.
fn word(rank: usize) -> String {
    const SYLLABLES: [&str; 16] = [
        "ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "zi", "pa", "do", "fu", "gi", "ho", "je",
        "bu",
    ];
    let mut n = rank;
    let mut w = String::new();
    for _ in 0..4 {
        w.push_str(SYLLABLES[n % 16]);
        n /= 16;
    }
    w.push_str(&format!("{}", rank % 7));
    w
}

/// Fills the store with `count` memories in one transaction (the triggers index each).
fn generate(store: &Store, count: usize, rng: &mut Rng) -> Result<()> {
    let other = Scope::Project("/work/other-project".into()).to_string();
    let project = Scope::Project(PROJECT.into()).to_string();
    let mut rows = Vec::with_capacity(count);
    for _ in 0..count {
        let words = 20 + rng.below(41);
        let text: Vec<String> = (0..words).map(|_| word(rng.zipf())).collect();
        let scope = match rng.below(20) {
            0 => "user".to_owned(),
            1 => other.clone(),
            _ => project.clone(),
        };
        rows.push((scope, text.join(" ")));
    }
    store.write(|tx| {
        let mut insert = tx.prepare(
            "INSERT INTO memories (scope, text, source, created, updated) \
             VALUES (?1, ?2, 'human', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), \
             strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
        )?;
        for (scope, text) in &rows {
            insert.execute([scope, text])?;
        }
        Ok(())
    })?;
    store.with(|c| c.execute_batch("ANALYZE; PRAGMA optimize;"))?;
    Ok(())
}

/// The `LIKE` scan of `words` over the two scopes: every row of the scopes read and matched.
fn like_scan(store: &Store, words: &[String]) -> Result<usize> {
    let mut sql = String::from("SELECT m.id, m.text FROM memories m WHERE m.scope IN (?1, 'user')");
    for i in 0..words.len() {
        sql.push_str(&format!(" AND m.text LIKE ?{}", i + 2));
    }
    sql.push_str(&format!(
        " ORDER BY m.updated DESC, m.id DESC LIMIT {LIMIT}"
    ));
    let mut params = vec![Scope::Project(PROJECT.into()).to_string()];
    params.extend(words.iter().map(|w| format!("%{w}%")));
    let rows = store.with(|c| {
        let mut statement = c.prepare_cached(&sql)?;
        let rows =
            statement.query_map(rusqlite::params_from_iter(&params), |r| r.get::<_, i64>(0))?;
        rows.count_ok()
    })?;
    Ok(rows)
}

/// Counting helper for a row iterator that must not fail silently.
trait CountOk {
    fn count_ok(self) -> rusqlite::Result<usize>;
}

impl<I: Iterator<Item = rusqlite::Result<i64>>> CountOk for I {
    fn count_ok(self) -> rusqlite::Result<usize> {
        let mut n = 0;
        for row in self {
            row?;
            n += 1;
        }
        Ok(n)
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[allow(clippy::print_stdout)] // a benchmark binary reports on stdout
fn main() -> Result<()> {
    let count = match std::env::var(MEMORIES_ENV) {
        Ok(v) => v.parse().with_context(|| format!("{MEMORIES_ENV}={v:?}"))?,
        Err(_) => DEFAULT_MEMORIES,
    };
    let dir = intendant_bench::work_dir()?;
    let store = Store::open(dir.path())?;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let started = Instant::now();
    generate(&store, count, &mut rng)?;
    println!(
        "generated {count} memories in {:.1} s ({:.1} MiB)",
        started.elapsed().as_secs_f64(),
        std::fs::metadata(store.path())?.len() as f64 / 1048576.0
    );
    let memories = Memories::new(store.clone());
    let filter = ScopeFilter::Only(vec![Scope::Project(PROJECT.into()), Scope::User]);
    let queries: Vec<Vec<String>> = (0..QUERIES)
        .map(|i| {
            let words = if i % 3 == 0 { 2 } else { 1 };
            (0..words).map(|_| word(100 + rng.below(4_900))).collect()
        })
        .collect();

    // One untimed pass each, so both start with the pages they read in the cache.
    let (mut fts, mut like) = (Vec::new(), Vec::new());
    let (mut fts_hits, mut like_hits) = (0usize, 0usize);
    for timed in [false, true] {
        for words in &queries {
            let t = Instant::now();
            let found = memories.search(&words.join(" "), &filter, LIMIT)?;
            let took = t.elapsed();
            let t = Instant::now();
            let scanned = like_scan(&store, words)?;
            let scan_took = t.elapsed();
            if timed {
                fts.push(took);
                like.push(scan_took);
                fts_hits += found.hits.len();
                like_hits += scanned;
            }
        }
    }
    anyhow::ensure!(
        fts_hits > 0,
        "the queries found nothing: the benchmark is wrong"
    );
    fts.sort();
    like.sort();
    let (p50, p99) = (percentile(&fts, 0.5), percentile(&fts, 0.99));
    let (like50, like99) = (percentile(&like, 0.5), percentile(&like, 0.99));
    println!(
        "memory_search over {count}: p50 {:.3} ms, p99 {:.3} ms ({fts_hits} results for {QUERIES} queries)",
        ms(p50),
        ms(p99)
    );
    println!(
        "LIKE scan of the same table: p50 {:.3} ms, p99 {:.3} ms ({like_hits} rows)",
        ms(like50),
        ms(like99)
    );
    println!(
        "ratio: p50 {:.4}x ({:.0}x faster), p99 {:.4}x ({:.0}x faster); goal p99 < 10 ms and <= 0.05x",
        ms(p50) / ms(like50),
        ms(like50) / ms(p50),
        ms(p99) / ms(like99),
        ms(like99) / ms(p99)
    );
    let measured = format!("memory_search over {count} memories, best 10 (FTS5, bm25)");
    for (row, value, baseline, limit) in [
        ("memory_search_p50", p50, like50, None),
        ("memory_search_p99", p99, like99, Some(10.0)),
    ] {
        intendant_bench::report::record(&Figure {
            row,
            measured: &measured,
            value: ms(value),
            baseline: "LIKE scan of the same table",
            baseline_value: ms(baseline),
            unit: "ms",
            better: Better::Lower,
            goal: Some(0.05),
            limit,
        })?;
    }
    Ok(())
}
