#!/usr/bin/env python3
"""Static files: Rampart's `static` action beside nginx serving the same files.

HAProxy cannot serve files, so nginx is the only peer. Both serve one root holding a 1 KiB and a
1 MiB file, each as one worker pinned to CPU 0 (Rampart `--workers 1 --pin` under `taskset -c 0`;
nginx `worker_processes 1`, `worker_cpu_affinity 01`, `sendfile on`, `tcp_nopush on` as in
Debian's nginx.conf, no `open_file_cache`, no access log on either). wrk (one thread, on CPU 1)
drives them in turn, rounds interleaved (R, N, R, N, ...), each run after a 1 s unmeasured
warm-up. Before the first round every file is fetched once from each server and compared with the
bytes on disk.

  static-1k-c64   GET /1k.bin over 64 keep-alive connections
  static-1m-c16   GET /1m.bin over 16 keep-alive connections (Rampart: sendfile(2))

Per run: requests/s, p50/p99, and the server's CPU time per request (utime and stime of
/proc/PID/stat over the run, all threads, divided by the requests wrk completed), user and kernel
apart. Reported: medians over rounds, and Rampart's CPU per request over nginx's.

    bench/run.sh static                                   # 5 rounds of 10 s
    bench/run.sh static --rounds 1 --duration 3           # a smoke run
    python3 bench/static.py --rampart target/release/rampart --scenarios static-1k-c64
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request

from common import cpu_seconds, nginx_main, start, wait_port, write

PORTS = {"rampart": 18071, "nginx": 18073}
SCENARIOS = {
    # name: (path, connections)
    "static-1k-c64": ("/1k.bin", 64),
    "static-1m-c16": ("/1m.bin", 16),
}
SIZES = {"1k.bin": 1024, "1m.bin": 1 << 20}


def files(workdir):
    root = os.path.join(workdir, "www")
    os.makedirs(root, exist_ok=True)
    for name, size in SIZES.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(os.urandom(size))
    return root


def rampart(workdir, binary, root):
    conf = write(os.path.join(workdir, "rampart.toml"), f"""
[listeners.files]
bind = "127.0.0.1:{PORTS['rampart']}"
protocol = "http"

[[listeners.files.routes]]
static = {{ root = "{root}" }}
""")
    return start(["taskset", "-c", "0", os.path.abspath(binary), "run", "-c", conf, "--workers", "1", "--pin"],
                 workdir, "rampart")


def nginx(workdir, root):
    conf = write(os.path.join(workdir, "nginx.conf"), nginx_main(workdir, "nginx") + f"""
http {{
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 60s;
    keepalive_requests 10000000;
    server {{
        listen 127.0.0.1:{PORTS['nginx']};
        root {root};
    }}
}}
""")
    return start(["taskset", "-c", "0", "nginx", "-c", conf, "-p", workdir], workdir, "nginx")


def check_bytes(root, servers):
    """Every file from every server, byte for byte as on disk."""
    for server in servers:
        port = PORTS[server]
        for name in SIZES:
            with open(os.path.join(root, name), "rb") as f:
                want = f.read()
            got = urllib.request.urlopen(f"http://127.0.0.1:{port}/{name}", timeout=10).read()
            if got != want:
                sys.exit(f"{server} served /{name} wrong: {len(got)} bytes, want {len(want)}")


def parse_wrk(out):
    def ms(value, unit):
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {"requests": requests, "p50": ms(*p50.groups()), "p99": ms(*p99.groups()),
            "errors": (int(non2xx.group(1)) if non2xx else 0)
            + (sum(map(int, errors.groups())) if errors else 0)}


def wrk(port, path, conns, duration):
    cmd = ["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency",
           f"http://127.0.0.1:{port}{path}"]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def measure(cpu, load, duration):
    """One measured run: `load(seconds)` (wrk's output) after a 1 s unmeasured warm-up, the
    server's CPU time read around it by `cpu()` as (user, system) seconds. Returns parse_wrk's
    result with requests/s and CPU µs per request (user and kernel apart)."""
    load(1)
    user0, sys0 = cpu()
    out = load(duration)
    user1, sys1 = cpu()
    res = parse_wrk(out)
    n = max(res["requests"], 1)
    res.update(rps=res["requests"] / duration, user_us=(user1 - user0) * 1e6 / n,
               sys_us=(sys1 - sys0) * 1e6 / n, cpu_us=((user1 - user0) + (sys1 - sys0)) * 1e6 / n)
    return res


def run_round(proc, port, scenario, duration):
    path, conns = SCENARIOS[scenario]
    return measure(lambda: cpu_seconds(proc.pid), lambda seconds: wrk(port, path, conns, seconds), duration)


def report(results, args):
    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    lines = [f"rounds: {args.rounds} x {args.duration} s, wrk -t1 (CPU 1), one worker pinned to CPU 0 each", ""]
    for scenario, by_server in results.items():
        path, conns = SCENARIOS[scenario]
        lines += [f"{scenario}: GET {path}, {conns} keep-alive connections", "",
                  "| server | requests/s | p50 ms | p99 ms | CPU µs/request | user µs | kernel µs | errors |",
                  "|---|---|---|---|---|---|---|---|"]
        for server, rs in by_server.items():
            lines.append(f"| {server} | {med(rs, 'rps'):.0f} | {med(rs, 'p50'):.3f} | {med(rs, 'p99'):.3f} | "
                         f"{med(rs, 'cpu_us'):.2f} | {med(rs, 'user_us'):.2f} | {med(rs, 'sys_us'):.2f} | "
                         f"{sum(r['errors'] for r in rs)} |")
        if "rampart" in by_server and "nginx" in by_server:
            ratio = med(by_server["rampart"], "cpu_us") / med(by_server["nginx"], "cpu_us")
            lines += ["", f"Rampart's CPU per request is {ratio:.2f}x nginx's (target: at most 1.00)."]
        lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rampart", required=True)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--servers", default="rampart,nginx")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out"))
    args = ap.parse_args()
    scenarios = args.scenarios.split(",")
    servers = args.servers.split(",")
    for s in scenarios:
        if s not in SCENARIOS:
            sys.exit(f"unknown scenario {s}; known: {', '.join(SCENARIOS)}")
    for s in servers:
        if s not in PORTS:
            sys.exit(f"unknown server {s}; known: {', '.join(PORTS)}")
    os.makedirs(args.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="rampart-static-bench-")
    root = files(workdir)
    starters = {"rampart": lambda: rampart(workdir, args.rampart, root), "nginx": lambda: nginx(workdir, root)}
    procs = {}
    try:
        for s in servers:
            procs[s] = starters[s]()
        for s in servers:
            try:
                wait_port(PORTS[s])
            except RuntimeError:
                log = os.path.join(workdir, f"{s}.log")
                sys.exit(f"{s} did not start:\n" + open(log).read()[-3000:])
        check_bytes(root, servers)
        results = {}
        for rnd in range(args.rounds):
            for scenario in scenarios:
                for s in servers:
                    r = run_round(procs[s], PORTS[s], scenario, args.duration)
                    results.setdefault(scenario, {}).setdefault(s, []).append(r)
                    print(f"round {rnd + 1} {scenario} {s:8s} {r['rps']:8.0f} req/s  p99 {r['p99']:.3f} ms  "
                          f"CPU {r['cpu_us']:.2f} µs/req (user {r['user_us']:.2f}, kernel {r['sys_us']:.2f})  "
                          f"errors {r['errors']}", flush=True)
        text = report(results, args)
        write(os.path.join(args.out, "static.md"), text)
        print(text)
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
