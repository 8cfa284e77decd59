#!/usr/bin/env bash
# Runs every cargo-fuzz target under fuzz/ for a bounded time (60 s each by default).
#
# Idempotent and safe to re-run: installs cargo-fuzz when it is missing, builds on the stable
# toolchain (RUSTC_BOOTSTRAP=1 lets cargo-fuzz pass its -Z sanitizer flags), keeps the build in
# a target dir outside the work tree so repeated runs on one machine are incremental, and keeps
# each target's corpus in fuzz/corpus/<target> (gitignored). Exits non-zero on the first crash,
# printing the end of that target's log; the crashing input is saved under fuzz/artifacts/.
#
# Knobs: FUZZ_SECONDS (per target, default 60), INTENDANT_FUZZ_TARGET_DIR (build dir).
set -euo pipefail

cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-60}"
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${INTENDANT_FUZZ_TARGET_DIR:-$HOME/.cache/intendant/fuzz-target}"
log_dir=".cache/fuzz-logs"
mkdir -p "$log_dir" "$CARGO_TARGET_DIR"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

cd fuzz
targets=$(cargo fuzz list)
echo "fuzz: building $(echo "$targets" | wc -w) targets"
cargo fuzz build
for target in $targets; do
  log="../$log_dir/$target.log"
  echo "fuzz: $target for ${seconds}s"
  if ! cargo fuzz run "$target" -- -max_total_time="$seconds" >"$log" 2>&1; then
    echo "fuzz: $target FAILED; end of $log:"
    tail -n 60 "$log"
    exit 1
  fi
  grep -E '^Done [0-9]+ runs' "$log" | sed "s/^/fuzz: $target: /" || true
done
echo "fuzz: every target ran ${seconds}s without a crash"
