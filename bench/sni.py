"""The TLS passthrough scenario of bench.py (issue 14): one connection per request, whose full TLS
handshake goes through the proxy to a TLS backend; the proxy routes the connection on the SNI of
the ClientHello and never terminates TLS (it has no certificate at all).

The backend is bench.py's nginx on CPU 1, which also serves TLS on BACKEND_TLS_PORT with its own
certificate for SNI_HOST (a fresh ECDSA P-256 one per run, in OUT/tls-sni, not the HTTPS
scenarios'). The client is bench/resume-client -resume=false -sni SNI_HOST -cacert that
certificate: a full handshake per connection, verified against the backend's certificate only, so
a proxy that terminated TLS (with any other key) would fail every handshake.

Proxies, each with one route and nothing else, so that any other name is closed:
  Rampart  a TCP listener with `[[listeners.NAME.routes]] match = { sni = SNI_HOST }` (`rampart run`)
  HAProxy  `mode tcp`, `tcp-request inspect-delay 5s`, `tcp-request content accept if
           { req.ssl_hello_type 1 }`, `use_backend tls if { req.ssl_sni -i SNI_HOST }`
  nginx    stream module, `ssl_preread on`, `map $ssl_preread_server_name $up` and `proxy_pass $up`

A round fails (its `failed` says why, and the table says so) when any request failed (a handshake
that did not verify included), when no request succeeded, when the client did not get through its
warm-up or refused its run, or when a handshake with another name was not refused.
"""
import os
import socket
import ssl
import statistics

from common import BACKEND_TLS_PORT, SNI_HOST, SNI_PORTS, start, write
from https import run_resume, tls_files

# Rampart's CPU per connection over the lower of HAProxy's and nginx's must stay at or below this.
SNI_TARGETS = {"sni-passthrough": 1.0}
SNI_SCENARIOS = {
    # name: (mode, connections, path, client, description); the client tuple is bench.FULL, which
    # marks the scenarios that need bench/resume-client.
    "sni-passthrough": ("sni", 64, "/", ("resume-client", False),
                        "TLS passed through by SNI to a TLS backend, one connection (full handshake) per request, 64 at a time"),
}


def sni_files(out):
    """The backend's certificate for SNI_HOST: (cert, key, cert+key)."""
    return tls_files(out, SNI_HOST, "tls-sni")


def backend_tls_server(tls):
    """The server block that bench.backend adds to the backend nginx for this scenario: TLS 1.2 and
    1.3 on BACKEND_TLS_PORT with the SNI_HOST certificate; no session cache or tickets, as the
    client never resumes."""
    return f"""
    server {{
        listen 127.0.0.1:{BACKEND_TLS_PORT} ssl backlog=4096;
        ssl_certificate {tls[0]};
        ssl_certificate_key {tls[1]};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_tickets off;
        location = / {{ return 200 "hello from the TLS backend\\n"; }}
    }}
"""


def sni_rampart(workdir, binary, name="rampart"):
    """A TCP listener with one route on the SNI and no default upstream."""
    conf = write(os.path.join(workdir, f"{name}-sni.toml"), f"""
[listeners.edge]
bind = "127.0.0.1:{SNI_PORTS[name]}"

[[listeners.edge.routes]]
match = {{ sni = "{SNI_HOST}" }}
upstream = "tls"

[upstreams.tls]
targets = ["127.0.0.1:{BACKEND_TLS_PORT}"]
""")
    cmd = ["run", "--config", conf]
    print(f"{name} sni: rampart {' '.join(cmd)}", flush=True)
    return start(["taskset", "-c", "0", os.path.abspath(binary), *cmd, "--workers", "1", "--pin"], workdir,
                 f"{name}-sni")


def sni_haproxy(workdir):
    """HAProxy's documented SNI passthrough: wait for a whole ClientHello, route on its SNI."""
    conf = write(os.path.join(workdir, "haproxy-sni.cfg"), f"""
global
    nbthread 1
    cpu-map 1/1 0
    maxconn 9000
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend sni
    bind 127.0.0.1:{SNI_PORTS['haproxy']}
    tcp-request inspect-delay 5s
    tcp-request content accept if {{ req.ssl_hello_type 1 }}
    use_backend tls if {{ req.ssl_sni -i {SNI_HOST} }}
backend tls
    server t1 127.0.0.1:{BACKEND_TLS_PORT}
""")
    return start(["taskset", "-c", "0", "haproxy", "-db", "-f", conf], workdir, "haproxy-sni")


def sni_nginx(workdir):
    """nginx's stream module with ssl_preread: the upstream from a map on the SNI (none for any
    other name, which nginx then closes)."""
    conf = write(os.path.join(workdir, "nginx-sni.conf"), f"""
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes 1;
worker_cpu_affinity 01;
worker_rlimit_nofile 19000;
daemon off;
master_process off;
pid {workdir}/nginx-sni.pid;
error_log {workdir}/nginx-sni.err warn;
events {{ worker_connections 9000; }}
stream {{
    map $ssl_preread_server_name $up {{ {SNI_HOST} 127.0.0.1:{BACKEND_TLS_PORT}; }}
    server {{ listen 127.0.0.1:{SNI_PORTS['nginx']}; ssl_preread on; proxy_pass $up; }}
}}
""")
    return start(["taskset", "-c", "0", "nginx", "-c", conf, "-p", workdir], workdir, "nginx-sni")


def sni_starters(workdir, rampart, baseline):
    """(mode, proxy) -> a function that starts that proxy for this scenario."""
    starters = {("sni", "rampart"): lambda: sni_rampart(workdir, rampart),
                ("sni", "haproxy"): lambda: sni_haproxy(workdir), ("sni", "nginx"): lambda: sni_nginx(workdir)}
    if baseline:
        starters[("sni", "rampart-before")] = lambda: sni_rampart(workdir, baseline, "rampart-before")
    return starters


def other_name_refused(port, cacert):
    """Whether a handshake that sends a name no route has fails (the proxy closes it): None if so,
    else what happened."""
    context = ssl.create_default_context(cafile=cacert)
    context.check_hostname = False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="other.example") as s:
                return f"a handshake with SNI other.example went through ({s.version()})"
    except (ssl.SSLError, OSError):
        return None


def run_sni(pid, port, scenario, duration, client, cacert):
    """One round: the refusal of another name (unmeasured), then bench/resume-client with full
    handshakes and SNI_HOST (https.run_resume: a 1 s warm-up, then the measured run with the
    proxy's CPU time read around it). Returns the result and (user0, sys0, user1, sys1)."""
    _, conns, path, _, _ = SNI_SCENARIOS[scenario]
    url = f"https://127.0.0.1:{port}{path}"
    refused = other_name_refused(port, cacert)
    try:
        res, times = run_resume(pid, url, conns, duration, False, client, cacert, ["-sni", SNI_HOST])
    except RuntimeError as e:
        res = {"rps": 0.0, "requests": 0, "p50": float("nan"), "p99": float("nan"), "errors": 0,
               "bytes_per_s": 0.0, "resumed": 0.0, "tls": "", "failed": " / ".join(str(e).strip().splitlines()[-3:])}
        return res, (0, 0, 0, 0)
    res["failed"] = ""
    if res["errors"]:
        res["failed"] = f"{res['errors']} failed requests (a handshake that did not verify included)"
    elif res["requests"] == 0:
        res["failed"] = "no request succeeded"
    elif refused:
        res["failed"] = refused
    return res, times


def sni_report(results, args, proxies):
    """The TLS passthrough table: CPU per connection (one request each) split into user and kernel,
    and Rampart's over the lower of HAProxy's and nginx's against the target."""
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    before = "rampart-before" in proxies
    lines = [f"TLS passthrough by SNI (full TLS handshake through the proxy to nginx with its own ECDSA P-256 "
             f"certificate; one request per connection). Medians of {args.rounds} interleaved rounds of "
             f"{args.duration} s; proxy on CPU 0, backend and resume-client on CPU 1 ({os.cpu_count()} CPUs). "
             "\"vs best other\": Rampart's CPU per connection over the lower of HAProxy's and nginx's.", "",
             "| scenario | proxy | connections/s | p50 ms | p99 ms | CPU µs/connection | user | kernel | "
             + ("vs before | " if before else "") + "vs best other | target | TLS | errors |",
             "|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if before else "") + "---:|---|---|---:|"]
    notes = []
    for (scenario, p), rs in results.items():
        cpu, user = med(rs, "cpu_us_per_req"), med(rs, "user_us_per_req")
        kernel = statistics.median(r["cpu_us_per_req"] - r["user_us_per_req"] for r in rs)
        vs_before = ""
        if before:
            base = results.get((scenario, "rampart-before")) if p == "rampart" else None
            vs_before = f"{cpu / med(base, 'cpu_us_per_req'):.2f} | " if base else " | "
        vs, target = "", ""
        others = [med(results[(scenario, o)], "cpu_us_per_req") for o in ("haproxy", "nginx") if (scenario, o) in results]
        if p == "rampart" and others:
            ratio = cpu / min(others)
            goal = SNI_TARGETS.get(scenario)
            vs = f"**{ratio:.2f}**"
            if goal is not None:
                met = ratio <= goal and not any(r["failed"] for r in rs)
                target = f"≤ {goal:.2f} {'met' if met else 'not met'}"
        failed = sum(1 for r in rs if r["failed"])
        notes += [f"- {scenario} {p}: {r['failed']}" for r in rs if r["failed"]]
        errors = f"{sum(r['errors'] for r in rs)}" + (f" ({failed} failed)" if failed else "")
        tls = next((r["tls"] for r in rs if r["tls"]), "")
        lines.append(f"| {scenario} | {p} | {med(rs, 'rps'):.0f} | {med(rs, 'p50'):.3f} | {med(rs, 'p99'):.3f} | "
                     f"{cpu:.2f} | {user:.2f} | {kernel:.2f} | {vs_before}{vs} | {target} | {tls} | {errors} |")
    if notes:
        lines += ["", "Failed rounds:", ""] + list(dict.fromkeys(notes))
    return "\n".join(lines) + "\n"
