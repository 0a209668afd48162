#!/usr/bin/env python3
"""Benchmarks example/http_server on boost::beast::tcp_stream ("beast") against the same
server on twheel::beast::tcp_stream ("twheel"), in one run, alternately. Run it through
scripts/bench_http.sh, which builds both servers and installs wrk.

  * throughput: wrk (1 thread, pinned to one CPU) at 100 and 1,000 keep-alive connections
    against the server (1 thread, pinned to the other CPU), --seconds each, --reps times
    per server, alternating; requests per second from wrk, CPU per request from the
    server's utime + stime (/proc/PID/stat) over the run divided by wrk's requests;
  * memory: the server's resident set (VmRSS) with N idle keep-alive connections (one
    request each) minus its resident set before them, divided by N, at 10,000 and
    50,000 connections (a fresh server each time);
  * idle-close lateness: 10,000 keep-alive connections left idle with a 2,000 ms idle
    timeout, opened 0.1 ms apart (--late-pace-ms, a list); lateness = the
    close seen by the client minus (its response's arrival + the timeout); early = closes
    before request sent + timeout (must be 0); and the server's own report of the same
    closes (its close minus (its idle wait's start + the timeout)), which leaves out the
    Python client's queueing.

Medians of the repetitions (lateness too); prints a Markdown table (also written to --out).
"""

import argparse
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "..", "example", "http_server_client.py")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def start(server, cpu, idle_ms=600000):
    cmd = ["taskset", "-c", str(cpu), server, "--port", "0", "--threads", "1",
           "--idle-timeout-ms", str(idle_ms)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.match(r"listening on (\d+)", line)
    if not m:
        proc.kill()
        sys.exit("server did not start: %r" % line)
    return proc, int(m.group(1))


def stop(proc):
    """Stops the server; returns the rest of its output (its reports)."""
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    if proc.returncode != 0:
        sys.exit("server exited with %s" % proc.returncode)
    return out or ""


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def throughput(server, conns, seconds):
    proc, port = start(server, 0)
    # Warm the connections and the allocator before measuring.
    subprocess.run(["taskset", "-c", "1", "wrk", "-t", "1", "-c", str(conns), "-d", "1s",
                    "http://127.0.0.1:%d/" % port], capture_output=True, timeout=60)
    c0 = cpu_seconds(proc.pid)
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t", "1", "-c", str(conns), "-d",
                          "%ds" % seconds, "http://127.0.0.1:%d/" % port],
                         capture_output=True, text=True, timeout=seconds + 60).stdout
    c1 = cpu_seconds(proc.pid)
    stop(proc)
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = "Socket errors" in out or "Non-2xx" in out
    if errors:
        print("wrk reported errors:\n" + out, file=sys.stderr)
    return rps, (c1 - c0) * 1e9 / reqs, errors


def memory(server, conns):
    proc, port = start(server, 0)
    time.sleep(0.2)
    before = rss_kib(proc.pid)
    client = subprocess.Popen([sys.executable, CLIENT, "idle", "--port", str(port),
                               "--connections", str(conns)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = client.stdout.readline()
    ready = int(line.split()[1]) if line.startswith("ready") else 0
    time.sleep(1.0)
    after = rss_kib(proc.pid)
    client.stdin.close()
    client.wait(timeout=120)
    stop(proc)
    if ready != conns:
        sys.exit("only %d of %d idle connections were established" % (ready, conns))
    return (after - before) * 1024.0 / conns


def lateness(server, conns, timeout_ms, pace_ms):
    proc, port = start(server, 0, idle_ms=timeout_ms)
    out = subprocess.run(["taskset", "-c", "1", sys.executable, CLIENT, "idle", "--port",
                          str(port), "--connections", str(conns), "--timeout-ms",
                          str(timeout_ms), "--pace-ms", str(pace_ms)],
                         capture_output=True, text=True, timeout=600).stdout
    server_out = stop(proc)
    m = re.search(r"closes (\d+) of (\d+); lateness ms: p50 ([-\d.]+) p99 ([-\d.]+) max "
                  r"([-\d.]+); early (\d+)", out)
    if not m:
        sys.exit("lateness run failed: %r" % out)
    closes, total, p50, p99, mx, early = m.groups()
    # The server's own view: its close minus (its idle wait's start + T), no client in it.
    s = re.search(r"server side: min [-\d.]+ p50 ([-\d.]+) p99 ([-\d.]+) max ([-\d.]+) ms",
                  server_out)
    if not s:
        sys.exit("no server-side lateness from the server: %r" % server_out)
    return (float(p50), float(p99), float(mx), int(early), int(closes), int(total),
            float(s.group(1)), float(s.group(2)), float(s.group(3)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--beast", required=True, help="http_server_beast")
    p.add_argument("--twheel", required=True, help="http_server")
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--conns", default="100,1000")
    p.add_argument("--idle", default="10000,50000")
    p.add_argument("--late-conns", type=int, default=10000)
    p.add_argument("--late-timeout-ms", type=int, default=2000)
    # 0.1 ms: all 10,000 are open (1 s) before the first close (2 s); further apart the
    # client connects and counts closes at once, and measures itself (at 1 ms: p99 16 to
    # 109 ms for both servers, 2026-11-23 03:53).
    p.add_argument("--late-pace-ms", default="0.1",
                   help="the lateness connections are opened this far apart (a list)")
    p.add_argument("--out")
    a = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    notes = []
    servers = (("beast", a.beast), ("twheel", a.twheel))
    rows = []  # (metric, beast, twheel, better)

    for conns in [int(x) for x in a.conns.split(",") if x]:
        res = {name: [] for name, _ in servers}
        for rep in range(a.reps):
            for name, path in servers:
                rps, cpu, err = throughput(path, conns, a.seconds)
                if err:
                    sys.exit("wrk errors against %s" % name)
                res[name].append((rps, cpu))
                print("wrk %5d conns rep %d %-6s %9.0f req/s %7.0f ns CPU/request"
                      % (conns, rep, name, rps, cpu), flush=True)
        med = {n: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v))
               for n, v in res.items()}
        rows.append(("requests/s, wrk %d conns" % conns, med["beast"][0], med["twheel"][0],
                     med["twheel"][0] / med["beast"][0]))
        rows.append(("server CPU ns/request, wrk %d conns" % conns, med["beast"][1],
                     med["twheel"][1], med["beast"][1] / med["twheel"][1]))

    for conns in [int(x) for x in a.idle.split(",") if x]:
        # The server and the client each hold a descriptor per connection (plus a few).
        if conns + 256 > hard:
            capped = hard - 256
            notes.append("%d idle connections need a descriptor limit above %d (the hard "
                         "RLIMIT_NOFILE here, which this process may not raise): measured "
                         "at %d instead" % (conns, hard, capped))
            print("NOTE: " + notes[-1], flush=True)
            conns = capped
        m = {}
        for name, path in servers:
            m[name] = memory(path, conns)
            print("idle %6d conns %-6s %8.1f B/connection" % (conns, name, m[name]), flush=True)
        rows.append(("memory B/idle connection, %d conns" % conns, m["beast"], m["twheel"],
                     m["beast"] - m["twheel"]))

    # Lateness is the most sensitive to other load on the machine: repeated, alternating,
    # and the median of each percentile kept.
    # At each pace: the client is one Python thread, and at 0.1 ms (10,000 closes in one
    # second) its own queueing is part of what it measures.
    early = {name: 0 for name, _ in servers}
    for pace in [float(x) for x in a.late_pace_ms.split(",") if x]:
        runs = {name: [] for name, _ in servers}
        for rep in range(a.reps):
            for name, path in servers:
                r = lateness(path, a.late_conns, a.late_timeout_ms, pace)
                runs[name].append(r)
                print("lateness pace %g ms rep %d %-6s p50 %.3f p99 %.3f max %.3f ms, early %d, "
                      "closes %d of %d; server side p50 %.3f p99 %.3f max %.3f ms"
                      % ((pace, rep, name) + r), flush=True)
        for n, v in runs.items():
            early[n] += sum(r[3] for r in v)
        # Client side (indexes 0-2) and the server's own report (6-8).
        for side, first in (("", 0), ("server-side ", 6)):
            late = {n: [statistics.median(r[first + i] for r in v) for i in range(3)]
                    for n, v in runs.items()}
            for i, what in enumerate(("p50", "p99", "max")):
                rows.append(("idle-close lateness %s%s ms (%d conns %g ms apart, %d ms)" % (
                    side, what, a.late_conns, pace, a.late_timeout_ms),
                    late["beast"][i], late["twheel"][i], None))
    rows.append(("idle closes early (count, all runs)", early["beast"], early["twheel"], None))

    lines = ["| metric | beast::tcp_stream | twheel::beast::tcp_stream | "
             "twheel vs beast (> 1x: twheel better) |",
             "|---|---:|---:|---:|"]
    for metric, b, t, r in rows:
        if r is None:
            cmp = "-"
        elif metric.startswith("memory"):
            cmp = "%.1f B less" % r
        else:
            cmp = "%.2fx" % r
        if "requests/s" in metric or "CPU" in metric:
            fmt = lambda v: "%.0f" % v
        elif "lateness" in metric:
            fmt = lambda v: "%.2f" % v
        else:
            fmt = lambda v: "%.1f" % v if isinstance(v, float) else str(v)
        lines.append("| %s | %s | %s | %s |" % (metric, fmt(b), fmt(t), cmp))
    lines += [""] + ["Note: " + n for n in notes] if notes else []
    table = "\n".join(lines)
    print()
    print(table)
    if a.out:
        with open(a.out, "w") as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
