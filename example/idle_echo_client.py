#!/usr/bin/env python3
"""Drives idle_echo_server on 127.0.0.1 and checks its idle timeout from the outside.

Opens --clients connections. Half of them (the talkers) send a line every --talk-ms and
check the echo; the other half stay silent. Checks:

  * every silent connection is closed no earlier than --idle-timeout-ms (T) after
    connecting and no later than T + --late-ms (the lower bound measured from before the
    connect, the upper from after it returned, as for sends below);
  * no talker is closed while it talks;
  * once the talkers fall silent, each is closed within the same bounds, measured from
    its last send, and has received exactly the bytes it sent.

Prints the lateness of each group (the close seen - T - the last connect or send, measured
from before it and from after it returned): min, p50, p99, max.
A run whose only violations are late closes is run again, up to --attempts times in all
(each attempt printed): a stall of the shared machine can delay one run by more than the
bound; an early close, a close while talking or wrong counts fail at once.

The client starts each idle period just before it calls connect or send, so before the
server can accept or read, and stops it when it sees the close: it may miss a close that
was slightly early, but never reports one as early that was not.

With --server PATH it starts the server itself (--port 0), reads its port, and finally
sends it SIGTERM and checks that it exits with status 0. With --pin as well, the server runs
on CPU 0 and this client on CPU 1, so that neither waits for the other's time slice (on a
2-CPU machine the scheduler otherwise often puts both on one CPU, and the server's closes
pause for milliseconds while the client runs).

Prints a one-line summary; exits 1 on any violation, 2 on bad arguments. Standard library
only.
"""

import argparse
import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import time

HOST = "127.0.0.1"
MAX_REPORTED = 20  # violations printed one by one; the rest are only counted


class Conn:
    __slots__ = ("index", "sock", "talker", "prev_send", "last_send", "last_sent", "sent",
                 "received", "closed_at", "idle_at_close", "late_by")

    def __init__(self, index, sock, talker, now):
        self.index = index
        self.sock = sock
        self.talker = talker
        self.prev_send = now  # the start of the idle period before the current one
        self.last_send = now  # the start of the current idle period, client side
        self.last_sent = now  # when that connect or send returned
        self.sent = bytearray()
        self.received = bytearray()
        self.closed_at = None
        self.idle_at_close = None  # from before the last connect or send: never too short
        self.late_by = None  # close - (after the last connect or send + T): never too long


class Checker:
    def __init__(self):
        self.violations = 0
        self.late_only = True  # every violation so far is a late close

    def fail(self, message, late=False):
        self.violations += 1
        self.late_only = self.late_only and late
        if self.violations <= MAX_REPORTED:
            print(f"VIOLATION: {message}", file=sys.stderr)


def raise_open_file_limit(needed):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if soft != resource.RLIM_INFINITY and soft < needed:
        sys.exit(f"need {needed} open files, the limit is {soft}")


def run(args, port):
    check = Checker()
    period = args.idle_timeout_ms / 1000.0
    talk_every = args.talk_ms / 1000.0
    wait_limit = 2 * period + 1.0  # how long to wait for a close, to measure a late one

    sel = selectors.DefaultSelector()
    conns = []
    talkers = []
    silent = []
    open_count = 0
    silent_open = 0

    def close(c, now, talking):
        nonlocal open_count, silent_open
        c.closed_at = now
        c.idle_at_close = now - c.last_send
        c.late_by = now - c.last_sent - period
        sel.unregister(c.sock)
        c.sock.close()
        open_count -= 1
        if not c.talker:
            silent_open -= 1
        if c.idle_at_close < period and c.talker and now - c.prev_send >= period:
            # The client fell a whole timeout behind between its last two sends (a stalled
            # machine): the server may have closed before the last send arrived, and the
            # client only saw it after sending. Not the server's fault: run again.
            check.fail(f"talker {c.index} closed {c.idle_at_close * 1000:.1f} ms after its "
                       f"last send, but {(now - c.prev_send) * 1000:.1f} ms after the one "
                       f"before: the client stalled", late=True)
        elif c.idle_at_close < period:
            check.fail(f"connection {c.index} closed after {c.idle_at_close * 1000:.1f} ms "
                       f"idle, before the {args.idle_timeout_ms} ms timeout")
        if c.talker and talking and c.idle_at_close >= period:
            # The client itself fell a whole timeout behind with its sends (a stalled
            # machine): the server was right to close it. Not the server's fault, so a
            # reason to run again, like a late close.
            check.fail(f"talker {c.index} closed while talking, but {c.idle_at_close * 1000:.1f} "
                       f"ms after its last send: the client stalled", late=True)
        if c.talker and c.received != c.sent:
            check.fail(f"talker {c.index} closed before all of its echo arrived "
                       f"({len(c.received)} of {len(c.sent)} bytes)")

    def on_readable(c, now, talking):
        try:
            data = c.sock.recv(65536)
        except BlockingIOError:
            return
        except ConnectionResetError:
            data = b""
        if not data:
            close(c, now, talking)
            return
        c.received += data
        if not c.sent.startswith(c.received):
            check.fail(f"connection {c.index}: echo differs from what was sent")

    def talk(c):
        line = f"ping {c.index} {len(c.sent)}\n".encode()
        sending_at = time.monotonic()  # before: the server may read before sendall returns
        try:
            c.sock.sendall(line)  # a few bytes: never blocks in practice
        except OSError:
            close(c, time.monotonic(), True)  # the server closed it: a violation
            return
        c.sent += line
        c.prev_send = c.last_send
        c.last_send = sending_at
        c.last_sent = time.monotonic()

    def connect_some(count):
        nonlocal open_count, silent_open
        for _ in range(count):
            if len(conns) == args.clients:
                return
            connecting_at = time.monotonic()  # before: the server may accept before we return
            sock = socket.create_connection((HOST, port), timeout=5)
            sock.setblocking(False)
            c = Conn(len(conns), sock, talker=(len(conns) % 2 == 0), now=connecting_at)
            c.last_sent = time.monotonic()  # connected: the server may accept from now on
            conns.append(c)
            (talkers if c.talker else silent).append(c)
            sel.register(sock, selectors.EVENT_READ, c)
            open_count += 1
            if not c.talker:
                silent_open += 1

    # Runs the loop until `done` or `deadline`: connects what is left to connect, a batch
    # at a time, and while `talking`, every talker sends every talk_every.
    def poll_until(deadline, talking, done):
        next_send = time.monotonic()
        while not done():
            now = time.monotonic()
            if now >= deadline:
                return
            if talking and now >= next_send:
                for c in talkers:
                    if c.closed_at is None:
                        talk(c)
                # Never catch up in a burst: that would starve the reads below.
                next_send = max(next_send + talk_every, time.monotonic())
            connect_some(50)
            wake = min(deadline, next_send) if talking else deadline
            if len(conns) < args.clients:
                wake = now  # more to connect: only look at what is ready
            for key, _ in sel.select(timeout=max(0.0, wake - now)):
                on_readable(key.data, time.monotonic(), talking)

    # Phase 0: connect everyone, the talkers talking from the start.
    poll_until(time.monotonic() + 60, True, lambda: len(conns) == args.clients)
    connected_at = time.monotonic()

    # Phase 1: talkers talk until every silent connection is closed, and for at least two
    # periods, so that each talker outlives a timeout several times over.
    poll_until(connected_at + wait_limit, True, lambda: silent_open == 0)
    poll_until(connected_at + 2 * period, True, lambda: False)
    talk_end = time.monotonic()
    for c in silent:
        if c.closed_at is None:
            check.fail(f"silent connection {c.index} still open "
                       f"{(talk_end - c.last_send) * 1000:.0f} ms after connecting")

    # Phase 2: everyone is silent; the talkers must now be closed too.
    poll_until(talk_end + wait_limit, False, lambda: open_count == 0)
    for c in talkers:
        if c.closed_at is None:
            check.fail(f"talker {c.index} still open "
                       f"{(time.monotonic() - c.last_send) * 1000:.0f} ms after its last send")
        elif c.late_by * 1000 > args.late_ms:
            check.fail(f"talker {c.index} closed {c.late_by * 1000:.1f} ms after its last send "
                       f"+ T, later than {args.late_ms} ms", late=True)
    for c in silent:
        if c.closed_at is not None and c.late_by * 1000 > args.late_ms:
            check.fail(f"silent connection {c.index} closed {c.late_by * 1000:.1f} ms after "
                       f"connecting + T, later than {args.late_ms} ms", late=True)
    for c in conns:
        if c.closed_at is None:
            sel.unregister(c.sock)
            c.sock.close()
    sel.close()

    def span(group):
        idle = [c.idle_at_close * 1000 for c in group if c.closed_at is not None]
        return f"{min(idle):.1f}..{max(idle):.1f} ms" if idle else "never"

    def lateness(group, of):
        late = sorted(of(c) * 1000 for c in group if c.closed_at is not None)
        if not late:
            return "none closed"
        def pct(p):
            return late[min(len(late) - 1, int(p / 100 * len(late)))]
        return (f"min {late[0]:.2f} p50 {pct(50):.2f} p99 {pct(99):.2f} "
                f"max {late[-1]:.2f} ms (n={len(late)})")

    # From before the last connect or send (min >= 0: never early), and from after it
    # returned (what the bound checks).
    for name, of in (("from before", lambda c: c.idle_at_close - period),
                     ("from after", lambda c: c.late_by)):
        print(f"lateness after the {args.idle_timeout_ms} ms timeout, {name} the last byte: "
              f"silent {lateness(silent, of)}; talkers {lateness(talkers, of)}")

    echoed = sum(len(c.received) for c in talkers)
    summary = (f"{len(conns)} clients, idle timeout {args.idle_timeout_ms} ms: "
               f"{len(silent)} silent closed after {span(silent)}; "
               f"{len(talkers)} talkers open for {(talk_end - connected_at) * 1000:.0f} ms "
               f"of talk, then closed after {span(talkers)} idle; {echoed} bytes echoed")
    return check, summary


def start_server(path, idle_timeout_ms, timer, pin):
    server = subprocess.Popen([path, "--port", "0", "--idle-timeout-ms", str(idle_timeout_ms),
                               "--timer", timer],
                              stdout=subprocess.PIPE, text=True,
                              preexec_fn=(lambda: os.sched_setaffinity(0, {0})) if pin else None)
    line = server.stdout.readline()
    if not line.startswith("listening on "):
        server.kill()
        server.wait()
        sys.exit(f"{path} did not start: {line!r}")
    return server, int(line.split()[-1])


def stop_server(server, check):
    server.send_signal(signal.SIGTERM)
    try:
        out, _ = server.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        server.kill()
        server.communicate()
        check.fail("server did not exit within 5 s of SIGTERM")
        return "server killed"
    if server.returncode != 0:
        check.fail(f"server exited with status {server.returncode} after SIGTERM")
    return f"server exited with status {server.returncode} ({out.strip().replace(chr(10), '; ')})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--port", type=int, help="port of a running idle_echo_server")
    target.add_argument("--server", help="idle_echo_server binary to start and stop")
    parser.add_argument("--clients", type=int, default=2000)
    parser.add_argument("--timer", choices=("twheel", "asio"), default="twheel",
                        help="with --server: the server's --timer")
    parser.add_argument("--idle-timeout-ms", type=int, required=True,
                        help="the server's --idle-timeout-ms")
    parser.add_argument("--talk-ms", type=int, default=50, help="talkers send this often")
    parser.add_argument("--late-ms", type=float, default=20,
                        help="a close later than the timeout by more than this is a violation")
    parser.add_argument("--attempts", type=int, default=3,
                        help="runs in all when the only violations are late closes")
    parser.add_argument("--pin", action="store_true",
                        help="with --server: the server on CPU 0, this client on CPU 1")
    args = parser.parse_args()
    if (args.clients < 2 or args.idle_timeout_ms <= 0 or args.talk_ms <= 0 or args.late_ms <= 0
            or args.attempts < 1):
        parser.error("--clients must be at least 2, the times and --attempts positive")
    if args.talk_ms * 2 > args.idle_timeout_ms:
        parser.error("--talk-ms must be at most half of --idle-timeout-ms")
    if args.port is not None and not 0 < args.port < 65536:
        parser.error("--port must be 1..65535")

    if args.pin:
        if not args.server:
            parser.error("--pin needs --server")
        if not {0, 1} <= os.sched_getaffinity(0):
            parser.error("--pin needs CPUs 0 and 1")
        os.sched_setaffinity(0, {1})
    raise_open_file_limit(args.clients + 16)
    for attempt in range(1, args.attempts + 1):
        check, line = attempt_once(args)
        print(f"attempt {attempt}: {line}", flush=True)
        if check.violations == 0 or not check.late_only or args.port is not None:
            break
    return 0 if check.violations == 0 else 1


def attempt_once(args):
    server = None
    port = args.port
    if args.server:
        server, port = start_server(args.server, args.idle_timeout_ms, args.timer, args.pin)
    try:
        check, summary = run(args, port)
    except BaseException as e:
        if server is not None:
            server.kill()
            server.wait()
        if isinstance(e, OSError):  # refused, reset, out of descriptors: a failure too
            check = Checker()
            check.fail(f"error: {e}")
            return check, f"error: {e}"
        raise
    if server is not None:
        summary += "; " + stop_server(server, check)
    verdict = "ok" if check.violations == 0 else f"{check.violations} VIOLATIONS"
    return check, f"{summary}: {verdict}"


if __name__ == "__main__":
    sys.exit(main())
