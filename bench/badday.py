#!/usr/bin/env python3
"""The bad day (issue 29): Rampart, HAProxy and nginx in front of three backends that fail.

Three HTTP/1.1 backends (bench/out/fault-backend, on CPU 1 beside wrk) whose faults are set
through a control port while they run. Each proxy has one worker pinned to CPU 0 and the closest
settings it has for the same policy, one config for every scenario:

  policy            Rampart                      HAProxy 2.6                    nginx 1.22
  retry 503s etc.   retries = 2, retry_on =      retries 2, retry-on            proxy_next_upstream error
                    [reset, timeout, "503"]      conn-failure empty-response    timeout http_503,
                    (default retry budget:       response-timeout 503,          proxy_next_upstream_tries 3
                    20% of requests + 10/s)      option redispatch 1            (no budget)
                                                 (no budget)
  eject bad targets outlier_detection            observe layer7 error-limit 3   max_fails=3
                    consecutive_5xx = 3,         on-error mark-down (back after fail_timeout=10s
                    base_ejection_time = "10s",  2 good active checks, 2 s
                    slow_response = "100ms"      apart)
  per-try timeout   response_header_timeout 1s   timeout server 1s              proxy_read_timeout 1s
  limit and queue   max_requests_per_target 32,  maxconn 32, timeout queue 5s   max_conns=32 (no queue
                    queue timeout 5s                                            in nginx without Plus)

Every backend answers GET /__health with 200 (HAProxy's active check, which `observe` needs, so
an ejection is passive: made on real traffic). Round robin everywhere.

Scenarios (each proxy started fresh for each run, warmed 1 s on healthy backends, then the fault
is set and wrk runs; rounds interleave the proxies):

  one-503     backend 0 answers 503 to everything; 64 connections. Success rate seen by clients
              (goal 100%) and upstream attempts per client request.
  one-503-no-outlier
              the same with no ejection configured (Rampart without outlier_detection, HAProxy
              without observe, nginx with max_fails=0): retries alone must lose nothing.
  all-503     every backend answers 503; 64 connections. Attempts per client request (goal <= 1.2).
  one-slow    2 s into the run backend 0 turns slow (+200 ms per request); 64 connections. Client
              p99, and when backend 0 stopped getting requests (its first gap of 1 s or more after
              it turned slow; "-" when it served to the end).
  burst-2x    each backend serves in 20 ms and sheds (503 at once) past 32 requests at once:
              capacity 96 at once; wrk holds 192 connections (2x). Errors (goal 0 within the
              queue timeout) and p99.

    bench/run.sh badday                                  # 3 rounds of 10 s
    bench/run.sh badday --scenarios one-slow --rounds 1
    python3 bench/badday.py --rampart target/release/rampart --fault-backend bench/out/fault-backend
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from common import cpu_seconds, nginx_main, start, wait_port, write
from static import parse_wrk

PORTS = {"rampart": 18101, "haproxy": 18102, "nginx": 18103}
CONTROL_PORT = 18090
BACKEND_PORTS = [18091, 18092, 18093]
LIMIT = 32
SCENARIOS = {
    # name: (connections, faults set before the run, (seconds into the run, faults set then))
    "one-503": (64, [(0, {"status": 503})], None),
    "one-503-no-outlier": (64, [(0, {"status": 503})], None),
    "all-503": (64, [(b, {"status": 503}) for b in range(3)], None),
    "one-slow": (64, [], (2.0, [(0, {"delay_ms": 200})])),
    "burst-2x": (2 * LIMIT * 3, [(b, {"delay_ms": 20, "limit": LIMIT}) for b in range(3)], None),
}
TARGETS = [f"127.0.0.1:{p}" for p in BACKEND_PORTS]
# Scenarios run with no ejection configured (outlier detection, observe, max_fails).
NO_OUTLIER = {"one-503-no-outlier"}
RAMPART_OUTLIER = 'outlier_detection = { consecutive_5xx = 3, base_ejection_time = "10s", slow_response = "100ms" }\n'


def rampart(workdir, binary, outlier=True):
    targets = ", ".join(f'"{t}"' for t in TARGETS)
    ejection = RAMPART_OUTLIER if outlier else ""
    conf = write(os.path.join(workdir, "rampart.toml"), f"""
[listeners.bench]
bind = "127.0.0.1:{PORTS['rampart']}"
protocol = "http"

[[listeners.bench.routes]]
upstream = "app"

[upstreams.app]
targets = [{targets}]
retries = 2
retry_on = ["reset", "timeout", "503"]
response_header_timeout = "1s"
{ejection}max_requests_per_target = {LIMIT}
queue = {{ size = 1000, timeout = "5s" }}
""")
    return start(["taskset", "-c", "0", os.path.abspath(binary), "run", "-c", conf, "--workers", "1", "--pin"],
                 workdir, "rampart")


def haproxy(workdir, outlier=True):
    observe = "observe layer7 error-limit 3 on-error mark-down " if outlier else ""
    servers = "\n".join(f"    server b{i} {t}" for i, t in enumerate(TARGETS))
    conf = write(os.path.join(workdir, "haproxy.cfg"), f"""
global
    nbthread 1
    cpu-map 1/1 0
    maxconn 9000
defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 60s
    timeout server 1s
    timeout queue 5s
    timeout http-keep-alive 60s
    retries 2
    retry-on conn-failure empty-response response-timeout 503
    option redispatch 1
frontend bench
    bind 127.0.0.1:{PORTS['haproxy']}
    default_backend app
backend app
    balance roundrobin
    option httpchk GET /__health
    default-server check inter 2s fall 3 rise 2 {observe}maxconn {LIMIT}
{servers}
""")
    return start(["taskset", "-c", "0", "haproxy", "-db", "-f", conf], workdir, "haproxy")


def nginx(workdir, outlier=True):
    fails = "max_fails=3 fail_timeout=10s" if outlier else "max_fails=0"
    servers = "\n".join(f"        server {t} {fails} max_conns={LIMIT};" for t in TARGETS)
    conf = write(os.path.join(workdir, "nginx.conf"), nginx_main(workdir, "nginx") + f"""
http {{
    access_log off;
    keepalive_timeout 60s;
    keepalive_requests 10000000;
    upstream app {{
{servers}
        keepalive 1024;
    }}
    server {{
        listen 127.0.0.1:{PORTS['nginx']};
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_next_upstream error timeout http_503;
            proxy_next_upstream_tries 3;
            proxy_read_timeout 1s;
        }}
    }}
}}
""")
    return start(["taskset", "-c", "0", "nginx", "-c", conf, "-p", workdir], workdir, "nginx")


def control(path):
    with urllib.request.urlopen(f"http://127.0.0.1:{CONTROL_PORT}{path}", timeout=5) as r:
        return r.read()


def set_faults(faults):
    for b, settings in faults:
        query = "&".join(f"{k}={v}" for k, v in settings.items())
        control(f"/set?b={b}&{query}")


def wrk(port, conns, duration):
    cmd = ["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency", "--timeout", "10s",
           f"http://127.0.0.1:{port}/"]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def ejected_after(arrivals_ms, observed_ms):
    """Seconds from the fault to the last request before backend 0's first gap of 1 s or more
    (the end of the run counts as such a gap when it is 1 s after the last request); None when
    the backend kept getting requests to the end."""
    times = sorted(arrivals_ms) + [observed_ms]
    for a, b in zip(times, times[1:]):
        if b - a >= 1000.0:
            return a / 1000
    return None


def run_once(name, starter, scenario, duration, workdir):
    conns, faults, change = SCENARIOS[scenario]
    control("/reset")
    proc = starter(scenario not in NO_OUTLIER)
    try:
        try:
            wait_port(PORTS[name])
        except RuntimeError:
            sys.exit(f"{name} did not start:\n" + open(os.path.join(workdir, f"{name}.log")).read()[-3000:])
        wrk(PORTS[name], 64, 1)  # warm-up on healthy backends, unmeasured
        control("/reset")
        set_faults(faults)
        timer = None
        if change:
            timer = threading.Timer(change[0], set_faults, args=(change[1],))
            timer.start()
        user0, sys0 = cpu_seconds(proc.pid)
        out = wrk(PORTS[name], conns, duration)
        user1, sys1 = cpu_seconds(proc.pid)
        if timer:
            timer.join()
        stats = json.loads(control("/stats"))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
    res = parse_wrk(out)
    n = max(res["requests"], 1)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    res["non2xx"] = int(non2xx.group(1)) if non2xx else 0
    res["socket_errors"] = sum(map(int, socket_errors.groups())) if socket_errors else 0
    attempts = sum(s["requests"] for s in stats)
    res.update(rps=res["requests"] / duration, success=100.0 * (n - res["non2xx"]) / n, attempts=attempts / n,
               shed=sum(s["shed"] for s in stats), cpu_us=((user1 - user0) + (sys1 - sys0)) * 1e6 / n)
    if change:
        res["slow_requests"] = len(stats[0]["arrivals_ms"])
        res["ejected_after"] = ejected_after(stats[0]["arrivals_ms"], (duration - change[0]) * 1000)
    return res


def report(results, args):
    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    lines = [f"rounds: {args.rounds} x {args.duration} s, wrk -t1 (CPU 1) with the three fault backends (CPU 1), "
             "one worker pinned to CPU 0 each; medians over rounds", "",
             "| scenario | proxy | success % | non-2xx | socket errors | attempts/request | p50 ms | p99 ms | requests/s | "
             "CPU µs/request | slow target: requests, ejected after s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for scenario, by_proxy in results.items():
        for proxy, rs in by_proxy.items():
            slow = "-"
            if "slow_requests" in rs[0]:
                after = [r["ejected_after"] for r in rs]
                shown = ", ".join("never" if a is None else f"{a:.2f}" for a in after)
                slow = f"{med(rs, 'slow_requests'):.0f}, {shown}"
            lines.append(f"| {scenario} | {proxy} | {med(rs, 'success'):.3f} | {med(rs, 'non2xx'):.0f} | "
                         f"{med(rs, 'socket_errors'):.0f} | "
                         f"{med(rs, 'attempts'):.2f} | {med(rs, 'p50'):.2f} | {med(rs, 'p99'):.2f} | "
                         f"{med(rs, 'rps'):.0f} | {med(rs, 'cpu_us'):.1f} | {slow} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rampart", required=True)
    ap.add_argument("--fault-backend", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out",
                                                            "fault-backend"))
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--proxies", default="rampart,haproxy,nginx")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out"))
    args = ap.parse_args()
    scenarios, proxies = args.scenarios.split(","), args.proxies.split(",")
    for s in scenarios:
        if s not in SCENARIOS:
            sys.exit(f"unknown scenario {s}; known: {', '.join(SCENARIOS)}")
    for p in proxies:
        if p not in PORTS:
            sys.exit(f"unknown proxy {p}; known: {', '.join(PORTS)}")
    os.makedirs(args.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="rampart-badday-bench-")
    starters = {"rampart": lambda outlier: rampart(workdir, args.rampart, outlier),
                "haproxy": lambda outlier: haproxy(workdir, outlier), "nginx": lambda outlier: nginx(workdir, outlier)}
    listen = ",".join(TARGETS)
    backends = subprocess.Popen(["taskset", "-c", "1", os.path.abspath(args.fault_backend), "-control",
                                 f"127.0.0.1:{CONTROL_PORT}", "-listen", listen], env={**os.environ, "GOMAXPROCS": "1"},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(CONTROL_PORT)
        results = {}
        for rnd in range(args.rounds):
            for scenario in scenarios:
                for p in proxies:
                    r = run_once(p, starters[p], scenario, args.duration, workdir)
                    results.setdefault(scenario, {}).setdefault(p, []).append(r)
                    extra = ""
                    if "slow_requests" in r:
                        extra = f"  slow target {r['slow_requests']} requests, ejected after {r['ejected_after']}"
                    print(f"round {rnd + 1} {scenario:9s} {p:8s} success {r['success']:.3f}%  non-2xx {r['non2xx']}  "
                          f"socket errors {r['socket_errors']}  "
                          f"attempts/request {r['attempts']:.2f}  p99 {r['p99']:.2f} ms  {r['rps']:.0f} req/s{extra}",
                          flush=True)
        text = report(results, args)
        write(os.path.join(args.out, "badday.md"), text)
        print(text)
    finally:
        backends.terminate()
        backends.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
