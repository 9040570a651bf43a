#!/usr/bin/env python3
"""HTTP/3 through the proxy: Rampart (`http3 = true` on a TLS HTTP listener) beside Caddy as a
reverse proxy with HTTP/3 on, both to bench.py's nginx backend (HTTP/1.1, on CPU 1, `GET /`
answered with the 23 bytes "hello from the backend\\n"), and Rampart's own HTTP/2 over TLS on the
same listener beside it.

Each proxy runs one worker pinned to CPU 0, the load on CPU 1:

  rampart  `rampart run -c CONFIG --workers 1 --pin` under `taskset -c 0`: one `http` listener with
           `http3 = true` and `[listeners.web.tls] certificates = [...]` (HTTP/1.1 and HTTP/2 on
           TCP, HTTP/3 on UDP, the same port), upstream `app` = the backend
  caddy    Debian's caddy (2.6.2) with a JSON config: admin off, one server with protocols h1 h2 h3,
           the same certificate (`load_files`), automatic HTTPS off, `reverse_proxy` to the
           backend; `GOMAXPROCS=1 taskset -c 0` (all of Go's threads on CPU 0, all counted)

The certificate is bench.py's (https.tls_files: ECDSA P-256 for `localhost`). Load:

  h3-c16m10   h3load -c 16 -m 10   keep-alive QUIC connections, 10 requests in flight on each
  h3-c64m1    h3load -c 64 -m 1    keep-alive, one request in flight on each
  h3-c16r1    h3load -c 16 -m 1 -r 1   a new connection (full handshake) per request, 16 at a time
  h2-c16m10   h2load -c 16 -m 10 over TLS (ALPN h2) to the same listener (Caddy's too)

h3load is bench/h3-stacks's quinn + h3 load client (built by run.sh: `cargo build --release --bin
h3load` there); it counts a request as succeeded on status 200 with the backend's 23 bytes
(`-b 23`) and does not verify certificates. Each run: a short unmeasured warm-up whose rate sets
the request count of the measured run (rate x DURATION, as h2.py does), then the measured run
with the proxy's utime and stime (/proc/PID/stat, all threads) read around it. Reported, medians
over rounds interleaved across proxies: requests/s, p50/p99 latency (h3load's and h2load's
per-request times; with -r 1 a new connection's handshake is not in its request's time), CPU µs
per request user and kernel apart, and how busy CPU 0 was (CPU seconds over the run's wall time).
A run with any failed request fails.

A proxy that does not start (nothing listens on its TCP port within 10 s, or one HTTP/3 request
through it does not succeed within 15 s) is skipped with its log's end; the others run.

    bench/run.sh h3                                     # 3 rounds of 10 s
    bench/run.sh h3 --scenarios h3-c16m10,h2-c16m10 --proxies rampart --rounds 5
    python3 bench/h3.py --rampart target/release/rampart --proxies caddy --rounds 1 --duration 3
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
import time

from bench import backend
from common import BACKEND_PORT, TLS_HOST, cpu_seconds, require_pinned, start, stop_all, wait_port, write
from h2 import parse_h2load
from https import tls_files

PORTS = {"rampart": 18151, "caddy": 18153}
BODY = 23  # "hello from the backend\n"
SCENARIOS = {
    # name: (load generator, connections, streams per connection, requests per connection or None)
    "h3-c16m10": ("h3load", 16, 10, None),
    "h3-c64m1": ("h3load", 64, 1, None),
    "h3-c16r1": ("h3load", 16, 1, 1),
    "h2-c16m10": ("h2load", 16, 10, None),
}
H3LOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "h3-stacks", "target", "release", "h3load")


def rampart(workdir, binary, tls):
    conf = write(os.path.join(workdir, "rampart-h3.toml"), f"""
[global]
workers = 1

[listeners.web]
bind = "127.0.0.1:{PORTS['rampart']}"
protocol = "http"
http3 = true
upstream = "app"

[listeners.web.tls]
certificates = [{{ cert = "{tls[0]}", key = "{tls[1]}" }}]

[upstreams.app]
targets = ["127.0.0.1:{BACKEND_PORT}"]
""")
    return start(["taskset", "-c", "0", os.path.abspath(binary), "run", "-c", conf, "--workers", "1", "--pin"],
                 workdir, "rampart")


def caddy(workdir, tls):
    data = os.path.join(workdir, "caddy")
    os.makedirs(data, exist_ok=True)
    conf = write(os.path.join(workdir, "caddy.json"), json.dumps({
        "admin": {"disabled": True, "config": {"persist": False}},
        "storage": {"module": "file_system", "root": data},
        "apps": {
            "tls": {"certificates": {"load_files": [{"certificate": tls[0], "key": tls[1]}]}},
            "http": {"servers": {"bench": {
                "listen": [f"127.0.0.1:{PORTS['caddy']}"],
                "protocols": ["h1", "h2", "h3"],
                "automatic_https": {"disable": True},
                "tls_connection_policies": [{}],
                "routes": [{"handle": [{"handler": "reverse_proxy",
                                        "upstreams": [{"dial": f"127.0.0.1:{BACKEND_PORT}"}]}]}],
            }}},
        },
    }, indent=1))
    env = dict(os.environ, GOMAXPROCS="1", XDG_CONFIG_HOME=data, XDG_DATA_HOME=data)
    log = open(os.path.join(workdir, "caddy.log"), "w")
    return subprocess.Popen(["taskset", "-c", "0", "caddy", "run", "--config", conf], stdout=log,
                            stderr=subprocess.STDOUT, cwd=workdir, env=env)


def h3load(port, conns, streams, per_conn, total, timeout=None):
    cmd = ["taskset", "-c", "1", H3LOAD, "-c", str(conns), "-m", str(streams), "-n", str(total), "-b", str(BODY)]
    if per_conn:
        cmd += ["-r", str(per_conn)]
    try:
        proc = subprocess.run(cmd + [f"https://127.0.0.1:{port}/"], capture_output=True, text=True,
                              timeout=timeout or max(60, total // 200))
        return proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        return f"{e.stdout or ''}\nh3load did not finish {total} requests in {e.timeout} s"


def parse_h3load(out, total):
    res = {"rps": 0.0, "requests": 0, "p50": float("nan"), "p99": float("nan"), "errors": 0, "failed": ""}
    m = re.search(r"finished in ([\d.]+)s, ([\d.]+) req/s", out)
    counts = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed", out)
    lat = re.search(r"latency: p50 ([\d.]+|NaN) ms, p90 [\d.NaN]+ ms, p99 ([\d.]+|NaN) ms", out)
    conn_err = re.search(r"connect errors: (\d+)", out)
    if not (m and counts):
        res["failed"] = "h3load: " + " / ".join(out.strip().splitlines()[-3:])
        return res
    res["rps"], res["requests"] = float(m.group(2)), int(counts.group(1))
    if lat:
        res["p50"], res["p99"] = float(lat.group(1)), float(lat.group(2))
    res["errors"] = int(counts.group(2)) + (int(conn_err.group(1)) if conn_err else 0)
    if res["errors"] or res["requests"] < total:
        res["failed"] = f"{res['requests']} of {total} requests succeeded ({res['errors']} failed or connect errors)"
    return res


def run(pid, port, scenario, duration, workdir):
    """One measured run of `scenario` through `port`; the proxy's CPU time is process `pid`'s."""
    tool, conns, streams, per_conn = SCENARIOS[scenario]
    if tool == "h2load":
        cmd = ["taskset", "-c", "1", "h2load", "-c", str(conns), "-m", str(streams)]
        url = f"https://{TLS_HOST}:{port}/"
        warm = subprocess.run(cmd + ["-D", "1", url], capture_output=True, text=True, timeout=60).stdout
        rate = re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", warm)
    else:
        warm_n = conns * 20 if per_conn else conns * streams * 200
        rate = re.search(r"finished in [\d.]+s, ([\d.]+) req/s", h3load(port, conns, streams, per_conn, warm_n))
    total = max(int(float(rate.group(1)) * duration) if rate else 0, conns * streams * 10)
    total = -(-total // conns) * conns
    log = os.path.join(workdir, "h2load-requests.log")
    user0, sys0 = cpu_seconds(pid)
    t0 = time.monotonic()
    if tool == "h2load":
        try:
            proc = subprocess.run(cmd + ["-n", str(total), "--log-file", log, url], capture_output=True, text=True,
                                  timeout=duration * 10 + 30)
            out = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as e:
            out = f"{e.stdout or ''}\nh2load did not finish {total} requests in {e.timeout} s"
    else:
        out = h3load(port, conns, streams, per_conn, total)
    wall = time.monotonic() - t0
    user1, sys1 = cpu_seconds(pid)
    if tool == "h2load":
        res = parse_h2load(out, log, "h2")
        if os.path.exists(log):
            os.remove(log)
    else:
        res = parse_h3load(out, total)
    n = max(res["requests"], 1)
    res.update(user_us=(user1 - user0) * 1e6 / n, sys_us=(sys1 - sys0) * 1e6 / n,
               cpu_us=((user1 - user0) + (sys1 - sys0)) * 1e6 / n,
               busy=((user1 - user0) + (sys1 - sys0)) / wall if wall > 0 else float("nan"))
    return res


def report(results, args, proxies):
    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    lines = [f"HTTP/3 (h3load) and HTTP/2 over TLS (h2load) through each proxy (one worker on CPU 0) to nginx "
             f"(HTTP/1.1, CPU 1); load on CPU 1. Medians of {args.rounds} interleaved rounds of about "
             f"{args.duration} s.", "",
             "| scenario | proxy | requests/s | p50 ms | p99 ms | CPU µs/request | user µs | kernel µs | busy % | "
             "failed rounds |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    notes = []
    for (scenario, p), rs in results.items():
        failed = sum(1 for r in rs if r["failed"])
        notes += [f"- {scenario} {p}: {r['failed']}" for r in rs if r["failed"]]
        lines.append(f"| {scenario} | {p} | {med(rs, 'rps'):.0f} | {med(rs, 'p50'):.3f} | {med(rs, 'p99'):.3f} | "
                     f"{med(rs, 'cpu_us'):.2f} | {med(rs, 'user_us'):.2f} | {med(rs, 'sys_us'):.2f} | "
                     f"{med(rs, 'busy') * 100:.0f} | {failed} |")
    for scenario in dict.fromkeys(k[0] for k in results):
        if (scenario, "rampart") in results and (scenario, "caddy") in results:
            ratio = med(results[(scenario, "rampart")], "cpu_us") / med(results[(scenario, "caddy")], "cpu_us")
            notes.append(f"- {scenario}: Rampart's CPU per request is {ratio:.2f}x Caddy's (issue 40: at most 0.70)")
    skipped = [p for p in proxies if not any(k[1] == p for k in results)]
    if skipped:
        notes.append(f"- not measured (did not start): {', '.join(skipped)}")
    if notes:
        lines += ["", "Notes:", ""] + list(dict.fromkeys(notes))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rampart", default="target/release/rampart")
    ap.add_argument("--proxies", default="rampart,caddy", help=f"comma-separated, from {', '.join(PORTS)}")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out"))
    args = ap.parse_args()
    proxies, scenarios = args.proxies.split(","), args.scenarios.split(",")
    for p in proxies:
        if p not in PORTS:
            sys.exit(f"unknown proxy {p}; known: {', '.join(PORTS)}")
    for s in scenarios:
        if s not in SCENARIOS:
            sys.exit(f"unknown scenario {s}; known: {', '.join(SCENARIOS)}")
    for tool in ("taskset", "nginx", "h2load", "openssl") + (("caddy",) if "caddy" in proxies else ()):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: run bench/run.sh h3, which installs it")
    if not os.access(H3LOAD, os.X_OK):
        sys.exit(f"{H3LOAD} is missing: run bench/run.sh h3, which builds it (bench/h3-stacks)")
    os.makedirs(args.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="rampart-h3-bench-")
    procs = {}
    try:
        tls = tls_files(args.out)
        procs["backend"] = backend(workdir)
        wait_port(BACKEND_PORT)
        starters = {"rampart": lambda: rampart(workdir, args.rampart, tls), "caddy": lambda: caddy(workdir, tls)}
        running = []
        for p in proxies:
            procs[p] = starters[p]()
            ok = False
            try:
                wait_port(PORTS[p])  # TCP (HTTP/1.1 and HTTP/2) on the same port
                # Then one HTTP/3 request (quinn resends its Initial should the UDP socket come
                # a moment later), bounded.
                ok = parse_h3load(h3load(PORTS[p], 1, 1, None, 1, timeout=15), 1)["requests"] == 1
            except RuntimeError:
                pass
            if not ok:
                text = open(os.path.join(workdir, f"{p}.log")).read()[-3000:]
                print(f"SKIPPED {p}: no HTTP/3 request through 127.0.0.1:{PORTS[p]} succeeded"
                      f" ({'exited ' + str(procs[p].poll()) if procs[p].poll() is not None else 'still running'});"
                      f" its log:\n{text}", flush=True)
                procs.pop(p).kill()
                continue
            require_pinned(p, procs[p].pid)
            running.append(p)
        if not running:
            sys.exit("no proxy to measure")
        results = {}
        for scenario in scenarios:
            for rnd in range(args.rounds):
                for p in running:
                    r = run(procs[p].pid, PORTS[p], scenario, args.duration, workdir)
                    results.setdefault((scenario, p), []).append(r)
                    print(f"{scenario} round {rnd + 1} {p:8s} {r['rps']:9.0f} req/s  p50 {r['p50']:.3f} ms  "
                          f"p99 {r['p99']:.3f} ms  CPU {r['cpu_us']:.2f} µs/req (user {r['user_us']:.2f}, "
                          f"kernel {r['sys_us']:.2f})  busy {r['busy'] * 100:.0f}%"
                          + (f"  FAILED: {r['failed']}" if r["failed"] else ""), flush=True)
        text = report(results, args, proxies)
        write(os.path.join(args.out, "h3.md"), text)
        print(text)
    finally:
        stop_all(procs)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
