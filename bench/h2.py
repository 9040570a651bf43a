"""The HTTP/2 scenarios of bench.py (issue 12): h2load (Debian nghttp2-client) against each proxy
over HTTP/2 in clear (prior knowledge) and over TLS (ALPN h2), with the HTTP/1.1 backend of the
other scenarios; and gRPC unary calls (h2load posting one fixed gRPC frame) through each proxy to
bench/grpc-backend, an h2c backend (grpc-unary-h2c), or to grpc-go's interop server
(grpc-unary-h2c-interop: google.golang.org/grpc/interop/server, built by run.sh from bench/grpc-interop,
answering grpc.testing.TestService/UnaryCall). One worker per proxy on CPU 0; h2load and the
backends on CPU 1.

Proxies: Rampart `http` (HTTP/2 is on by default: prior knowledge detected from the preface on
the HTTP/1.1 port, ALPN h2 first over TLS; `--upstream-protocol h2c`, or `protocol = "h2c"` in
a config file, for the gRPC backend); nginx 1.22 `listen ... http2` (1.22 has no `http2 on;`, which
came in 1.25.1) with `proxy_pass` or `grpc_pass grpc://`; HAProxy 2.6 `bind ... proto h2` in clear,
`bind ... ssl crt ... alpn h2,http/1.1` over TLS, `server ... proto h2` to the gRPC backend.

A round fails (its `failed` says why, and the table says so) when h2load counts any failed,
errored or timed-out request or any status other than 2xx, when it did not speak HTTP/2 (h2load
falls back to HTTP/1.1 when ALPN offers nothing better), when no request succeeded, or, for gRPC,
when one unary call made with `grpc-backend -check` (`-call interop` for the interop server) after
the round does not come back with the expected response message and the trailer `grpc-status: 0`
(h2load never looks at trailers).
"""
import math
import os
import re
import statistics
import subprocess
import time

from common import (BACKEND_PORT, GRPC_BACKEND_PORT, GRPC_INTEROP_PORT, GRPC_INTEROP_PORTS, GRPC_PORTS, H2_PORTS,
                    H2C_PORTS, TLS_HOST, cpu_seconds, nginx_main, start, write)

GRPC_PATH = "/bench.Bench/Unary"
GRPC_INTEROP_PATH = "/grpc.testing.TestService/UnaryCall"
H2_PORTS_BY_MODE = {"h2c": H2C_PORTS, "h2": H2_PORTS, "grpc": GRPC_PORTS, "grpc-interop": GRPC_INTEROP_PORTS}
H2_MODES = tuple(H2_PORTS_BY_MODE)
# The gRPC modes: the backend's port, and the call (`grpc-backend -call`) that makes the request
# body and checks an answer.
GRPC_MODES = {"grpc": (GRPC_BACKEND_PORT, "bench"), "grpc-interop": (GRPC_INTEROP_PORT, "interop")}

H2_SCENARIOS = {
    # name: (mode, connections, path, concurrent streams per connection, description)
    "h2-clear-c1m100": ("h2c", 1, "/", 100, "HTTP/2 in clear (prior knowledge), 1 connection x 100 streams"),
    "h2-clear-c64m10": ("h2c", 64, "/", 10, "HTTP/2 in clear (prior knowledge), 64 connections x 10 streams"),
    "h2-tls-c1m100": ("h2", 1, "/", 100, "HTTP/2 over TLS (ALPN h2), 1 connection x 100 streams"),
    "h2-tls-c64m10": ("h2", 64, "/", 10, "HTTP/2 over TLS (ALPN h2), 64 connections x 10 streams"),
    "grpc-unary-h2c": ("grpc", 64, GRPC_PATH, 10, "gRPC unary calls over h2c to an h2c backend, 64 connections x 10 streams"),
    "grpc-unary-h2c-interop": ("grpc-interop", 64, GRPC_INTEROP_PATH, 10,
                               "gRPC unary calls over h2c to grpc-go's interop server, 64 connections x 10 streams"),
    "grpc-large-h2c-interop": ("grpc-interop", 16, GRPC_INTEROP_PATH, 10,
                               "gRPC unary calls answered with 64 KiB, over h2c to grpc-go's interop server, "
                               "16 connections x 10 streams"),
}
# Scenarios whose call (`grpc-backend -call`) is not their mode's.
SCENARIO_CALLS = {"grpc-large-h2c-interop": "interop-large"}


def scenario_call(scenario):
    """The call a gRPC scenario makes (see GRPC_MODES and SCENARIO_CALLS)."""
    return SCENARIO_CALLS.get(scenario, GRPC_MODES[H2_SCENARIOS[scenario][0]][1])


def grpc_request(workdir, binary, call):
    """The request body file for h2load making `call` (one gRPC frame, from `grpc-backend -call
    ... -write-request`); returns (grpc-backend binary, request file, call) for run_h2."""
    request = os.path.join(workdir, f"{call}-request.bin")
    subprocess.run([binary, "-call", call, "-write-request", request], check=True)
    return binary, request, call


def grpc_backend(workdir, binary):
    """bench/grpc-backend on CPU 1 (GOMAXPROCS follows the affinity: 1)."""
    return start(["taskset", "-c", "1", binary, "-listen", f"127.0.0.1:{GRPC_BACKEND_PORT}"], workdir, "grpc-backend")


def grpc_interop_server(workdir, binary):
    """grpc-go's interop server (google.golang.org/grpc/interop/server, in clear: its default) on
    CPU 1 (GOMAXPROCS follows the affinity: 1). It takes only a port and listens on every address
    of the machine; only 127.0.0.1 is used."""
    return start(["taskset", "-c", "1", binary, "-port", str(GRPC_INTEROP_PORT)], workdir, "grpc-interop")


_help = {}


def rampart_has_flag(binary, flag):
    if binary not in _help:
        _help[binary] = subprocess.run([binary, "http", "--help"], capture_output=True, text=True).stdout
    return flag in _help[binary]


def h2_rampart(workdir, binary, mode, tls, name="rampart"):
    """`rampart http`, whose listener serves HTTP/2 beside HTTP/1.1 by default; for gRPC with
    `--upstream-protocol h2c`, or, in a build without that flag, the same from a config file."""
    binary = os.path.abspath(binary)
    port = H2_PORTS_BY_MODE[mode][name]
    to = GRPC_MODES[mode][0] if mode in GRPC_MODES else BACKEND_PORT
    cmd = ["http", "--listen", f"127.0.0.1:{port}", "--to", f"127.0.0.1:{to}"]
    if mode == "h2":
        cmd += ["--tls-cert", tls[0], "--tls-key", tls[1]]
    elif mode in GRPC_MODES:
        if rampart_has_flag(binary, "--upstream-protocol"):
            cmd += ["--upstream-protocol", "h2c"]
        else:
            conf = write(os.path.join(workdir, f"{name}-{mode}.toml"), f"""
[listeners.bench]
bind = "127.0.0.1:{port}"
protocol = "http"
upstream = "grpc"

[upstreams.grpc]
targets = ["127.0.0.1:{to}"]
protocol = "h2c"
""")
            cmd = ["run", "--config", conf]
    print(f"{name} {mode}: rampart {' '.join(cmd)}", flush=True)
    return start(["taskset", "-c", "0", binary, *cmd, "--workers", "1", "--pin"], workdir, f"{name}-{mode}")


def h2_haproxy(workdir, mode, tls):
    """HAProxy's HTTP config (bench.http_haproxy) with an HTTP/2 frontend: `proto h2` in clear,
    ALPN h2 (then http/1.1) over TLS; for gRPC an h2c server (`proto h2`)."""
    port = H2_PORTS_BY_MODE[mode]["haproxy"]
    bind = f" ssl crt {tls[2]} alpn h2,http/1.1" if mode == "h2" else " proto h2"
    ssl_global = "\n    ssl-default-bind-options ssl-min-ver TLSv1.2 ssl-max-ver TLSv1.3" if mode == "h2" else ""
    server = f"g1 127.0.0.1:{GRPC_MODES[mode][0]} proto h2" if mode in GRPC_MODES else f"b1 127.0.0.1:{BACKEND_PORT}"
    conf = write(os.path.join(workdir, f"haproxy-{mode}.cfg"), f"""
global
    nbthread 1
    cpu-map 1/1 0
    maxconn 9000{ssl_global}
defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
frontend bench
    bind 127.0.0.1:{port}{bind}
    default_backend backend
backend backend
    server {server}
""")
    return start(["taskset", "-c", "0", "haproxy", "-db", "-f", conf], workdir, f"haproxy-{mode}")


def h2_nginx(workdir, mode, tls):
    """nginx's HTTP config (bench.http_nginx) on an HTTP/2 listener (`listen ... http2`: prior
    knowledge only in clear, ALPN h2 with `ssl`); for gRPC `grpc_pass` with kept-alive upstream
    connections (nginx sends one stream at a time on each)."""
    port = H2_PORTS_BY_MODE[mode]["nginx"]
    listen = f"127.0.0.1:{port} http2"
    if mode == "h2":
        listen = f"""127.0.0.1:{port} ssl http2;
        ssl_certificate {tls[0]};
        ssl_certificate_key {tls[1]};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:SSL:10m;
        ssl_session_tickets on"""
    if mode in GRPC_MODES:
        target, location = GRPC_MODES[mode][0], "grpc_pass grpc://backend;"
    else:
        target, location = BACKEND_PORT, """proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering on;"""
    conf = write(os.path.join(workdir, f"nginx-{mode}.conf"), nginx_main(workdir, f"nginx-{mode}", "01", 9000) + f"""
http {{
    access_log off;
    keepalive_timeout 60s;
    keepalive_requests 10000000;
    upstream backend {{ server 127.0.0.1:{target}; keepalive 1024; }}
    server {{
        listen {listen};
        location / {{
            {location}
        }}
    }}
}}
""")
    return start(["taskset", "-c", "0", "nginx", "-c", conf, "-p", workdir], workdir, f"nginx-{mode}")


def h2_starters(workdir, rampart, baseline, tls):
    """(mode, proxy) -> a function that starts that proxy for that mode."""
    starters = {}
    for mode in H2_MODES:
        starters[(mode, "rampart")] = lambda mode=mode: h2_rampart(workdir, rampart, mode, tls)
        starters[(mode, "haproxy")] = lambda mode=mode: h2_haproxy(workdir, mode, tls)
        starters[(mode, "nginx")] = lambda mode=mode: h2_nginx(workdir, mode, tls)
        if baseline:
            starters[(mode, "rampart-before")] = lambda mode=mode: h2_rampart(workdir, baseline, mode, tls,
                                                                               "rampart-before")
    return starters


SIZES = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}


def percentile(sorted_values, pct):
    """Nearest rank: the smallest value with at least pct% of the values at or below it."""
    if not sorted_values:
        return float("nan")
    return sorted_values[max(0, math.ceil(pct / 100 * len(sorted_values)) - 1)]


def parse_h2load(out, log, want_proto):
    """h2load's summary and its per-request log (start µs, status, µs to the end of the response)
    as a result of bench.py: rps, requests (succeeded), p50/p99 ms, bytes_per_s, errors, failed."""
    res = {"rps": 0.0, "requests": 0, "p50": float("nan"), "p99": float("nan"), "bytes_per_s": 0.0,
           "errors": 0, "failed": ""}
    m = re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s, ([\d.]+)([KMG]?B)/s", out)
    counts = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                       r"(\d+) errored, (\d+) timeout", out)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if not (m and counts and codes):
        res["failed"] = "h2load: " + " / ".join(out.strip().splitlines()[-3:])
        return res
    res["rps"] = float(m.group(1))
    res["bytes_per_s"] = float(m.group(2)) * SIZES[m.group(3)]
    res["requests"] = int(counts.group(4))
    res["errors"] = sum(int(counts.group(i)) for i in (5, 6, 7)) + sum(int(codes.group(i)) for i in (2, 3, 4))
    proto = re.search(r"Application protocol: (\S+)", out)
    proto = proto.group(1) if proto else "none"
    if res["errors"]:
        res["failed"] = f"{res['errors']} failed, errored, timed-out or non-2xx requests"
    elif res["requests"] == 0:
        res["failed"] = f"no request succeeded (application protocol: {proto})"
    elif proto != want_proto:
        res["failed"] = f"spoke {proto}, not {want_proto}"
    times = []
    with open(log) if os.path.exists(log) else open(os.devnull) as f:
        for line in f:
            parts = line.split("\t")
            if len(parts) >= 3:
                times.append(int(parts[2]) / 1000.0)
    times.sort()
    res["p50"], res["p99"] = percentile(times, 50), percentile(times, 99)
    return res


def run_h2(pid, port, scenario, duration, workdir, grpc):
    """One h2load run: a 1 s timed warm-up (unmeasured), then a measured run of a fixed number of
    requests, the warm-up's rate times `duration` (so about `duration` seconds), with the proxy's
    CPU time read around it. A count rather than h2load's -D: with -D, h2load counts nothing when a
    connection dies (a proxy that reset 1 of 4 connections halfway through a 3 s run still showed
    0 failed); with -n, what a dead connection leaves undone is counted as failed. `grpc` maps each
    gRPC call to (grpc-backend binary, request file, call), see grpc_request. Returns the result and
    (user0, sys0, user1, sys1)."""
    mode, conns, path, streams, _ = H2_SCENARIOS[scenario]
    host = TLS_HOST if mode == "h2" else "127.0.0.1"
    url = f"{'https' if mode == 'h2' else 'http'}://{host}:{port}{path}"
    cmd = ["taskset", "-c", "1", "h2load", "-c", str(conns), "-m", str(streams)]
    if mode in GRPC_MODES:
        cmd += ["-d", grpc[scenario_call(scenario)][1], "-H", "content-type: application/grpc", "-H", "te: trailers"]
    warm = subprocess.run(cmd + ["-D", "1", url], capture_output=True, text=True, timeout=60)
    rate = re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", warm.stdout)
    total = max(int(float(rate.group(1)) * duration) if rate else 0, conns * streams * 10)
    total = -(-total // conns) * conns  # h2load gives each connection total / conns requests
    log = os.path.join(workdir, "h2load-requests.log")
    user0, sys0 = cpu_seconds(pid)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd + ["-n", str(total), "--log-file", log, url], capture_output=True, text=True,
                              timeout=duration * 10 + 30)
        out = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        out = f"{e.stdout or ''}\nh2load did not finish {total} requests in {e.timeout} s"
    user1, sys1 = cpu_seconds(pid)
    wall = time.monotonic() - t0
    res = parse_h2load(out, log, "h2" if mode == "h2" else "h2c")
    # How busy the proxy's core was with it: its CPU seconds over the window's. Under 100%, the
    # proxy waited on h2load and the backend (CPU 1), and found fewer frames per wakeup.
    res["busy"] = ((user1 - user0) + (sys1 - sys0)) / wall if wall > 0 else float("nan")
    if os.path.exists(log):
        os.remove(log)
    if mode in GRPC_MODES and not res["failed"]:
        binary, _, call = grpc[scenario_call(scenario)]
        check = subprocess.run([binary, "-call", call, "-check", f"http://127.0.0.1:{port}"], capture_output=True,
                               text=True)
        if check.returncode != 0:
            res["failed"] = check.stderr.strip() or f"grpc-backend -check exited {check.returncode}"
    return res, (user0, sys0, user1, sys1)


def h2_report(results, args, proxies):
    """The HTTP/2 table: CPU per request (user and kernel), how busy the proxy kept CPU 0 (its CPU
    seconds over the measured window's), Rampart's CPU per request and p99 over the lower of
    HAProxy's and nginx's, and the issue's target: both ratios at most 1 and no errors or failed
    rounds."""
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    before = "rampart-before" in proxies
    lines = [f"HTTP/2 (h2load; HTTP/1.1 backend; gRPC: bench/grpc-backend, or grpc-go's interop server for grpc-*-interop). Medians of {args.rounds} interleaved rounds "
             f"of {args.duration} s; proxy on CPU 0, backend and h2load on CPU 1 ({os.cpu_count()} CPUs). "
             "\"CPU vs best\" and \"p99 vs best\": Rampart's over the lower of HAProxy's and nginx's; target: "
             "both at most 1.00 and no errors.", "",
             "| scenario | proxy | requests/s | p50 ms | p99 ms | CPU µs/request | user | kernel | busy % | "
             + ("vs before | " if before else "") + "CPU vs best | p99 vs best | target | errors |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if before else "") + "---:|---:|---|---:|"]
    notes = []
    for (scenario, p), rs in results.items():
        cpu, user = med(rs, "cpu_us_per_req"), med(rs, "user_us_per_req")
        kernel = statistics.median(r["cpu_us_per_req"] - r["user_us_per_req"] for r in rs)
        vs_before = ""
        if before:
            base = results.get((scenario, "rampart-before")) if p == "rampart" else None
            vs_before = f"{cpu / med(base, 'cpu_us_per_req'):.2f} | " if base else " | "
        cpu_vs, p99_vs, target = "", "", ""
        others = [results[(scenario, o)] for o in ("haproxy", "nginx") if (scenario, o) in results]
        if p == "rampart" and others:
            cpu_ratio = cpu / min(med(o, "cpu_us_per_req") for o in others)
            p99_ratio = med(rs, "p99") / min(med(o, "p99") for o in others)
            cpu_vs, p99_vs = f"**{cpu_ratio:.2f}**", f"{p99_ratio:.2f}"
            missed = [what for what, bad in (("CPU", not cpu_ratio <= 1.0), ("p99", not p99_ratio <= 1.0),
                                             ("errors", any(r["failed"] for r in rs))) if bad]
            target = "met" if not missed else "not met (" + ", ".join(missed) + ")"
        failed = sum(1 for r in rs if r["failed"])
        notes += [f"- {scenario} {p}: {r['failed']}" for r in rs if r["failed"]]
        errors = f"{sum(r['errors'] for r in rs)}" + (f" ({failed} failed)" if failed else "")
        lines.append(f"| {scenario} | {p} | {med(rs, 'rps'):.0f} | {med(rs, 'p50'):.3f} | {med(rs, 'p99'):.3f} | "
                     f"{cpu:.2f} | {user:.2f} | {kernel:.2f} | {med(rs, 'busy') * 100:.0f} | "
                     f"{vs_before}{cpu_vs} | {p99_vs} | {target} | {errors} |")
    if notes:
        lines += ["", "Failed rounds:", ""] + list(dict.fromkeys(notes))
    return "\n".join(lines) + "\n"
