#!/usr/bin/env python3
"""HTTP cache hits (issue 39): Rampart's `cache` beside nginx `proxy_cache` (its cache directory
on tmpfs, the same key: scheme, host and target) and Varnish (Debian `varnish`, malloc storage)
when it is installed, each one worker (Varnish: its smallest thread pool) pinned to CPU 0, in
front of the same backend (nginx on CPU 1, serving the files with `Cache-Control: max-age=3600`).
wrk (one thread, CPU 1) drives them in turn, rounds interleaved, each run after a 1 s unmeasured
warm-up; every response of a measured run is a hit (the warm-up filled the caches, and a check
before the first round fetches each file twice through each proxy and compares it with the bytes
on disk).

  cache-hit-1k-c64     GET /1k.bin over 64 keep-alive connections
  cache-hit-100k-c16   GET /100k.bin over 16 keep-alive connections
  cache-miss-1k-c64    GET /1k.bin?N with N new for every request (wrk's Lua), so every request
                       misses and its response is stored; `rampart-nocache` is the same Rampart
                       process's second listener, whose route has no cache: the miss's cost over
                       the plain proxy path (issue 39's target: at most 5% more)

Per run: requests/s, p50/p99, and the proxy's CPU time per request (utime and stime of
/proc/PID/stat over the run, all threads, divided by the requests wrk completed), user and kernel
apart. Reported: medians over rounds, and Rampart's CPU per request over each peer's.

    bench/run.sh cache                                   # 5 rounds of 10 s
    python3 bench/cache.py --rampart target/release/rampart --rounds 3 --duration 5
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request

from common import cpu_seconds, nginx_main, start, stop_all, wait_port, write
from static import measure, wrk

BACKEND_PORT = 18090
PORTS = {"rampart": 18091, "rampart-nocache": 18092, "nginx": 18093, "varnish": 18095}
SCENARIOS = {
    # name: (path, connections)
    "cache-hit-1k-c64": ("/1k.bin", 64),
    "cache-hit-100k-c16": ("/100k.bin", 16),
    "cache-miss-1k-c64": ("/1k.bin?", 64),
}
# A request target wrk's Lua makes new for every request (the miss scenario's).
UNIQUE = """
-- Unique across runs too (the warm-up's targets must not be hits in the measured run).
math.randomseed(os.time() * 1000003 + math.floor(os.clock() * 1e6))
local base = tostring(os.time()) .. "-" .. tostring(math.random(1, 1000000000)) .. "-"
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", wrk.path .. base .. n)
end
"""
SIZES = {"1k.bin": 1024, "100k.bin": 100 * 1024}


def files(workdir):
    root = os.path.join(workdir, "www")
    os.makedirs(root, exist_ok=True)
    for name, size in SIZES.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(os.urandom(size))
    return root


def backend(workdir, root):
    conf = write(os.path.join(workdir, "backend.conf"), nginx_main(workdir, "backend", "10") + f"""
http {{
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    keepalive_requests 10000000;
    server {{
        listen 127.0.0.1:{BACKEND_PORT};
        root {root};
        add_header Cache-Control "max-age=3600";
    }}
}}
""")
    return start(["taskset", "-c", "1", "nginx", "-c", conf, "-p", workdir], workdir, "backend")


def rampart(workdir, binary, size="256MiB", admin=None):
    """Rampart with a caching listener (and a plain one, `rampart-nocache`), a store of `size`,
    and an admin listener on port `admin` when given."""
    admin_table = f'[admin]\nlisten = "127.0.0.1:{admin}"\n' if admin else ""
    conf = write(os.path.join(workdir, "rampart.toml"), f"""{admin_table}
[caches.main]
size = "{size}"

[listeners.web]
bind = "127.0.0.1:{PORTS['rampart']}"
protocol = "http"

[[listeners.web.routes]]
upstream = "app"
cache = {{ store = "main" }}

[listeners.plain]
bind = "127.0.0.1:{PORTS['rampart-nocache']}"
protocol = "http"
upstream = "app"

[upstreams.app]
targets = ["127.0.0.1:{BACKEND_PORT}"]
""")
    return start(["taskset", "-c", "0", os.path.abspath(binary), "run", "-c", conf, "--workers", "1", "--pin"],
                 workdir, "rampart")


def nginx(workdir):
    # tmpfs, as a cache that is meant to be fast is set up.
    cache_dir = tempfile.mkdtemp(prefix="rampart-bench-nginx-cache-", dir="/dev/shm")
    conf = write(os.path.join(workdir, "nginx.conf"), nginx_main(workdir, "nginx") + f"""
http {{
    access_log off;
    keepalive_timeout 60s;
    keepalive_requests 10000000;
    proxy_cache_path {cache_dir} levels=1:2 keys_zone=main:16m max_size=256m inactive=60m use_temp_path=off;
    upstream backend {{
        server 127.0.0.1:{BACKEND_PORT};
        keepalive 32;
    }}
    server {{
        listen 127.0.0.1:{PORTS['nginx']};
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache main;
            proxy_cache_key $scheme$host$request_uri;
        }}
    }}
}}
""")
    return start(["taskset", "-c", "0", "nginx", "-c", conf, "-p", workdir], workdir, "nginx")


def varnish(workdir):
    vcl = write(os.path.join(workdir, "bench.vcl"), f"""
vcl 4.1;
backend default {{ .host = "127.0.0.1"; .port = "{BACKEND_PORT}"; }}
""")
    # No jail: the benchmark's files are in a private temporary directory.
    return start(["taskset", "-c", "0", "varnishd", "-F", "-j", "none", "-n", os.path.join(workdir, "varnish"),
                  "-a", f"127.0.0.1:{PORTS['varnish']}", "-f", vcl, "-s", "malloc,256m",
                  "-p", "thread_pools=1", "-p", "thread_pool_min=10"], workdir, "varnish")


def check_bytes(root, servers):
    """Every file through every proxy, twice (a miss, then a hit), byte for byte as on disk."""
    for server in servers:
        for name in SIZES:
            with open(os.path.join(root, name), "rb") as f:
                want = f.read()
            for _ in range(2):
                got = urllib.request.urlopen(f"http://127.0.0.1:{PORTS[server]}/{name}", timeout=10).read()
                if got != want:
                    sys.exit(f"{server} served /{name} wrong: {len(got)} bytes, want {len(want)}")


def tree_cpu_seconds(pid):
    """(user, system) CPU seconds of the process and its children (Varnish's worker is the
    manager's child; `taskset` execs, so the pid is the proxy's own)."""
    user, system = cpu_seconds(pid)
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        children = []
    for child in children:
        u, s = tree_cpu_seconds(child)
        user, system = user + u, system + s
    return user, system


def wrk_unique(port, path, conns, duration, script):
    cmd = ["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency", "-s", script,
           f"http://127.0.0.1:{port}{path}"]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def run_round(proc, port, scenario, duration, script):
    path, conns = SCENARIOS[scenario]
    if "miss" in scenario:
        load = lambda seconds: wrk_unique(port, path, conns, seconds, script)  # noqa: E731
    else:
        load = lambda seconds: wrk(port, path, conns, seconds)  # noqa: E731
    return measure(lambda: tree_cpu_seconds(proc.pid), load, duration)


def report(results, args):
    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    lines = [f"rounds: {args.rounds} x {args.duration} s, wrk -t1 (CPU 1), each proxy on CPU 0", ""]
    for scenario, by_server in results.items():
        path, conns = SCENARIOS[scenario]
        what = "a new target every request: every response a miss, stored" if "miss" in scenario else "every response a hit"
        lines += [f"{scenario}: GET {path} ({what}), {conns} keep-alive connections", "",
                  "| proxy | requests/s | p50 ms | p99 ms | CPU µs/request | user µs | kernel µs | errors |",
                  "|---|---|---|---|---|---|---|---|"]
        for server, rs in by_server.items():
            lines.append(f"| {server} | {med(rs, 'rps'):.0f} | {med(rs, 'p50'):.3f} | {med(rs, 'p99'):.3f} | "
                         f"{med(rs, 'cpu_us'):.2f} | {med(rs, 'user_us'):.2f} | {med(rs, 'sys_us'):.2f} | "
                         f"{sum(r['errors'] for r in rs)} |")
        for peer in ("rampart-nocache", "nginx", "varnish"):
            if "rampart" in by_server and peer in by_server:
                ratio = med(by_server["rampart"], "cpu_us") / med(by_server[peer], "cpu_us")
                lines += ["", f"Rampart's CPU per request is {ratio:.2f}x {peer}'s."]
        lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rampart", required=True)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    default_servers = "rampart,rampart-nocache,nginx" + (",varnish" if shutil.which("varnishd") else "")
    ap.add_argument("--servers", default=default_servers)
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
            sys.exit(f"unknown proxy {s}; known: {', '.join(PORTS)}")
    os.makedirs(args.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="rampart-cache-bench-")
    root = files(workdir)
    starters = {"rampart": lambda: rampart(workdir, args.rampart), "nginx": lambda: nginx(workdir),
                "varnish": lambda: varnish(workdir)}
    script = write(os.path.join(workdir, "unique.lua"), UNIQUE)
    procs = {"backend": backend(workdir, root)}
    try:
        wait_port(BACKEND_PORT)
        for s in servers:
            if s == "rampart-nocache":
                continue
            procs[s] = starters[s]()
        if "rampart-nocache" in servers:
            # The same process's second listener.
            procs["rampart-nocache"] = procs.get("rampart") or starters["rampart"]()
            procs.setdefault("rampart", procs["rampart-nocache"])
        for s in servers:
            try:
                wait_port(PORTS[s])
            except RuntimeError:
                log = os.path.join(workdir, f"{s}.log")
                sys.exit(f"{s} did not start:\n" + open(log).read()[-3000:])
        check_bytes(root, [s for s in servers if s != "rampart-nocache"])
        results = {}
        for rnd in range(args.rounds):
            for scenario in scenarios:
                # The plain path is the reference of the miss only.
                for s in [s for s in servers if s != "rampart-nocache" or "miss" in scenario]:
                    r = run_round(procs[s], PORTS[s], scenario, args.duration, script)
                    results.setdefault(scenario, {}).setdefault(s, []).append(r)
                    print(f"round {rnd + 1} {scenario} {s:8s} {r['rps']:8.0f} req/s  p99 {r['p99']:.3f} ms  "
                          f"CPU {r['cpu_us']:.2f} µs/req (user {r['user_us']:.2f}, kernel {r['sys_us']:.2f})  "
                          f"errors {r['errors']}", flush=True)
        text = report(results, args)
        write(os.path.join(args.out, "cache.md"), text)
        print(text)
    finally:
        # rampart-nocache is the rampart process's second listener: stopped once.
        stop_all({p.pid: p for p in procs.values()})
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
