#!/usr/bin/env python3
"""Side-by-side proxy benchmark (see docs/benchmarks.md).

Each proxy runs one worker pinned to CPU 0; the backend (nginx) and the load generator (wrk) run
on CPU 1. Rounds are interleaved (R, H, N, R, H, N, ...) so drift hits every proxy alike. For each
run we record wrk's requests/s, p50/p99 latency and errors, and the proxy's own CPU time
(utime+stime of every thread, from /proc/PID/stat) divided by the requests served. With
--baseline BIN, a fourth proxy, rampart-before, runs BIN with Rampart's command lines, so that a
change can be compared with the binary from before it in the same rounds.

HTTPS scenarios terminate TLS at the proxy (one ECDSA P-256 certificate, generated for each run
into OUT/tls) and speak plain HTTP to the same backend. Keep-alive runs use wrk; one request per
connection with a full or a resumed handshake uses bench/resume-client (OUT/resume-client, built
by run.sh), since wrk resumes sessions whenever it can and cannot be told to stop or to start.

HTTP/2 scenarios (h2-*, grpc-*) use h2load, and for gRPC bench/grpc-backend (OUT/grpc-backend,
built by run.sh) as an h2c backend on CPU 1, or for grpc-unary-h2c-interop grpc-go's interop server
(OUT/grpc-interop, built by run.sh from bench/grpc-interop): see h2.py.

sni-passthrough passes TLS through by SNI to the backend's TLS port (full handshakes by
bench/resume-client, verified against the backend's own certificate): see sni.py.
"""
import argparse
import ssl
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from common import (BACKEND_PORT, BACKEND_TLS_PORT, GRPC_BACKEND_PORT, GRPC_INTEROP_PORT, HTTP_PORTS, HTTPS_PORTS,
                    PORTS, SNI_PORTS, TLS_HOST, cpu_seconds, nginx_main, rss_kib, require_pinned, start, stop_all, tail_log,
                    wait_port, write)
from https import HTTPS_TARGETS, https_rampart, https_report, run_resume, tls_files
from burst import burst_memory
from h2 import (GRPC_MODES, H2_MODES, H2_PORTS_BY_MODE, H2_SCENARIOS, grpc_backend, grpc_interop_server, grpc_request,
                h2_report, h2_starters, run_h2, scenario_call)
from sni import SNI_SCENARIOS, backend_tls_server, run_sni, sni_files, sni_report, sni_starters


def backend(workdir, servers=""):
    """nginx on CPU 1 with the responses of every plain HTTP scenario; `servers`: more server blocks."""
    bulk = os.path.join(workdir, "www")
    os.makedirs(bulk, exist_ok=True)
    with open(os.path.join(bulk, "bulk.bin"), "wb") as f:
        f.write(os.urandom(1 << 20) * 64)
    with open(os.path.join(bulk, "16k.bin"), "wb") as f:
        f.write(os.urandom(16 * 1024))
    conf = write(os.path.join(workdir, "backend.conf"), nginx_main(workdir, "backend", "10") + f"""
http {{
    access_log off;
    keepalive_requests 10000000;
    sendfile on;
    server {{
        listen 127.0.0.1:{BACKEND_PORT} backlog=4096 reuseport;
        root {bulk};
        location = / {{ return 200 "hello from the backend\\n"; }}
        location /bulk.bin {{ }}
        location /16k.bin {{ }}
    }}{servers}
}}
""")
    return start(["nginx", "-c", conf, "-p", workdir], workdir, "backend")


def proxy_rampart(workdir, binary, name="rampart"):
    return start(["taskset", "-c", "0", os.path.abspath(binary), "tcp", "--listen", f"127.0.0.1:{PORTS[name]}",
                  "--to", f"127.0.0.1:{BACKEND_PORT}", "--workers", "1", "--pin"], workdir, name)


def http_rampart(workdir, binary, name="rampart"):
    return start(["taskset", "-c", "0", os.path.abspath(binary), "http", "--listen", f"127.0.0.1:{HTTP_PORTS[name]}",
                  "--to", f"127.0.0.1:{BACKEND_PORT}", "--workers", "1", "--pin"], workdir, f"{name}-http")


def http_haproxy(workdir, tls=None):
    """HAProxy in HTTP mode; with `tls` (see https.tls_files) it terminates TLS 1.2 and 1.3, with
    session tickets (its default) and its default session cache (tune.ssl.cachesize 20000)."""
    kind = "https" if tls else "http"
    port = (HTTPS_PORTS if tls else HTTP_PORTS)["haproxy"]
    ssl_global = "\n    ssl-default-bind-options ssl-min-ver TLSv1.2 ssl-max-ver TLSv1.3" if tls else ""
    ssl_bind = f" ssl crt {tls[2]}" if tls else ""
    conf = write(os.path.join(workdir, f"haproxy-{kind}.cfg"), f"""
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
    bind 127.0.0.1:{port}{ssl_bind}
    default_backend backend
backend backend
    server b1 127.0.0.1:{BACKEND_PORT}
""")
    return start(["taskset", "-c", "0", "haproxy", "-db", "-f", conf], workdir, f"haproxy-{kind}")


def http_nginx(workdir, tls=None):
    """nginx as an HTTP proxy; with `tls` it terminates TLS 1.2 and 1.3, session tickets on (its
    default) and a shared session cache."""
    kind = "https" if tls else "http"
    port = (HTTPS_PORTS if tls else HTTP_PORTS)["nginx"]
    ssl = ""
    if tls:
        ssl = f""" ssl;
        ssl_certificate {tls[0]};
        ssl_certificate_key {tls[1]};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:SSL:10m;
        ssl_session_tickets on"""
    conf = write(os.path.join(workdir, f"nginx-{kind}.conf"), nginx_main(workdir, f"nginx-{kind}") + f"""
http {{
    access_log off;
    keepalive_timeout 60s;
    keepalive_requests 10000000;
    upstream backend {{ server 127.0.0.1:{BACKEND_PORT}; keepalive 1024; }}
    server {{
        listen 127.0.0.1:{port}{ssl};
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering on;
        }}
    }}
}}
""")
    return start(["taskset", "-c", "0", "nginx", "-c", conf, "-p", workdir], workdir, f"nginx-{kind}")


def proxy_haproxy(workdir):
    conf = write(os.path.join(workdir, "haproxy.cfg"), f"""
global
    nbthread 1
    cpu-map 1/1 0
    maxconn 9000
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend bench
    bind 127.0.0.1:{PORTS['haproxy']}
    default_backend backend
backend backend
    server b1 127.0.0.1:{BACKEND_PORT}
""")
    return start(["taskset", "-c", "0", "haproxy", "-db", "-f", conf], workdir, "haproxy")


def proxy_nginx(workdir):
    conf = write(os.path.join(workdir, "nginx-stream.conf"), f"""
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes 1;
worker_cpu_affinity 01;
daemon off;
master_process off;
pid {workdir}/nginx-stream.pid;
error_log {workdir}/nginx-stream.err warn;
events {{ worker_connections 9000; }}
stream {{
    upstream backend {{ server 127.0.0.1:{BACKEND_PORT}; }}
    server {{ listen 127.0.0.1:{PORTS['nginx']}; proxy_pass backend; }}
}}
""")
    return start(["taskset", "-c", "0", "nginx", "-c", conf, "-p", workdir], workdir, "nginx")


UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}
SIZES = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def parse_wrk(out):
    res = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))}
    res["requests"] = int(re.search(r"(\d+) requests in", out).group(1))
    for pct in ("50", "99"):
        m = re.search(rf"^\s+{pct}(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        res[f"p{pct}"] = float(m.group(1)) * UNITS[m.group(2)] if m else float("nan")
    m = re.search(r"Transfer/sec:\s+([\d.]+)([KMGT]?B)", out)
    res["bytes_per_s"] = float(m.group(1)) * SIZES[m.group(2)] if m else 0.0
    errors = 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        errors += int(m.group(1))
    res["errors"] = errors
    return res


# In place of wrk's extra arguments: the scenario runs bench/resume-client instead of wrk, with
# resumed handshakes (RESUME) or full ones (FULL). wrk cannot make full handshakes with
# `Connection: close`: it keeps each connection slot's SSL object (SSL_clear), which offers the
# slot's last session again, so nearly all its handshakes are resumed (`openssl s_server -www`
# counted 654 session hits in 658 handshakes from `wrk -c4 -d1s -H "Connection: close"`).
RESUME = ("resume-client", True)
FULL = ("resume-client", False)
# Plain HTTP through bench/resume-client: a keep-alive request per connection (the backend does
# not close), then the client closes with a reset (SO_LINGER 0) once it has the response.
RESET = ("resume-client", "reset")

SCENARIOS = {
    # name: (mode, connections, path, extra wrk args, description)
    "l4-small-c64": ("l4", 64, "/", [], "small responses, 64 keep-alive connections"),
    "l4-small-c256": ("l4", 256, "/", [], "small responses, 256 keep-alive connections"),
    "l4-bulk": ("l4", 4, "/bulk.bin", [], "64 MiB downloads, 4 connections"),
    # Connection churn through the L4 listeners: wrk asks for `Connection: close`, so the backend
    # closes each connection after its response and wrk opens a new one (issue 13).
    "l4-close-c64": ("l4", 64, "/", ["-H", "Connection: close"], "one request per connection, 64 at a time"),
    # The same churn with the client ending each connection by a reset after its response (the
    # backend keeps its side open): bench/resume-client -reset.
    "l4-reset-c64": ("l4", 64, "/", RESET, "one request per connection, closed by a client reset, 64 at a time"),
    "http-small-c64": ("http", 64, "/", [], "small responses, 64 keep-alive connections"),
    "http-small-c256": ("http", 256, "/", [], "small responses, 256 keep-alive connections"),
    "http-16k-c64": ("http", 64, "/16k.bin", [], "16 KiB responses, 64 keep-alive connections"),
    "http-close-c64": ("http", 64, "/", ["-H", "Connection: close"], "one request per connection, 64 at a time"),
    # HTTPS: TLS terminated at the proxy, plain HTTP to the backend. The target is Rampart's CPU
    # per request over the lower of HAProxy's and nginx's (see HTTPS_TARGETS).
    "https-keepalive": ("https", 64, "/", [], "HTTPS, small responses, 64 keep-alive connections"),
    "https-close": ("https", 64, "/", FULL, "HTTPS, one request per connection (full handshake), 64 at a time"),
    "https-resume": ("https", 64, "/", RESUME, "HTTPS, one request per connection (resumed handshake), 64 at a time"),
    # HTTP/2 and gRPC (h2.py): h2load; the fourth field is the concurrent streams per connection.
    **H2_SCENARIOS,
    # TLS passthrough by SNI (sni.py): full handshakes through the proxy to the backend's TLS port.
    **SNI_SCENARIOS,
}


def run_one(name, pid, port, scenario, duration, tools=None):
    mode, conns, path, extra, _ = SCENARIOS[scenario]
    if mode in H2_MODES:
        res, (user0, sys0, user1, sys1) = run_h2(pid, port, scenario, duration, *tools[2])
        return finish(res, pid, user0, sys0, user1, sys1)
    if mode == "sni":
        res, (user0, sys0, user1, sys1) = run_sni(pid, port, scenario, duration, tools[0], tools[3])
        return finish(res, pid, user0, sys0, user1, sys1)
    if mode == "https":
        url = f"https://{TLS_HOST}:{port}{path}"
    else:
        url = f"http://127.0.0.1:{port}{path}"
    if extra in (RESUME, FULL, RESET):
        res, (user0, sys0, user1, sys1) = run_resume(pid, url, conns, duration, extra[1], *tools[:2])
        return finish(res, pid, user0, sys0, user1, sys1)
    # Warm up pools and caches, unmeasured.
    subprocess.run(["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}", "-d1s", *extra, url], capture_output=True, check=True)
    user0, sys0 = cpu_seconds(pid)
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency", *extra, url],
                         capture_output=True, text=True, check=True).stdout
    user1, sys1 = cpu_seconds(pid)
    return finish(parse_wrk(out), pid, user0, sys0, user1, sys1)


def finish(res, pid, user0, sys0, user1, sys1):
    cpu = (user1 - user0) + (sys1 - sys0)
    res["cpu_us_per_req"] = cpu * 1e6 / max(res["requests"], 1)
    res["user_us_per_req"] = (user1 - user0) * 1e6 / max(res["requests"], 1)
    res["cpu_s"] = cpu
    res["rss_kib"] = rss_kib(pid)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rampart", required=True)
    ap.add_argument("--baseline", metavar="BIN", help="also run BIN as rampart-before (Rampart from before a change)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--proxies", help="comma-separated, from rampart, rampart-before, haproxy, nginx "
                    "(default: all of them, rampart-before only with --baseline)")
    ap.add_argument("--out", default="bench/out")
    ap.add_argument("--idle-connections", type=int, default=5000,
                    help="idle keep-alive connections for the memory measurement, plain HTTP when an HTTP "
                    "scenario runs and HTTPS when an HTTPS one does (0 skips it)")
    ap.add_argument("--idle-pattern", choices=("sequential", "burst", "both"), default="both",
                    help="how the plain HTTP idle connections are made: one after the other, each with its "
                    "request (sequential), or all opened, then every request sent at once (burst, see burst.py)")
    ap.add_argument("--resume-client", metavar="BIN",
                    help="the resumed-handshake load generator (default: OUT/resume-client, built by run.sh)")
    ap.add_argument("--grpc-backend", metavar="BIN",
                    help="the h2c gRPC backend (default: OUT/grpc-backend, built by run.sh)")
    ap.add_argument("--grpc-interop", metavar="BIN",
                    help="grpc-go's interop server (default: OUT/grpc-interop, built by run.sh)")
    args = ap.parse_args()
    default = "rampart,rampart-before,haproxy,nginx" if args.baseline else "rampart,haproxy,nginx"
    proxies = (args.proxies or default).split(",")
    if "rampart-before" in proxies and not args.baseline:
        sys.exit("rampart-before needs --baseline BIN")
    for tool in ("nginx", "haproxy", "wrk", "taskset", "openssl"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: run bench/run.sh, which installs it")
    scenarios = args.scenarios.split(",")
    for s in scenarios:
        if s not in SCENARIOS:
            sys.exit(f"unknown scenario {s}; known: {', '.join(SCENARIOS)}")
    if any(SCENARIOS[s][0] in H2_MODES for s in scenarios) and not shutil.which("h2load"):
        sys.exit("h2load is missing: run bench/run.sh, which installs it (nghttp2-client)")
    grpc_bin = os.path.abspath(args.grpc_backend or os.path.join(args.out, "grpc-backend"))
    # grpc-backend also makes the request bodies and checks the calls of the interop scenario.
    if any(SCENARIOS[s][0] in GRPC_MODES for s in scenarios) and not os.access(grpc_bin, os.X_OK):
        sys.exit(f"{grpc_bin} is missing: run bench/run.sh, which builds it from bench/grpc-backend")
    interop_bin = os.path.abspath(args.grpc_interop or os.path.join(args.out, "grpc-interop"))
    if any(SCENARIOS[s][0] == "grpc-interop" for s in scenarios) and not os.access(interop_bin, os.X_OK):
        sys.exit(f"{interop_bin} is missing: run bench/run.sh, which builds it from bench/grpc-interop")
    resume_client = os.path.abspath(args.resume_client or os.path.join(args.out, "resume-client"))
    if any(SCENARIOS[s][3] in (RESUME, FULL, RESET) for s in scenarios) and not os.access(resume_client, os.X_OK):
        sys.exit(f"{resume_client} is missing: run bench/run.sh, which builds it from bench/resume-client")
    os.makedirs(args.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="rampart-bench-")
    procs = {}
    try:
        tls = tls_files(args.out) if any(SCENARIOS[s][0] in ("https", "h2") for s in scenarios) else None
        sni_tls = sni_files(args.out) if any(SCENARIOS[s][0] == "sni" for s in scenarios) else None
        procs["backend"] = backend(workdir, backend_tls_server(sni_tls) if sni_tls else "")
        wait_port(BACKEND_PORT)
        if sni_tls:
            wait_port(BACKEND_TLS_PORT)
        calls = {scenario_call(s) for s in scenarios if SCENARIOS[s][0] in GRPC_MODES}
        grpc_calls = {call: grpc_request(workdir, grpc_bin, call) for call in calls}
        if any(SCENARIOS[s][0] == "grpc" for s in scenarios):
            procs["grpc-backend"] = grpc_backend(workdir, grpc_bin)
            wait_port(GRPC_BACKEND_PORT)
        if any(SCENARIOS[s][0] == "grpc-interop" for s in scenarios):
            procs["grpc-interop"] = grpc_interop_server(workdir, interop_bin)
            wait_port(GRPC_INTEROP_PORT)
        starters = {("l4", "rampart"): lambda: proxy_rampart(workdir, args.rampart),
                    ("l4", "haproxy"): lambda: proxy_haproxy(workdir), ("l4", "nginx"): lambda: proxy_nginx(workdir),
                    ("http", "rampart"): lambda: http_rampart(workdir, args.rampart),
                    ("http", "haproxy"): lambda: http_haproxy(workdir), ("http", "nginx"): lambda: http_nginx(workdir),
                    ("l4", "rampart-before"): lambda: proxy_rampart(workdir, args.baseline, "rampart-before"),
                    ("http", "rampart-before"): lambda: http_rampart(workdir, args.baseline, "rampart-before"),
                    ("https", "rampart"): lambda: https_rampart(workdir, args.rampart, tls),
                    ("https", "haproxy"): lambda: http_haproxy(workdir, tls),
                    ("https", "nginx"): lambda: http_nginx(workdir, tls),
                    ("https", "rampart-before"): lambda: https_rampart(workdir, args.baseline, tls, "rampart-before"),
                    **h2_starters(workdir, args.rampart, args.baseline, tls),
                    **sni_starters(workdir, args.rampart, args.baseline)}
        ports = {"l4": PORTS, "http": HTTP_PORTS, "https": HTTPS_PORTS, **H2_PORTS_BY_MODE, "sni": SNI_PORTS}
        modes = sorted({SCENARIOS[s][0] for s in scenarios})
        for mode in modes:
            for p in proxies:
                procs[(mode, p)] = starters[(mode, p)]()
                try:
                    wait_port(ports[mode][p])
                except RuntimeError:
                    sys.exit(f"{p} ({mode}) did not start listening on {ports[mode][p]}; its log:\n"
                             + tail_log(workdir, p, mode))
                # The CPU time read is that of every thread of this one process (no master, no
                # other worker): say which threads those are, and stop unless all are on CPU 0.
                require_pinned(f"{p} ({mode})", procs[(mode, p)].pid)
        # Memory first, on freshly started proxies, so that no proxy's allocator still holds
        # what the throughput runs left behind.
        idle = ""
        if "http" in modes and args.idle_connections > 0:
            if args.idle_pattern in ("sequential", "both"):
                idle = idle_memory(procs, proxies, args.idle_connections)
            if args.idle_pattern in ("burst", "both"):
                idle += burst_memory(procs, proxies, args.idle_connections)
        if "https" in modes and args.idle_connections > 0:
            idle += idle_memory(procs, proxies, args.idle_connections, tls[0])
        results = {}
        for scenario in scenarios:
            mode = SCENARIOS[scenario][0]
            for rnd in range(args.rounds):
                for p in proxies:
                    r = run_one(p, procs[(mode, p)].pid, ports[mode][p], scenario, args.duration,
                                (resume_client, tls[0] if tls else None, (workdir, grpc_calls),
                                 sni_tls[0] if sni_tls else None))
                    results.setdefault((scenario, p), []).append(r)
                    resumed = f"  resumed {r['resumed'] * 100:.1f}% ({r['tls']})" if "resumed" in r else ""
                    print(f"{scenario} round {rnd + 1} {p:14s} {r['rps']:10.0f} req/s  p50 {r['p50']:.3f} ms  "
                          f"p99 {r['p99']:.3f} ms  cpu {r['cpu_us_per_req']:.2f} us/req (user {r['user_us_per_req']:.2f})  "
                          f"{r['bytes_per_s'] / 1e9:.2f} GB/s  errors {r['errors']}{resumed}"
                          + (f"  proxy busy {r['busy'] * 100:.0f}%" if "busy" in r else "")
                          + (f"  FAILED: {r['failed']}" if r.get("failed") else ""), flush=True)
        # One table and one chart per group of modes.
        groups = [(("l4", "http"), report, ""), (("https",), https_report, "-https"), (H2_MODES, h2_report, "-h2"),
                  (("sni",), sni_report, "-sni")]
        parts = [({k: v for k, v in results.items() if SCENARIOS[k[0]][0] in group}, fn, suffix)
                 for group, fn, suffix in groups]
        parts = [p for p in parts if p[0]]
        table = "\n".join(fn(part, args, proxies) for part, fn, _ in parts) + idle
        print(table)
        with open(os.path.join(args.out, "results.md"), "w") as f:
            f.write(table)
        for part, _, suffix in parts:
            chart(part, proxies, os.path.join(args.out, f"cpu-per-request{suffix}.png"))
    finally:
        stop_all(procs)
        shutil.rmtree(workdir, ignore_errors=True)


def idle_memory(procs, proxies, count, cacert=None):
    """RSS growth of each HTTP proxy while `count` keep-alive client connections sit idle after
    one request each; the connections are opened from this process and closed afterwards. Done
    twice per proxy: the first pass also pays for structures that grow once (connection tables,
    allocator arenas), the second shows the steady cost of an idle connection. With `cacert`, the
    same over HTTPS (a full TLS handshake per connection, verified against `cacert`), on the HTTPS
    proxies."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    mode, ports, kind = ("https", HTTPS_PORTS, "HTTPS") if cacert else ("http", HTTP_PORTS, "")
    context = ssl.create_default_context(cafile=cacert) if cacert else None
    lines = ["", f"Idle {kind + ' ' if kind else ''}keep-alive memory: RSS growth with {count} idle "
             f"{kind + ' ' if kind else ''}client connections "
             "(each after one request), divided by the connections; two passes per proxy.", "",
             "| proxy | pass | RSS before KiB | RSS with idle connections KiB | bytes per idle connection |",
             "|---|---:|---:|---:|---:|"]
    request = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"
    for p in proxies:
        pid = procs[(mode, p)].pid
        for rnd in (1, 2):
            time.sleep(0.5)
            before = rss_kib(pid)
            socks = []
            for _ in range(count):
                s = socket.create_connection(("127.0.0.1", ports[p]))
                if context:
                    s = context.wrap_socket(s, server_hostname=TLS_HOST)
                s.sendall(request)
                socks.append(s)
            for s in socks:
                got = b""
                while b"hello from the backend" not in got:
                    chunk = s.recv(4096)
                    if not chunk:
                        raise RuntimeError(f"{p} closed an idle-test connection")
                    got += chunk
            # Idle means no request for a while: Rampart keeps a connection's request state for
            # 1 s after its last request before it parks it; wait past that.
            time.sleep(2.5)
            after = rss_kib(pid)
            per = (after - before) * 1024 / count
            lines.append(f"| {p} | {rnd} | {before} | {after} | {per:.0f} |")
            print(f"idle {mode} memory {p} pass {rnd}: {before} KiB -> {after} KiB, {per:.0f} bytes per connection", flush=True)
            for s in socks:
                s.close()
            time.sleep(2.5)
    return "\n".join(lines) + "\n"


def chart(results, proxies, path):
    """A grouped bar chart of CPU per request (median) for the small-message scenarios."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing: no chart (bench/run.sh installs it)")
        return
    scenarios = [s for s in dict.fromkeys(k[0] for k in results) if s != "l4-bulk"]
    if not scenarios:
        return
    width = 0.8 / len(proxies)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for i, p in enumerate(proxies):
        values = [statistics.median(r["cpu_us_per_req"] for r in results[(s, p)]) for s in scenarios]
        bars = ax.bar([x + i * width for x in range(len(scenarios))], values, width, label=p)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks([x + width * (len(proxies) - 1) / 2 for x in range(len(scenarios))])
    ax.set_xticklabels(scenarios, fontsize=8)
    ax.set_ylabel("proxy CPU µs per request (lower is better)")
    ax.set_title("One worker pinned to one core; backend and wrk on the other core")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"chart: {path}")


def report(results, args, proxies):
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    # With a baseline, "vs before" is rampart's CPU per request over rampart-before's.
    before = "rampart-before" in proxies
    lines = [f"Medians of {args.rounds} interleaved rounds of {args.duration} s; proxy on CPU 0, "
             f"backend and wrk on CPU 1 ({os.cpu_count()} CPUs).", "",
             "| scenario | proxy | requests/s | p50 ms | p99 ms | CPU µs/request | of which user | "
             + ("vs before | " if before else "") + "GB/s | errors |",
             "|---|---|---:|---:|---:|---:|---:|" + ("---:|" if before else "") + "---:|---:|"]
    for (scenario, p), rs in results.items():
        vs = ""
        if before:
            base = results.get((scenario, "rampart-before")) if p == "rampart" else None
            vs = f"{med(rs, 'cpu_us_per_req') / med(base, 'cpu_us_per_req'):.2f} | " if base else " | "
        lines.append(f"| {scenario} | {p} | {med(rs, 'rps'):.0f} | {med(rs, 'p50'):.3f} | {med(rs, 'p99'):.3f} | "
                     f"{med(rs, 'cpu_us_per_req'):.2f} | {med(rs, 'user_us_per_req'):.2f} | {vs}"
                     f"{med(rs, 'bytes_per_s') / 1e9:.2f} | "
                     f"{sum(r['errors'] for r in rs)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
