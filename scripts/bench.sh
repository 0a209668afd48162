#!/usr/bin/env bash
# Runs the benchmark suite: builds the benchmarks (Release), runs every comparison of
# twheel with boost::asio::steady_timer, prints the tables (with ratios, > 1: twheel
# better), writes every row to a CSV and draws the chart from it (scripts/chart.sh).
#
# Usage: scripts/bench.sh [--quick] [--build-dir DIR]
#   (full)       10,000 / 100,000 / 1,000,000 timers, medians of 5; also the core wheel
#                alone (bench_timing_wheel). Writes out/bench.csv, the summary table
#                out/bench.md and the chart docs/bench.svg.
#   --quick      10,000 / 100,000 timers, medians of 3, under a minute. Writes
#                out/bench-quick.{csv,md,svg} (docs/ keeps the full run's chart).
#   --build-dir  an already configured build directory to build the benchmarks in
#                (scripts/demo.sh passes build/); default build-bench/, configured with
#                the `bench` preset (Release, warnings as errors, no tests or examples).
#
# CSV columns: program,workload,n,asio,twheel,ratio,unit (empty: no such value).
set -euo pipefail
cd "$(dirname "$0")/.."

quick=""
build=build-bench
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=--quick ;;
    --build-dir) build=$2; shift ;;
    *) echo "usage: scripts/bench.sh [--quick] [--build-dir DIR]" >&2; exit 2 ;;
  esac
  shift
done

# strace counts Asio's wake-ups (bench_timers' wakeups rows).
scripts/deps.sh strace
if [ "$build" = build-bench ]; then
  cmake --preset bench >/dev/null
elif [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTWHEEL_WERROR=ON >/dev/null
fi
programs=(bench_timers bench_threads bench_adapters bench_context)
[ -n "$quick" ] || programs+=(bench_timing_wheel)
cmake --build "$build" --target "${programs[@]}" -j"$(nproc)" >/dev/null
if ! grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "$build/CMakeCache.txt"; then
  echo "bench.sh: $build is not a Release build" >&2
  exit 1
fi

mkdir -p out
if [ -n "$quick" ]; then
  csv=out/bench-quick.csv
  chart=out/bench-quick.svg
else
  csv=out/bench.csv
  chart=docs/bench.svg
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT

start=$(date +%s)
echo "twheel benchmarks ($([ -n "$quick" ] && echo quick || echo full) run), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')," \
     "$(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

# Each program prints its table as it measures, then its rows as "csv," lines: the table
# goes to stdout, the csv lines to the log.
run() {
  local prog=$1
  shift
  echo "== $prog $*"
  "$build/bench/$prog" "$@" | tee -a "$log" | grep -v '^csv,'
  echo
}
echo "program,workload,n,asio,twheel,ratio,unit" >"$csv"
for prog in bench_timers bench_threads bench_adapters bench_context; do
  : >"$log"
  run "$prog" $quick
  grep '^csv,' "$log" | sed "s/^csv,/$prog,/" >>"$csv"
done
if [ -z "$quick" ]; then
  : >"$log"
  run bench_timing_wheel
  grep '^csv,' "$log" | sed 's/^csv,//' >out/bench_timing_wheel.csv
fi

echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); total $(( $(date +%s) - start )) s"
echo

# The summary: every row of the CSV, one line per workload, the sizes side by side (the
# table README.md shows). Values as the programs print them; ratio > 1: twheel better.
summary=${csv%.csv}.md
awk -F, '
  function fmt(v, unit) {
    if (v == "") return "-"
    if (unit == "calls" || unit == "handlers" || unit == "wakeups") return sprintf("%.0f", v)
    return sprintf((v < 10 && v > -10) ? "%.2f" : "%.1f", v)
  }
  function group(n,   out) {
    out = ""
    while (length(n) > 3) { out = "," substr(n, length(n) - 2) out; n = substr(n, 1, length(n) - 3) }
    return n out
  }
  NR == 1 { next }
  {
    key = $2 " (" $7 ")"
    if (!(key in seen)) { seen[key] = 1; keys[++nk] = key }
    if (!($3 in sizes)) { sizes[$3] = 1; ns[++nn] = $3 }
    cell[key, $3] = fmt($4, $7) " | " fmt($5, $7) " | " ($6 == "" ? "-" : sprintf("%.2fx", $6))
  }
  END {
    for (i = 1; i <= nn; i++) for (j = i + 1; j <= nn; j++) if (ns[j] + 0 < ns[i] + 0) { t = ns[i]; ns[i] = ns[j]; ns[j] = t }
    line = "| workload (unit) |"; sep = "|---|"
    for (i = 1; i <= nn; i++) { line = line " asio " group(ns[i]) " | twheel | ratio |"; sep = sep "---:|---:|---:|" }
    print line; print sep
    for (k = 1; k <= nk; k++) {
      line = "| " keys[k] " |"
      for (i = 1; i <= nn; i++) line = line " " (((keys[k], ns[i]) in cell) ? cell[keys[k], ns[i]] : "- | - | -") " |"
      print line
    }
  }' "$csv" >"$summary"
echo "Summary (asio | twheel | ratio per size; ratio > 1: twheel better):"
cat "$summary"
echo
scripts/chart.sh "$csv" "$chart"
echo "rows in $csv, summary table in $summary, chart in $chart"
