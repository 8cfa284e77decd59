#!/usr/bin/env python3
"""Aggregates the figures the benchmark binaries append to $INTENDANT_BENCH_REPORT (one JSON
object per line, see bench/src/report.rs) over every run of `bench/run.sh` into one Markdown
table: medians and min-max of each figure and its baseline, and of their ratio.

usage: report.py FIGURES.jsonl MACHINE.json RUNS BIN...  (BIN: the benchmark binaries that
exist; prints the Markdown document on stdout)
"""

import json
import statistics
import sys

# The table's rows, in order: (row key, title, the binary in bench/src/bin/ that measures it).
# Figures of other keys follow, sorted.
# Why a row that needs something the run was not given has no figure.
HINTS = {
    "runtime_start_vs_earlier": "no earlier build named (INTENDANT_BENCH_BASELINE_RUNTIME)",
}

ROWS = [
    ("runtime_batch", "runtime batch", "runtime_spawn"),
    ("runtime_output_time", "runtime output capture: time", "runtime_rss"),
    ("runtime_output_rss", "runtime output capture: peak RSS", "runtime_rss"),
    ("pty_roundtrip", "PTY round trip", "pty_roundtrip"),
    ("runtime_start", "runtime start", "runtime_start"),
    ("runtime_start_vs_earlier", "runtime start against an earlier build", "runtime_start"),
    ("runtime_invocation_cpu", "runtime invocation: CPU", "runtime_invocation"),
    ("runtime_invocation_wall", "runtime invocation: wall", "runtime_invocation"),
    ("egress_proxy_1gib", "egress proxy: 1 GiB, one connection", "egress_proxy"),
    ("egress_proxy_1gib_shaped", "egress proxy: 1 GiB over a 1 Gbit/s link", "egress_proxy"),
    ("egress_proxy_1gib_cpu", "egress proxy: CPU per GiB on loopback", "egress_proxy"),
    ("egress_proxy_small", "egress proxy: 1,000 small requests", "egress_proxy"),
    ("egress_proxy_runtime_start", "egress proxy: runtime start in the session's namespace", "egress_proxy"),
    ("sse_fold_openai", "SSE fold: openai", "sse_throughput"),
    ("sse_fold_anthropic", "SSE fold: anthropic", "sse_throughput"),
    ("sse_fold_gemini", "SSE fold: gemini", "sse_throughput"),
    ("sse_fold_openai-chat", "SSE fold: openai-chat", "sse_throughput"),
    ("harness_turn", "harness per turn", "harness_overhead"),
    ("harness_rss", "harness peak RSS", "harness_overhead"),
    ("harness_turn_codex", "harness per turn vs codex", "harness_overhead"),
    ("harness_turn_claude", "harness per turn vs claude", "harness_overhead"),
    ("harness_turn_kimi", "harness per turn vs kimi", "harness_overhead"),
    ("daemon_sessions", "many sessions", "daemon_sessions"),
    ("daemon_sessions_over_bare", "many sessions: daemon over no daemon", "daemon_sessions"),
    ("daemon_sessions_rss", "many sessions: RSS per session", "daemon_sessions"),
    ("daemon_sessions_rss_with_processes", "many sessions: memory per waiting session with its processes", "daemon_sessions"),
    ("daemon_sessions_fds", "many sessions: descriptors per waiting session", "daemon_sessions"),
    ("daemon_sessions_process_starts", "many sessions: the floor's process start-up", "daemon_sessions"),
    ("daemon_restart", "daemon start with 200 MB of logs", "daemon_restart"),
    ("daemon_replay_rss", "daemon RSS replaying 200 MB of logs", "daemon_restart"),
    ("daemon_answers_rss", "daemon RSS with 2,000 ended sessions' 32 KiB answers", "daemon_restart"),
    ("daemon_list_one_status", "one status's newest sessions", "daemon_restart"),
    ("spawn_descriptors", "spawn with 5,000 descriptors open (the runtime's)", "spawn_descriptors"),
    ("spawn_descriptors_calling_thread", "spawn with 5,000 descriptors open (on the calling thread)", "spawn_descriptors"),
    ("soak_rss", "soak: RSS after a second wave", "soak"),
    ("idle_workers_memory_codex", "waiting codex sessions, workers let go: PSS", "idle_workers"),
    ("idle_workers_memory_claude-code", "waiting claude sessions, workers let go: PSS", "idle_workers"),
    ("idle_workers_memory_kimi", "waiting kimi sessions, workers let go: PSS", "idle_workers"),
    ("idle_workers_follow_up_codex", "follow-up to a codex worker let go", "idle_workers"),
    ("idle_workers_follow_up_claude-code", "follow-up to a claude worker let go", "idle_workers"),
    ("idle_workers_follow_up_kimi", "follow-up to a kimi worker let go", "idle_workers"),
    ("dashboard_latency_p50", "dashboard event latency p50", "dashboard"),
    ("dashboard_latency_p99", "dashboard event latency p99", "dashboard"),
    ("dashboard_first_render", "dashboard first render, 1,000 events", "dashboard"),
    ("dashboard_first_load", "dashboard first load", "dashboard"),
    ("orchestration", "orchestration", "orchestration"),
    ("checkpoint_turn_small", "checkpoints per turn, small project", "checkpoints"),
    ("checkpoint_first", "first checkpoint, 100,000 files", "checkpoints"),
    ("checkpoint_after_one", "checkpoint after one changed file", "checkpoints"),
    ("checkpoint_rewind", "rewind of 1,000 changed files", "checkpoints"),
    ("checkpoint_storage", "store growth, ten one-file turns", "checkpoints"),
]


def spread(values, digits):
    """'median (min-max)' of values."""
    fmt = f"{{:.{digits}f}}"
    med = fmt.format(statistics.median(values))
    if len(values) == 1:
        return med
    return f"{med} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def digits_for(values):
    top = max(abs(v) for v in values)
    return 0 if top >= 1000 else 1 if top >= 10 else 2 if top >= 1 else 3


def verdict(row):
    ratio = statistics.median(row["ratios"])
    checks = []
    goal = row.get("goal")
    if goal is not None:
        if row["better"] == "lower":
            checks.append((ratio < goal, f"< {goal}x"))
        else:
            checks.append((ratio >= goal, f">= {goal}x"))
    limit = row.get("limit")
    if limit is not None:
        value = statistics.median(row["values"])
        checks.append((value < limit, f"< {limit:g} {row['unit']}"))
    if not checks:
        return "reported", "reported"
    goal_text = ", ".join(text for _, text in checks)
    return goal_text, "met" if all(ok for ok, _ in checks) else "**missed**"


def main():
    figures_path, machine_path, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    built = set(sys.argv[4:])
    rows = {}
    notes = {}
    with open(figures_path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            fig = json.loads(line)
            key = fig["row"]
            if "unavailable" in fig or "failed" in fig:
                notes.setdefault(key, (fig.get("measured", key), fig.get("unavailable") or fig["failed"]))
                continue
            row = rows.setdefault(key, {**fig, "values": [], "baselines": [], "ratios": []})
            row["values"].append(fig["value"])
            row["baselines"].append(fig["baseline_value"])
            ratio = fig["value"] / fig["baseline_value"] if fig["baseline_value"] else float("nan")
            row["ratios"].append(ratio)
    with open(machine_path, encoding="utf-8") as f:
        machine = json.load(f)

    out = []
    out.append("# Benchmarks")
    out.append("")
    out.append(
        "Made by `bench/run.sh`: every benchmark binary in `bench/src/bin/`, built with the `profiling` profile (release code with line tables), "
        f"run {runs} times on one machine. Each figure is shown beside its baseline measured in the "
        "same run, and their ratio; each cell is the median over the runs with the min-max in "
        "parentheses. Nothing in the test suite asserts a time."
    )
    out.append("")
    out.append("## Machine")
    out.append("")
    for key in ["date", "cores", "memory", "kernel", "filesystem", "rustc", "load"]:
        if key in machine:
            out.append(f"- {key}: {machine[key]}")
    out.append("- peers:")
    for name, version in machine.get("peers", {}).items():
        out.append(f"  - {name}: {version}")
    out.append("")
    out.append("## Results")
    out.append("")
    out.append("| benchmark | measured | value | baseline | baseline value | ratio | goal | verdict |")
    out.append("|---|---|---|---|---|---|---|---|")
    known = [k for k, _, _ in ROWS]
    titles = {k: t for k, t, _ in ROWS}
    binary = {k: b for k, _, b in ROWS}
    order = known + sorted(
        k for k in set(rows) | set(notes) if k not in known and k not in binary.values()
    )
    for key in order:
        title = titles.get(key, key)
        if key in rows:
            row = rows[key]
            d = digits_for(row["values"] + row["baselines"])
            goal, ok = verdict(row)
            out.append(
                f"| {title} | {row['measured']} | {spread(row['values'], d)} {row['unit']} "
                f"| {row['baseline']} | {spread(row['baselines'], d)} {row['unit']} "
                f"| {spread(row['ratios'], 3)}x | {goal} | {ok} |"
            )
        elif key in notes:
            measured, why = notes[key]
            out.append(f"| {title} | {measured} | {why} | | | | | not measured |")
        elif binary.get(key) in notes:
            _, why = notes[binary[key]]
            out.append(f"| {title} | `{binary[key]}` | {why} | | | | | not measured |")
        elif binary.get(key) in built:
            why = HINTS.get(key, "no figure recorded")
            out.append(f"| {title} | `{binary[key]}` | {why} | | | | | not measured |")
        else:
            out.append(f"| {title} | not built | | | | | | not built |")
    out.append("")
    print("\n".join(out))


if __name__ == "__main__":
    main()
