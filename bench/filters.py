#!/usr/bin/env python3
"""What gateway filters cost (issue 15), Rampart against itself in one run.

Each variant is a Rampart process with one worker pinned to CPU 0 and one route to the same
backend (nginx, one worker, `return 200`, on CPU 1); they differ only in the route's filters:

  bare        no filter
  request_id  request_id
  jwt         jwt (HS256, a key file; every request carries the same valid token)
  rate_limit  rate_limit, local mode, keyed on the client address, a rate it never reaches
  all3        request_id + jwt + rate_limit (local): the issue's figure
  global      rate_limit in global mode against redis-server (on CPU 1), a rate it never reaches

wrk (one thread, 64 keep-alive connections, on CPU 1) drives each variant in turn, rounds
interleaved, each after a 1 s unmeasured warm-up. Per round: requests/s, p50/p99, the proxy's CPU
time per request (utime and stime of /proc/PID/stat over the round, all threads, divided by the
requests wrk completed), and its user-space instructions per request (`perf stat -e
instructions:u` attached to the process for the round; steadier than CPU time on a shared VM).
Reported: medians over rounds, and each variant's difference from `bare`.

For `global`, Redis round trips per request are the growth of redis-server's `cmdstat_evalsha`
and `cmdstat_eval` calls over the round (INFO commandstats), divided by the requests.

Where `perf` cannot count instructions (virtual machines without PMU access), `--instructions N`
adds a second, deterministic measure: each variant runs under `valgrind --tool=callgrind`, takes
200 unmeasured requests, then its counters are zeroed (`callgrind_control -z`), N keep-alive
requests are sent one after another, and the instructions executed by the whole process (every
thread, user space) are dumped and divided by N. The same binary and inputs give the same count
whatever else the machine is doing.

    bench/run.sh filters                       # 5 rounds of 10 s
    bench/run.sh filters --rounds 7 --duration 15 --variants bare,all3
    bench/run.sh filters --rounds 0 --instructions 2000
"""
import argparse
import base64
import hashlib
import hmac
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from common import BACKEND_PORT, cpu_seconds, nginx_main, start, wait_port, write

VARIANTS = ["bare", "request_id", "jwt", "rate_limit", "all3", "global"]
PORT_BASE = 18100
REDIS_PORT = 18190
# Far above what one core can push: the limiter works on every request and never refuses.
RATE = 'rate = "50000000/s", burst = 50000000'
FILTERS = {
    "bare": [],
    "request_id": ['{ type = "request_id" }'],
    "jwt": ['{ type = "jwt", keys = "SECRET", algorithms = ["HS256"] }'],
    "rate_limit": [f'{{ type = "rate_limit", {RATE} }}'],
    "all3": ['{ type = "request_id" }', '{ type = "jwt", keys = "SECRET", algorithms = ["HS256"] }',
             f'{{ type = "rate_limit", {RATE} }}'],
    "global": [f'{{ type = "rate_limit", mode = "global", redis = "127.0.0.1:{REDIS_PORT}", {RATE} }}'],
}


def backend(workdir):
    conf = write(os.path.join(workdir, "backend.conf"), nginx_main(workdir, "backend", "10", 4096) + f"""
http {{
    access_log off;
    keepalive_requests 10000000;
    server {{
        listen 127.0.0.1:{BACKEND_PORT} backlog=4096;
        location = / {{ return 200 "hello from the backend\\n"; }}
    }}
}}
""")
    return start(["nginx", "-c", conf, "-p", workdir], workdir, "backend")


def hs256_token(secret):
    """A JWT signed with HS256 that expires in a day."""
    def b64(data):
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = b64(json.dumps({"sub": "bench", "exp": int(time.time()) + 86400}).encode())
    signature = hmac.new(secret, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    return f"{header}.{claims}.{b64(signature)}"


def rampart(workdir, binary, variant, port, secret_path):
    conf = rampart_config(workdir, variant, port, secret_path)
    return start(["taskset", "-c", "0", os.path.abspath(binary), "run", "-c", conf, "--workers", "1", "--pin"],
                 workdir, variant)


def rampart_config(workdir, variant, port, secret_path):
    filters = ",\n  ".join(f.replace("SECRET", secret_path) for f in FILTERS[variant])
    return write(os.path.join(workdir, f"{variant}.toml"), f"""
[listeners.bench]
bind = "127.0.0.1:{port}"
protocol = "http"

[[listeners.bench.routes]]
name = "api"
match = {{ path_prefix = "/" }}
upstream = "backend"
filters = [
  {filters}
]

[upstreams.backend]
targets = ["127.0.0.1:{BACKEND_PORT}"]
""")


def keepalive_requests(port, token, n):
    """N GET requests, one after another, on one keep-alive connection; every answer must be 200."""
    request = f"GET / HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        buf = b""
        for _ in range(n):
            s.sendall(request)
            while b"\r\n\r\n" not in buf:
                buf += s.recv(65536)
            head, buf = buf.split(b"\r\n\r\n", 1)
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"answer: {head[:200]!r}")
            length = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))
            while len(buf) < length:
                buf += s.recv(65536)
            buf = buf[length:]


def instructions(workdir, binary, variant, port, secret_path, token, n):
    """Instructions per request of the variant under callgrind (all threads, user space)."""
    conf = rampart_config(workdir, variant, port, secret_path)
    out = os.path.join(workdir, f"callgrind.{variant}")
    proc = start(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", os.path.abspath(binary),
                  "run", "-c", conf, "--workers", "1"], workdir, f"{variant}-callgrind")
    try:
        wait_port(port, timeout=120)
        keepalive_requests(port, token, 200)
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True)
        keepalive_requests(port, token, n)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
        dumps = [f for f in os.listdir(workdir) if f.startswith(f"callgrind.{variant}.")]
        total = 0
        for name in dumps:
            with open(os.path.join(workdir, name)) as f:
                m = re.search(r"^(?:summary|totals):\s*(\d+)", f.read(), re.M)
                total += int(m.group(1)) if m else 0
        return total / n
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def redis_calls(port):
    """Calls of EVALSHA and EVAL so far."""
    out = subprocess.run(["redis-cli", "-p", str(port), "info", "commandstats"], capture_output=True, text=True,
                         check=True).stdout
    return sum(int(m) for m in re.findall(r"cmdstat_eval(?:sha)?:calls=(\d+)", out))


def parse_wrk(out):
    def ms(value, unit):
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {"requests": requests, "p50": ms(*p50.groups()), "p99": ms(*p99.groups()),
            "non2xx": int(non2xx.group(1)) if non2xx else 0,
            "errors": sum(map(int, errors.groups())) if errors else 0}


def wrk(port, duration, token):
    cmd = ["taskset", "-c", "1", "wrk", "-t1", "-c64", f"-d{duration}s", "--latency",
           "-H", f"Authorization: Bearer {token}", f"http://127.0.0.1:{port}/"]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def run_round(proc, port, duration, token, redis):
    wrk(port, 1, token)  # warm-up
    calls0 = redis_calls(REDIS_PORT) if redis else 0
    perf = subprocess.Popen(["perf", "stat", "-x,", "-e", "instructions:u", "-p", str(proc.pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    user0, sys0 = cpu_seconds(proc.pid)
    out = wrk(port, duration, token)
    user1, sys1 = cpu_seconds(proc.pid)
    perf.send_signal(signal.SIGINT)
    perf_err = perf.communicate()[1]
    calls1 = redis_calls(REDIS_PORT) if redis else 0
    res = parse_wrk(out)
    n = max(res["requests"], 1)
    instructions = re.search(r"^(\d+),,instructions", perf_err, re.M)
    res.update(rps=res["requests"] / duration,
               user_us=(user1 - user0) * 1e6 / n, sys_us=(sys1 - sys0) * 1e6 / n,
               cpu_us=((user1 - user0) + (sys1 - sys0)) * 1e6 / n,
               instr=int(instructions.group(1)) / n if instructions else float("nan"),
               redis_rt=(calls1 - calls0) / n if redis else None)
    return res


def report(results, args):
    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    bare = results.get("bare")
    # perf cannot count instructions on every machine (virtual ones often lack the counters).
    counted = not any(math.isnan(r["instr"]) for rs in results.values() for r in rs)
    lines = [f"rounds: {args.rounds} x {args.duration} s, wrk -t1 -c64 (CPU 1), Rampart one worker pinned (CPU 0)", "",
             "| variant | requests/s | p50 ms | p99 ms | CPU µs/request | of which user | vs bare (CPU) | vs bare (user) | "
             + ("user instructions/request | vs bare (instr) | " if counted else "")
             + "non-2xx | Redis round trips/request |",
             "|---|---|---|---|---|---|---|---|" + ("---|---|" if counted else "") + "---|---|"]
    for v, rs in results.items():
        cpu, user, instr = med(rs, "cpu_us"), med(rs, "user_us"), med(rs, "instr")
        vs = bare and v != "bare"
        d_cpu = f"{cpu - med(bare, 'cpu_us'):+.2f} µs" if vs else ""
        d_user = f"{user - med(bare, 'user_us'):+.2f} µs" if vs else ""
        d_instr = f"{instr - med(bare, 'instr'):+.0f}" if vs else ""
        rt = f"{med(rs, 'redis_rt'):.4f}" if rs[0]["redis_rt"] is not None else ""
        lines.append(f"| {v} | {med(rs, 'rps'):.0f} | {med(rs, 'p50'):.3f} | {med(rs, 'p99'):.3f} | {cpu:.2f} | "
                     f"{user:.2f} | {d_cpu} | {d_user} | " + (f"{instr:.0f} | {d_instr} | " if counted else "")
                     + f"{sum(r['non2xx'] + r['errors'] for r in rs)} | {rt} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rampart", required=True)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--instructions", type=int, default=0, metavar="N",
                    help="also count instructions per request under callgrind, over N requests")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out"))
    args = ap.parse_args()
    variants = args.variants.split(",")
    for v in variants:
        if v not in FILTERS:
            sys.exit(f"unknown variant {v}; known: {', '.join(VARIANTS)}")
    if "global" in variants and not shutil.which("redis-server"):
        sys.exit("the global variant needs redis-server (Debian package redis-server)")
    os.makedirs(args.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="rampart-filters-bench-")
    secret = os.urandom(32)
    secret_path = os.path.join(workdir, "jwt.secret")
    with open(secret_path, "wb") as f:
        f.write(secret)
    token = hs256_token(secret)
    procs = {"backend": backend(workdir)}
    try:
        wait_port(BACKEND_PORT)
        if "global" in variants:
            procs["redis"] = start(["taskset", "-c", "1", "redis-server", "--port", str(REDIS_PORT), "--save", "",
                                    "--appendonly", "no"], workdir, "redis")
            wait_port(REDIS_PORT)
        ports = {v: PORT_BASE + i for i, v in enumerate(VARIANTS)}
        for v in variants:
            procs[v] = rampart(workdir, args.rampart, v, ports[v], secret_path)
        for v in variants:
            try:
                wait_port(ports[v])
            except RuntimeError:
                sys.exit(f"{v} did not start:\n" + open(os.path.join(workdir, f"{v}.log")).read()[-3000:])
        results = {}
        for rnd in range(args.rounds):
            for v in variants:
                r = run_round(procs[v], ports[v], args.duration, token, v == "global")
                results.setdefault(v, []).append(r)
                print(f"round {rnd + 1} {v:10s} {r['rps']:8.0f} req/s  CPU {r['cpu_us']:.2f} µs/req "
                      f"(user {r['user_us']:.2f})  {r['instr']:.0f} instr/req  non-2xx {r['non2xx']}"
                      + (f"  redis {r['redis_rt']:.4f}/req" if r["redis_rt"] is not None else ""), flush=True)
        text = report(results, args) if results else ""
        if args.instructions:
            for v in variants:
                procs[v].terminate()
                procs[v].wait(timeout=10)
            counts = {}
            for v in variants:
                counts[v] = instructions(workdir, args.rampart, v, ports[v], secret_path, token, args.instructions)
                print(f"callgrind {v:10s} {counts[v]:.0f} instructions/request", flush=True)
            lines = ["", f"callgrind: {args.instructions} sequential keep-alive requests after 200 unmeasured, "
                     "instructions of the whole process (user space) per request", "",
                     "| variant | instructions/request | vs bare |", "|---|---|---|"]
            for v, c in counts.items():
                delta = f"{c - counts['bare']:+.0f}" if "bare" in counts and v != "bare" else ""
                lines.append(f"| {v} | {c:.0f} | {delta} |")
            text += "\n".join(lines) + "\n"
        write(os.path.join(args.out, "filters.md"), text)
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
