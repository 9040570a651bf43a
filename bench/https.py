"""The HTTPS scenarios of bench.py: a certificate per run, Rampart's TLS listener (HAProxy's and
nginx's are their HTTP configs with TLS, in bench.py), the resume-client runs (one request per
connection, full or resumed handshake), and the HTTPS table."""
import os
import statistics
import subprocess

from common import BACKEND_PORT, HTTPS_PORTS, TLS_HOST, cpu_seconds, start, write

# Rampart's CPU per request over the lower of HAProxy's and nginx's must stay at or below these.
HTTPS_TARGETS = {"https-keepalive": 0.8, "https-close": 1.0, "https-resume": 1.0}


def tls_files(out, host=TLS_HOST, subdir="tls"):
    """A fresh self-signed ECDSA P-256 certificate for `host` in OUT/`subdir`: (cert, key, cert+key
    for HAProxy)."""
    d = os.path.abspath(os.path.join(out, subdir))
    os.makedirs(d, exist_ok=True)
    cert, key, both = (os.path.join(d, f) for f in ("cert.pem", "key.pem", "haproxy.pem"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "30", "-keyout", key, "-out", cert, "-subj", f"/CN={host}",
                    "-addext", f"subjectAltName=DNS:{host}"], check=True, capture_output=True)
    with open(both, "w") as f:
        f.write(open(cert).read() + open(key).read())
    return cert, key, both


def rampart_has_tls_flags(binary):
    out = subprocess.run([os.path.abspath(binary), "http", "--help"], capture_output=True, text=True).stdout
    return "--tls-cert" in out


def https_rampart(workdir, binary, tls, name="rampart"):
    """`rampart http` with --tls-cert/--tls-key; a build without those flags gets the same listener
    from a config file ([listeners.NAME.tls]) through `rampart run`."""
    cert, key, _ = tls
    port = HTTPS_PORTS[name]
    if rampart_has_tls_flags(binary):
        cmd = ["http", "--listen", f"127.0.0.1:{port}", "--to", f"127.0.0.1:{BACKEND_PORT}",
               "--tls-cert", cert, "--tls-key", key]
    else:
        conf = write(os.path.join(workdir, f"{name}-https.toml"), f"""
[listeners.bench]
bind = "127.0.0.1:{port}"
protocol = "http"
upstream = "backend"

[listeners.bench.tls]
certificates = [{{ cert = "{cert}", key = "{key}" }}]

[upstreams.backend]
targets = ["127.0.0.1:{BACKEND_PORT}"]
""")
        cmd = ["run", "--config", conf]
    print(f"{name} https: rampart {' '.join(cmd)}", flush=True)
    return start(["taskset", "-c", "0", os.path.abspath(binary), *cmd, "--workers", "1", "--pin"], workdir,
                 f"{name}-https")


def run_resume(pid, url, conns, duration, resume, client, cacert, extra=()):
    """bench/resume-client, `Connection: close` on every request, with a resumed (or, without
    `resume`, a full) TLS handshake each: a 1 s warm-up that also fills its session cache, then the
    measured run; the proxy's CPU time is read exactly around the measured run (the client waits
    for a line). The client fails when under 90% of handshakes resumed (or, without `resume`, when
    any did). With `resume` "reset": plain HTTP, keep-alive requests, each connection closed by a
    client reset after its response (see bench.RESET). `extra`: more resume-client arguments."""
    if resume == "reset":
        # Plain HTTP, a keep-alive request and a client reset per connection (bench.RESET).
        tls_args = ["-reset"]
    else:
        tls_args = ["-cacert", cacert, f"-resume={'true' if resume else 'false'}"]
    cmd = ["taskset", "-c", "1", client, "-c", str(conns), "-d", f"{duration}s", "-warmup", "1s", *tls_args, *extra, "-sync", url]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready = proc.stdout.readline()
    if ready.strip() != "ready":
        proc.kill()
        _, err = proc.communicate()
        raise RuntimeError(f"resume-client did not get through its warm-up: {ready}{err}")
    user0, sys0 = cpu_seconds(pid)
    out, err = proc.communicate("go\n")
    user1, sys1 = cpu_seconds(pid)
    if proc.returncode != 0:
        raise RuntimeError(f"resume-client failed (exit {proc.returncode}):\n{out}{err}")
    if err.strip():
        print(err.strip(), flush=True)
    kv = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    res = {"rps": float(kv["rps"]), "requests": int(kv["requests"]), "p50": float(kv["p50_ms"]),
           "p99": float(kv["p99_ms"]), "errors": int(kv["errors"]), "bytes_per_s": 0.0,
           "resumed": float(kv["resumed_fraction"]), "tls": kv.get("tls", "")}
    if resume == "reset":
        del res["resumed"], res["tls"]
    return res, (user0, sys0, user1, sys1)


def https_report(results, args, proxies):
    """The HTTPS table: CPU per request split into user and kernel, Rampart's CPU per request over
    the lower of HAProxy's and nginx's against the scenario's target, and for resumed handshakes
    the fraction of handshakes that were resumptions (lowest round)."""
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    before = "rampart-before" in proxies
    lines = [f"HTTPS (TLS at the proxy, ECDSA P-256 certificate, plain HTTP to the backend). Medians of "
             f"{args.rounds} interleaved rounds of {args.duration} s; proxy on CPU 0, backend and load "
             f"generator on CPU 1 ({os.cpu_count()} CPUs). \"vs best other\": Rampart's CPU per request over "
             "the lower of HAProxy's and nginx's.", "",
             "| scenario | proxy | requests/s | p50 ms | p99 ms | CPU µs/request | user | kernel | "
             + ("vs before | " if before else "") + "vs best other | target | resumed | errors |",
             "|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if before else "") + "---:|---:|---:|---:|"]
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
            goal = HTTPS_TARGETS.get(scenario)
            vs = f"**{ratio:.2f}**"
            if goal is not None:
                target = f"≤ {goal:.1f} {'met' if ratio <= goal else 'not met'}"
        resumed = f"{min(r['resumed'] for r in rs) * 100:.1f}%" if "resumed" in rs[0] else ""
        lines.append(f"| {scenario} | {p} | {med(rs, 'rps'):.0f} | {med(rs, 'p50'):.3f} | {med(rs, 'p99'):.3f} | "
                     f"{cpu:.2f} | {user:.2f} | {kernel:.2f} | {vs_before}{vs} | {target} | {resumed} | "
                     f"{sum(r['errors'] for r in rs)} |")
    return "\n".join(lines) + "\n"
