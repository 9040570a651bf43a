#!/usr/bin/env python3
"""UDP load balancing: DNS through Rampart (`protocol = "udp"` listener), nginx (`stream` with a
`udp` listener, `proxy_responses 1`) and dnsdist, to the same DNS server.

The backend is one unbound (Debian's, one thread, on CPU 1) answering a local zone (`bench.test`,
`local-data`: NAMES A records, no recursion); dnsperf (Debian's, one thread, on CPU 1 beside it)
sends the queries, each name in turn. Each proxy runs one worker pinned to CPU 0:

  rampart   `rampart run -c CONFIG --workers 1 --pin` (`[global] workers = 1`, a listener with
            `protocol = "udp"` and `session_responses = 1`, as nginx's `proxy_responses 1`: a
            session, and its socket to the target, per answered query; an upstream of the one
            target) under `taskset -c 0`
  nginx     `worker_processes 1`, `worker_cpu_affinity 01`, `stream { server { listen ... udp;
            proxy_pass ...; proxy_responses 1; } }` under `taskset -c 0`
  dnsdist   `setLocal(ADDR, {doTCP=false})` (one UDP listener thread), `newServer` with its
            health check asking a name of the zone, security polling off, under `taskset -c 0`
            (dnsdist also keeps a responder thread per backend and housekeeping threads: all of
            them are on CPU 0 and counted)
  direct    (only when asked for) dnsperf straight to unbound: what the backend and the load
            generator manage without a proxy; no proxy CPU

Two phases per proxy, rounds interleaved (R, N, D, R, N, D, ...), each run after a 1 s unmeasured
warm-up:

  max    dnsperf -c CLIENTS -q OUTSTANDING -l DURATION: queries/s, the proxy's CPU per answered
         query (utime and stime from /proc/PID/stat around the run, all threads, user and kernel
         apart), how busy CPU 0 was with it (CPU seconds over dnsperf's run time), the queries
         lost (not answered within 2 s) and the host's UDP receive-buffer drops (RcvbufErrors of
         /proc/net/snmp, all sockets: with OUTSTANDING queries sent at once at the start, a
         proxy's listening socket with the default buffer drops a few hundred)
  rate   dnsperf -Q RATE -l DURATION (default 20,000 queries/s, below every proxy's saturation):
         the same, and the run fails unless no query was lost

A proxy that does not start (exits, or answers no query through it within 10 s) is skipped with
its log's end, and the others run (Rampart's UDP listener may not exist in the binary given).

    bench/run.sh udp                                     # 3 rounds of 10 s, rampart,nginx,dnsdist
    bench/run.sh udp --proxies nginx,dnsdist,direct --rounds 1 --duration 3
    python3 bench/udp.py --rampart target/release/rampart --rate 10000
"""
import argparse
import os
import random
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from common import cpu_seconds, nginx_main, require_pinned, start, stop_all, write

BACKEND_PORT = 18140
PORTS = {"rampart": 18141, "nginx": 18143, "dnsdist": 18145, "direct": BACKEND_PORT}
ZONE = "bench.test"
NAMES = 1000


def tools():
    """unbound, kdig, dnsperf, dnsdist from scripts/dns-tools (which installs what is missing)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "dns-tools")
    out = subprocess.run([script], capture_output=True, text=True)
    paths = out.stdout.split()
    if out.returncode != 0 or len(paths) != 4:
        sys.exit(f"scripts/dns-tools failed:\n{out.stdout}\n{out.stderr}")
    return dict(zip(("unbound", "kdig", "dnsperf", "dnsdist"), paths))


def backend(workdir, unbound):
    """unbound on CPU 1: one thread, the zone's names from local-data, nothing else."""
    records = "\n".join(f'    local-data: "h{i}.{ZONE}. 3600 IN A 127.0.{i // 250}.{i % 250 + 1}"' for i in range(NAMES))
    conf = write(os.path.join(workdir, "unbound.conf"), f"""
server:
    interface: 127.0.0.1
    port: {BACKEND_PORT}
    do-ip6: no
    do-tcp: no
    num-threads: 1
    do-daemonize: no
    chroot: ""
    username: ""
    directory: "{workdir}"
    pidfile: ""
    logfile: ""
    use-syslog: no
    verbosity: 0
    access-control: 127.0.0.0/8 allow
    num-queries-per-thread: 4096
    outgoing-range: 8192
    so-rcvbuf: 4m
    so-sndbuf: 4m
    module-config: "iterator"
    local-zone: "{ZONE}." static
{records}
remote-control:
    control-enable: no
""")
    return start(["taskset", "-c", "1", unbound, "-d", "-c", conf], workdir, "unbound")


def rampart(workdir, binary):
    conf = write(os.path.join(workdir, "rampart-udp.toml"), f"""
[global]
workers = 1

[listeners.dns]
bind = "127.0.0.1:{PORTS['rampart']}"
protocol = "udp"
upstream = "dns"
session_responses = 1

[upstreams.dns]
targets = ["127.0.0.1:{BACKEND_PORT}"]
""")
    return start(["taskset", "-c", "0", os.path.abspath(binary), "run", "-c", conf, "--workers", "1", "--pin"],
                 workdir, "rampart")


def nginx(workdir):
    conf = write(os.path.join(workdir, "nginx-udp.conf"),
                 "load_module /usr/lib/nginx/modules/ngx_stream_module.so;\n"
                 + nginx_main(workdir, "nginx-udp", "01", 9000) + f"""
stream {{
    upstream dns {{ server 127.0.0.1:{BACKEND_PORT}; }}
    server {{
        listen 127.0.0.1:{PORTS['nginx']} udp;
        proxy_pass dns;
        proxy_responses 1;
        proxy_timeout 5s;
    }}
}}
""")
    return start(["taskset", "-c", "0", "nginx", "-c", conf, "-p", workdir], workdir, "nginx")


def dnsdist(workdir, binary):
    conf = write(os.path.join(workdir, "dnsdist.conf"), f"""
setSecurityPollSuffix("")
setLocal("127.0.0.1:{PORTS['dnsdist']}", {{ doTCP = false, reusePort = false }})
setACL({{"127.0.0.0/8"}})
newServer({{ address = "127.0.0.1:{BACKEND_PORT}", name = "unbound", checkName = "h0.{ZONE}.", checkInterval = 1 }})
setServerPolicy(firstAvailable)
""")
    return start(["taskset", "-c", "0", binary, "--supervised", "--disable-syslog", "-C", conf], workdir, "dnsdist")


def query(name, qid):
    header = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return header + labels + struct.pack("!HH", 1, 1)


def answers(port, timeout=10.0, proc=None):
    """Asks h0.bench.test A through `port` until an answer with the same id and NOERROR comes
    back, up to `timeout` s; False when none did (or `proc` exited)."""
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.2)
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                return False
            qid = random.randrange(65536)
            s.sendto(query(f"h0.{ZONE}", qid), ("127.0.0.1", port))
            try:
                while True:
                    data = s.recv(4096)
                    if len(data) >= 12 and struct.unpack("!H", data[:2])[0] == qid:
                        return data[3] & 0x0F == 0 and struct.unpack("!H", data[6:8])[0] >= 1
            except socket.timeout:
                continue
    return False


def parse_dnsperf(out):
    def num(pattern, cast=float, default=0):
        m = re.search(pattern, out)
        return cast(m.group(1)) if m else default
    res = {"sent": num(r"Queries sent:\s+(\d+)", int), "completed": num(r"Queries completed:\s+(\d+)", int),
           "lost": num(r"Queries lost:\s+(\d+)", int), "qps": num(r"Queries per second:\s+([\d.]+)"),
           "latency_ms": num(r"Average Latency \(s\):\s+([\d.]+)") * 1000,
           "run_s": num(r"Run time \(s\):\s+([\d.]+)"),
           "noerror": num(r"NOERROR (\d+)", int), "failed": ""}
    if "Queries sent" not in out:
        res["failed"] = "dnsperf: " + " / ".join(out.strip().splitlines()[-3:])
    elif res["completed"] == 0:
        res["failed"] = "no query answered"
    elif res["noerror"] != res["completed"]:
        res["failed"] = f"{res['completed'] - res['noerror']} answers not NOERROR"
    return res


def udp_drops():
    """The host's UDP datagrams dropped for a full receive buffer (Udp: RcvbufErrors), all sockets."""
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Udp:")]
    return int(dict(zip(rows[0][1:], rows[1][1:])).get("RcvbufErrors", 0))


def run(dnsperf, datafile, port, pid, phase, args):
    """One measured dnsperf run of `phase` ("max" or "rate") through `port`, after a 1 s unmeasured
    warm-up, with the CPU time of process `pid` (None: no proxy) read around it."""
    cmd = ["taskset", "-c", "1", dnsperf, "-s", "127.0.0.1", "-p", str(port), "-d", datafile, "-c", str(args.clients),
           "-T", "1", "-t", "2"]
    cmd += ["-q", str(args.outstanding)] if phase == "max" else ["-q", str(args.outstanding), "-Q", str(args.rate)]
    subprocess.run(cmd + ["-l", "1"], capture_output=True, timeout=60)
    user0, sys0 = cpu_seconds(pid) if pid else (0.0, 0.0)
    drops0 = udp_drops()
    proc = subprocess.run(cmd + ["-l", str(args.duration)], capture_output=True, text=True,
                          timeout=args.duration + 60)
    user1, sys1 = cpu_seconds(pid) if pid else (0.0, 0.0)
    res = parse_dnsperf(proc.stdout + proc.stderr)
    n = max(res["completed"], 1)
    # Busy: the proxy's CPU seconds over dnsperf's run time (which leaves out the wait for the
    # answers of the last queries, up to its 5 s timeout when some are lost).
    res.update(user_us=(user1 - user0) * 1e6 / n, sys_us=(sys1 - sys0) * 1e6 / n,
               cpu_us=((user1 - user0) + (sys1 - sys0)) * 1e6 / n,
               busy=((user1 - user0) + (sys1 - sys0)) / res["run_s"] if res["run_s"] else float("nan"),
               drops=udp_drops() - drops0)
    if phase == "rate" and res["lost"] and not res["failed"]:
        res["failed"] = f"{res['lost']} queries lost at {args.rate} queries/s"
    return res


def report(results, args, proxies):
    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    lines = [f"DNS over UDP through each proxy (one worker on CPU 0) to one unbound (CPU 1); dnsperf on CPU 1, "
             f"{args.clients} clients. Medians of {args.rounds} interleaved rounds of {args.duration} s. "
             f"max: up to {args.outstanding} queries outstanding; rate: {args.rate} queries/s, target 0 lost.", "",
             "| phase | proxy | queries/s | avg latency ms | CPU µs/query | user µs | kernel µs | busy % | lost | "
             "rcvbuf drops | failed rounds |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    notes = []
    for (phase, p), rs in results.items():
        cpu = "- | - | - | -" if p == "direct" else (f"{med(rs, 'cpu_us'):.2f} | {med(rs, 'user_us'):.2f} | "
                                                   f"{med(rs, 'sys_us'):.2f} | {med(rs, 'busy') * 100:.0f}")
        failed = sum(1 for r in rs if r["failed"])
        notes += [f"- {phase} {p}: {r['failed']}" for r in rs if r["failed"]]
        lines.append(f"| {phase} | {p} | {med(rs, 'qps'):.0f} | {med(rs, 'latency_ms'):.3f} | {cpu} | "
                     f"{sum(r['lost'] for r in rs)} | {sum(r['drops'] for r in rs)} | {failed} |")
    skipped = [p for p in proxies if not any(k[1] == p for k in results)]
    if skipped:
        notes.append(f"- not measured (did not start): {', '.join(skipped)}")
    if notes:
        lines += ["", "Notes:", ""] + list(dict.fromkeys(notes))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rampart", default="target/release/rampart")
    ap.add_argument("--proxies", default="rampart,nginx,dnsdist",
                    help=f"comma-separated, from {', '.join(PORTS)}")
    ap.add_argument("--phases", default="max,rate")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--rate", type=int, default=20000, help="queries/s of the rate phase")
    ap.add_argument("--outstanding", type=int, default=500, help="dnsperf -q: queries in flight at most")
    ap.add_argument("--clients", type=int, default=8, help="dnsperf -c: clients (source ports)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out"))
    args = ap.parse_args()
    proxies = args.proxies.split(",")
    phases = args.phases.split(",")
    for p in proxies:
        if p not in PORTS:
            sys.exit(f"unknown proxy {p}; known: {', '.join(PORTS)}")
    for ph in phases:
        if ph not in ("max", "rate"):
            sys.exit(f"unknown phase {ph}; known: max, rate")
    for tool in ("taskset", "nginx"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: run bench/run.sh, which installs it")
    paths = tools()
    os.makedirs(args.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="rampart-udp-bench-")
    datafile = write(os.path.join(workdir, "queries.txt"), "".join(f"h{i}.{ZONE} A\n" for i in range(NAMES)))
    starters = {"rampart": lambda: rampart(workdir, args.rampart), "nginx": lambda: nginx(workdir),
                "dnsdist": lambda: dnsdist(workdir, paths["dnsdist"])}
    procs = {}
    try:
        procs["backend"] = backend(workdir, paths["unbound"])
        if not answers(BACKEND_PORT, proc=procs["backend"]):
            sys.exit("unbound does not answer:\n" + open(os.path.join(workdir, "unbound.log")).read()[-3000:])
        running = []
        for p in proxies:
            if p == "direct":
                running.append(p)
                continue
            procs[p] = starters[p]()
            if not answers(PORTS[p], proc=procs[p]):
                log = os.path.join(workdir, f"{p}.log")
                err = os.path.join(workdir, f"{p}-udp.err")
                text = "".join(open(f).read()[-3000:] for f in (log, err) if os.path.exists(f))
                print(f"SKIPPED {p}: it did not answer a query through 127.0.0.1:{PORTS[p]} within 10 s"
                      f" ({'exited ' + str(procs[p].poll()) if procs[p].poll() is not None else 'still running'}); "
                      f"its log:\n{text}", flush=True)
                procs.pop(p).kill()
                continue
            require_pinned(p, procs[p].pid)
            running.append(p)
        if not running:
            sys.exit("no proxy to measure")
        results = {}
        for rnd in range(args.rounds):
            for phase in phases:
                for p in running:
                    r = run(paths["dnsperf"], datafile, PORTS[p], procs[p].pid if p in procs else None, phase, args)
                    results.setdefault((phase, p), []).append(r)
                    print(f"round {rnd + 1} {phase:4s} {p:8s} {r['qps']:9.0f} q/s  lost {r['lost']:6d}  "
                          f"latency {r['latency_ms']:.3f} ms  CPU {r['cpu_us']:.2f} µs/query (user {r['user_us']:.2f}, "
                          f"kernel {r['sys_us']:.2f})  busy {r['busy'] * 100:.0f}%  rcvbuf drops {r['drops']}"
                          + (f"  FAILED: {r['failed']}" if r["failed"] else ""), flush=True)
        text = report(results, args, proxies)
        write(os.path.join(args.out, "udp.md"), text)
        print(text)
    finally:
        stop_all(procs)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
