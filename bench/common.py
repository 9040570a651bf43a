"""Shared by the bench scripts (bench.py, https.py, h2.py, tracing.py, ...): ports, and starting and
watching processes."""
import os
import signal
import socket
import subprocess
import sys
import time

BACKEND_PORT = 18080
# L4 ports, then HTTP ports (proxy name -> port), per mode.
PORTS = {"rampart": 18001, "haproxy": 18002, "nginx": 18003, "rampart-before": 18004}
HTTP_PORTS = {"rampart": 18011, "haproxy": 18012, "nginx": 18013, "rampart-before": 18014}
HTTPS_PORTS = {"rampart": 18021, "haproxy": 18022, "nginx": 18023, "rampart-before": 18024}
# HTTP/2 (h2.py): in clear with prior knowledge, over TLS (ALPN h2), and gRPC to an h2c backend.
H2C_PORTS = {"rampart": 18031, "haproxy": 18032, "nginx": 18033, "rampart-before": 18034}
H2_PORTS = {"rampart": 18041, "haproxy": 18042, "nginx": 18043, "rampart-before": 18044}
GRPC_PORTS = {"rampart": 18051, "haproxy": 18052, "nginx": 18053, "rampart-before": 18054}
GRPC_BACKEND_PORT = 18081
# gRPC to grpc-go's interop server (h2.py, grpc-unary-h2c-interop): the proxies' ports, the server's.
GRPC_INTEROP_PORTS = {"rampart": 18121, "haproxy": 18122, "nginx": 18123, "rampart-before": 18124}
GRPC_INTEROP_PORT = 18083
# TLS passthrough by SNI (sni.py): the proxies' ports, and the backend's TLS port, whose
# certificate names SNI_HOST (the name clients send; it need not resolve).
SNI_PORTS = {"rampart": 18061, "haproxy": 18062, "nginx": 18063, "rampart-before": 18064}
BACKEND_TLS_PORT = 18082
SNI_HOST = "bench.example"
# The name in the certificate; it resolves to 127.0.0.1 here, and clients send it as SNI.
TLS_HOST = "localhost"
TICK = os.sysconf("SC_CLK_TCK")


def nginx_main(workdir, name, cpu_mask="01", connections=12000):
    """The main context of an nginx config: one worker pinned by `cpu_mask`, in the foreground,
    its pid and error log in `workdir` under `name`. The `http` or `stream` block follows."""
    return f"""
worker_processes 1;
worker_cpu_affinity {cpu_mask};
worker_rlimit_nofile 19000;
daemon off;
master_process off;
pid {workdir}/{name}.pid;
error_log {workdir}/{name}.err warn;
events {{ worker_connections {connections}; }}
"""


def wait_port(port, timeout=10.0, proc=None):
    """Waits until something accepts connections on 127.0.0.1:`port`; RuntimeError after `timeout`
    s, or as soon as `proc` (a Popen, when given) has exited."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"exited {proc.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


def free_ports(n):
    """`n` different TCP ports of 127.0.0.1 that nothing listens on now (the kernel's picks, all
    held until every one is chosen), for a server that takes its ports from a config file."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def cpu_seconds(pid):
    """(user, system) CPU seconds of the process, all threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of the whole line; after the command they are 12, 13.
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def threads(pid):
    """[(name, CPUs allowed)] of every thread of the process, from /proc/PID/task/*/status."""
    out = []
    for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
        fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/task/{tid}/status") if ":" in line)
        out.append((fields["Name"].strip(), fields["Cpus_allowed_list"].strip()))
    return out


def require_pinned(name, pid):
    """Says which threads process `pid` (`name` in the output) has and where each may run, and
    stops the benchmark unless every one is allowed on CPU 0 only: the CPU time read is that of
    all its threads, which must share the proxy's core."""
    ts = threads(pid)
    print(f"{name}: pid {pid}, threads (CPUs): " + ", ".join(f"{n} ({c})" for n, c in ts), flush=True)
    if any(c != "0" for _, c in ts):
        sys.exit(f"{name} has a thread allowed outside CPU 0")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def start(cmd, workdir, name):
    log = open(os.path.join(workdir, f"{name}.log"), "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)


def stop_all(procs):
    """SIGTERM to every process of `procs` (a dict of Popen), then waits for each, killing one
    that takes longer than 10 s."""
    for p in procs.values():
        p.send_signal(signal.SIGTERM)
    for p in procs.values():
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def tail_log(workdir, name, mode):
    """The end of a proxy's output and error log, for a proxy that did not start."""
    base = name if mode == "l4" else f"{name}-{mode}"
    text = ""
    for ext in (".log", ".err"):
        path = os.path.join(workdir, base + ext)
        if os.path.exists(path):
            text += open(path).read()[-3000:]
    return text


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path
