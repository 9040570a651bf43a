#!/usr/bin/env python3
"""Reads one proxy's CPU time three ways under the gRPC load of bench.py (issue 37), to check the
reading bench.py uses: utime+stime of /proc/PID/stat (clock ticks; the total is the scheduler's
run time, split between user and kernel by the 250 Hz tick's samples), the run time of every thread
from /proc/PID/task/*/schedstat (nanoseconds), and `perf stat -e task-clock`; with perf's count of
system calls and `epoll_wait` calls. The proxies are started exactly as bench.py starts them
(h2.py's command lines and configs, one worker on CPU 0; the backend and h2load on CPU 1), and each
round is a 1 s warm-up, then `h2load -D SECONDS` (64 connections x 10 streams).

  python3 bench/cpu_check.py --rampart target/release/rampart [--mode grpc|grpc-interop]
                             [--proxies rampart,haproxy,nginx] [--rounds 2] [--duration 6]

Needs bench/out/grpc-backend (and bench/out/grpc-interop for grpc-interop), built by run.sh, and
perf (linux-perf). Prints one line per round and proxy.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import shutil
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import GRPC_BACKEND_PORT, GRPC_INTEROP_PORT, cpu_seconds, stop_all, threads, wait_port  # noqa: E402
from h2 import (GRPC_MODES, H2_PORTS_BY_MODE, H2_SCENARIOS, grpc_backend, grpc_interop_server,  # noqa: E402
                grpc_request, h2_haproxy, h2_nginx, h2_rampart)


def run_ns(pid):
    """Run time of every thread of the process, seconds (schedstat's first field is in ns)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


def one_round(name, pid, port, mode, request, duration):
    scenario = next(s for s, v in H2_SCENARIOS.items() if v[0] == mode)
    _, conns, path, streams, _ = H2_SCENARIOS[scenario]
    url = f"http://127.0.0.1:{port}{path}"
    cmd = ["taskset", "-c", "1", "h2load", "-c", str(conns), "-m", str(streams), "-d", request,
           "-H", "content-type: application/grpc", "-H", "te: trailers"]
    subprocess.run(cmd + ["-D", "1", url], capture_output=True, check=True)
    u0, s0 = cpu_seconds(pid)
    r0, t0 = run_ns(pid), time.monotonic()
    perf = subprocess.Popen(["taskset", "-c", "1", "perf", "stat", "-x,", "-e",
                             "task-clock,raw_syscalls:sys_enter,syscalls:sys_enter_epoll_wait", "-p", str(pid)],
                            stderr=subprocess.PIPE, text=True)
    out = subprocess.run(cmd + ["-D", str(duration), url], capture_output=True, text=True).stdout
    perf.send_signal(signal.SIGINT)
    perf_err = perf.communicate()[1]
    u1, s1 = cpu_seconds(pid)
    r1, t1 = run_ns(pid), time.monotonic()
    m = re.search(r"(\d+) succeeded, (\d+) failed", out)
    calls = int(m.group(1)) if m else 0
    if not calls or int(m.group(2)):
        sys.exit(f"{name}: h2load failed:\n{out[-1500:]}")
    counts = {}
    for line in perf_err.splitlines():
        fields = line.split(",")
        try:
            counts[fields[2]] = float(fields[0])
        except (IndexError, ValueError):
            pass
    per = lambda seconds: seconds * 1e6 / calls
    print(f"{name:8s} {calls / (t1 - t0):7.0f} calls/s  /proc/PID/stat {per(u1 - u0 + s1 - s0):6.2f} µs/call "
          f"(user {per(u1 - u0):5.2f}, kernel {per(s1 - s0):5.2f})  schedstat {per(r1 - r0):6.2f}  "
          f"perf task-clock {counts.get('task-clock', 0) * 1e3 / calls:6.2f}  "
          f"busy {(r1 - r0) / (t1 - t0) * 100:3.0f}%  system calls/call "
          f"{counts.get('raw_syscalls:sys_enter', 0) / calls:.2f}  calls/epoll_wait "
          f"{calls / max(counts.get('syscalls:sys_enter_epoll_wait', 0), 1):.0f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rampart", required=True)
    ap.add_argument("--mode", choices=tuple(GRPC_MODES), default="grpc")
    ap.add_argument("--proxies", default="rampart,haproxy,nginx")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=6)
    ap.add_argument("--out", default="bench/out")
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="rampart-cpu-check-")
    grpc_bin = os.path.abspath(os.path.join(args.out, "grpc-backend"))
    procs = {}
    try:
        _, request, _ = grpc_request(workdir, grpc_bin, GRPC_MODES[args.mode][1])
        if args.mode == "grpc":
            procs["backend"] = grpc_backend(workdir, grpc_bin)
            wait_port(GRPC_BACKEND_PORT)
        else:
            procs["backend"] = grpc_interop_server(workdir, os.path.abspath(os.path.join(args.out, "grpc-interop")))
            wait_port(GRPC_INTEROP_PORT)
        starters = {"rampart": lambda: h2_rampart(workdir, args.rampart, args.mode, None),
                    "haproxy": lambda: h2_haproxy(workdir, args.mode, None),
                    "nginx": lambda: h2_nginx(workdir, args.mode, None)}
        proxies = args.proxies.split(",")
        for p in proxies:
            procs[p] = starters[p]()
            wait_port(H2_PORTS_BY_MODE[args.mode][p])
            print(f"{p}: pid {procs[p].pid}, threads (CPUs): "
                  + ", ".join(f"{n} ({c})" for n, c in threads(procs[p].pid)), flush=True)
        for _ in range(args.rounds):
            for p in proxies:
                one_round(p, procs[p].pid, H2_PORTS_BY_MODE[args.mode][p], args.mode, request, args.duration)
    finally:
        stop_all(procs)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
