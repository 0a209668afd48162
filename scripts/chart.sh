#!/usr/bin/env bash
# Draws the CSV of scripts/bench.sh as an SVG chart with gnuplot (Debian's gnuplot-nox,
# installed if missing): one panel per workload, asio beside twheel, against the number
# of pending timers (log x). Time panels are ns per operation (burst and spread expiry:
# thread CPU ns per handler, from their handlers/s and CPU rows); the last panels are
# bytes per armed timer, lateness p99 and epoll_wait calls.
#
# Usage: scripts/chart.sh [CSV] [SVG]     (default: out/bench.csv docs/bench.svg)
set -euo pipefail
cd "$(dirname "$0")/.."
csv=${1:-out/bench.csv}
svg=${2:-docs/bench.svg}
command -v gnuplot >/dev/null || scripts/deps.sh gnuplot-nox
[ -f "$csv" ] || { echo "chart.sh: $csv not found (run scripts/bench.sh first)" >&2; exit 1; }

# workload|panel title|y label|scale (y = value * scale, or 1000/value when "inv")|y axis
panels=(
  "arm|arm: expires_after + async_wait|ns per timer|1"
  "churn|churn: re-arm a random timer|ns per re-arm|1"
  "cancel|cancel|ns per timer|1"
  "cancel-destroy|cancel, then the timer destroyed|ns per timer|1"
  "churn-32B|churn, a 32-byte handler|ns per re-arm|1"
  "burst-cpu|burst expiry (all due at once)|CPU ns per handler|inv"
  "spread-cpu|spread expiry (due over 1 s)|CPU ns per handler|1"
  "late-p99|spread expiry: lateness p99 (log y)|us|1|log"
  "epoll_wait|spread expiry: epoll_wait calls, strace (log y)|calls|1|log"
  "memory|memory per armed timer|bytes|1"
  "churn-1ctx-1thr|churn in run(): 1 context, 1 thread|ns per re-arm|1"
  "churn-1ctx-2thr|churn in run(): 1 context, 2 threads, strands|ns per re-arm|1"
  "churn-2ctx-2thr|churn in run(): 2 contexts, 2 threads|ns per re-arm|1"
  "cancel_after|cancel_after vs a steady_timer per operation|ns per operation|1"
  "touch|idle_timer::touch() vs steady_timer re-arm (log y)|ns per operation|1|log"
)

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
script=$dir/chart.gp
title="twheel vs boost::asio::steady_timer ($(basename "$csv"), $(date -u -r "$csv" '+%Y-%m-%d'))"
cat >"$script" <<EOF
set terminal svg size 1600,1400 dynamic noenhanced font "sans,11" background "white"
set output "$svg"
set logscale x 10
set xtics ("10k" 10000, "100k" 100000, "1M" 1000000)
set xrange [5000:2000000]
set xlabel "pending timers" offset 0,0.5
set key below horizontal
set grid ytics
set yrange [0:*]
set style line 1 lc rgb "#d95f02" lw 2 pt 7 ps 0.7
set style line 2 lc rgb "#1b9e77" lw 2 pt 5 ps 0.7
set multiplot layout 4,4 title "$title" font "sans,14"
EOF
for p in "${panels[@]}"; do
  IFS='|' read -r workload ptitle ylabel scale yaxis <<<"$p"
  dat=$dir/$workload.dat
  awk -F, -v w="$workload" -v s="$scale" '
    function y(v) { if (v == "") return "NaN"; if (s == "inv") return v > 0 ? 1000 / v : "NaN"; return v * s }
    $2 == w { print $3, y($4), y($5) }' "$csv" >"$dat"
  [ -s "$dat" ] || continue
  if [ "${yaxis:-}" = log ]; then
    echo 'set logscale y 10; set yrange [*:*]' >>"$script"
  else
    echo 'unset logscale y; set yrange [0:*]' >>"$script"
  fi
  cat >>"$script" <<EOF
set title "$ptitle"
set ylabel "$ylabel" offset 1,0
plot "$dat" using 1:2 with linespoints ls 1 title "asio" , \
     "$dat" using 1:3 with linespoints ls 2 title "twheel"
EOF
done
echo "unset multiplot" >>"$script"
mkdir -p "$(dirname "$svg")"
gnuplot "$script"
echo "chart: $svg"
