#!/usr/bin/env bash
# Measures the README Quickstart's first build: the `cargo build` command of the Quickstart (read
# from README.md, so this cannot drift from it) into an empty target directory, with the registry
# cache warmed first (`cargo fetch`, not timed). Prints the wall and CPU seconds of the build, the
# load average before and after (other work on the machine inflates the wall time) and the sizes
# of the binaries the Quickstart runs.
#
# BUILD_TARGET_DIR names the empty target directory to use (default: a fresh temporary one,
# deleted at exit); BUILD_TIMINGS=1 adds `--timings` (the HTML report is kept in
# $BUILD_TARGET_DIR/cargo-timings, so set BUILD_TARGET_DIR to keep it).
set -euo pipefail
cd "$(dirname "$0")/.."

build_cmd="$(grep -m1 '^cargo build' README.md | sed 's/ *&&.*//')"
if [[ -z "$build_cmd" ]]; then
  echo "build_time.sh: no line starting with 'cargo build' in README.md's Quickstart" >&2
  exit 2
fi
read -r -a build_argv <<< "$build_cmd"
[[ "${BUILD_TIMINGS:-}" == 1 ]] && build_argv+=(--timings)

if [[ -n "${BUILD_TARGET_DIR:-}" ]]; then
  target="$BUILD_TARGET_DIR"
  if [[ -e "$target" && -n "$(ls -A "$target")" ]]; then
    echo "build_time.sh: $target is not empty; the measurement needs an empty target directory" >&2
    exit 2
  fi
else
  target="$(mktemp -d)"
  trap 'rm -rf "$target"' EXIT
fi

cargo fetch --locked --quiet
echo "== ${build_argv[*]} (CARGO_TARGET_DIR=$target)" >&2
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
TIMEFORMAT='%R %U %S'
times_file="$(mktemp)"
{ time CARGO_TARGET_DIR="$target" CARGO_INCREMENTAL=0 "${build_argv[@]}" --quiet 2>&3 ; } 3>&2 2> "$times_file"
read -r wall user sys < "$times_file"
rm -f "$times_file"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

# The release directory of whatever profile the command builds (`--release` or `--profile NAME`).
profile_dir=release
for ((i = 0; i < ${#build_argv[@]}; i++)); do
  [[ "${build_argv[i]}" == --profile ]] && profile_dir="${build_argv[i + 1]}"
done

echo "command: $build_cmd"
echo "cores: $(nproc)"
echo "load average before: $load_before; after: $load_after (1, 5, 15 min)"
echo "wall: ${wall} s"
echo "cpu: $(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.1f", u + s }') s (user $user s, sys $sys s)"
for bin in intendant intendant-runtime intendant-runtime-browse; do
  file="$target/$profile_dir/$bin"
  if [[ -f "$file" ]]; then
    bytes="$(stat -c %s "$file")"
    echo "$bin: $(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB ($bytes bytes)"
  else
    echo "$bin: not built"
  fi
done
