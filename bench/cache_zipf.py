#!/usr/bin/env python3
"""HTTP cache hit ratio on a Zipf key set larger than the store (issue 39): Rampart's memory store
(S3-FIFO) beside nginx `proxy_cache` and Varnish `-s malloc` (both LRU), each holding the same
number of objects, in front of the same backend, fed the same request sequence.

The backend is nginx on CPU 1 serving N files `/obj/<i>` (i in 0..N), each S bytes beginning
`obj <i>\\n`, and `/scan/<anything>` (one file of S bytes), all with `Cache-Control:
max-age=3600`; its access log (the request target, one line per request) counts what reached it.
Each proxy runs one worker (Varnish: its smallest thread pool) pinned to CPU 0, keys on scheme,
host and target (Varnish: host and URL), and is started afresh, empty, for every sequence.

The client is this script on CPU 1: one keep-alive HTTP/1.1 connection, one request at a time
(the hit ratio does not depend on speed). The sequence: R requests whose keys follow Zipf(alpha)
over the N objects (rank i drawn with probability proportional to 1/(i+1)^alpha, key = rank;
Python's `random.Random(seed)`, the same sequence for every proxy), for alpha 0.8 and 1.0; and,
with scans, the same R requests with a scan every `--scan-every` of them (default: the store's
object capacity C): `--scan-len` (default C) requests for `/scan/<j>` keys requested once only,
as crates/cache/src/store_tests.rs does at the unit level. The first 10% of the Zipf requests
(and the scans among them) warm the caches and are not counted. Counted: the Zipf requests after
the warm-up; a hit is a response with `Cache-Status: Rampart; hit...` (Rampart), or
`X-Cache: HIT` (nginx: `add_header X-Cache $upstream_cache_status always`; Varnish: set in
`vcl_deliver` from `obj.hits > 0`). Every response is checked: status 200, S bytes, and an
object's first line names it. Cross-check: the backend's `/obj/` requests after the warm-up
should equal the counted misses. `lru-sim` is an exact LRU of C objects run in Python over the
same sequence (no proxy), the reference for the LRU rows.

Equal capacity: every store holds C objects (`--capacity`) by its own accounting, measured by a
probe before the runs (a throwaway instance of the proxy with a large store; for Rampart and
Varnish, 20 `/scan/probe-<k>` objects fetched and the store's count read; nginx below):
  rampart         `[caches.main] size = C x W`, W the bytes the store counts per object
                  (`GET /api/caches` bytes / objects: the body, the stored fields plus 16 bytes
                  each, and ENTRY_OVERHEAD, 768: 2,128 for 1 KiB); one shard below 16 MiB.
  varnish         `-s malloc,C x W`, W the storage's bytes per object (varnishstat
                  SMA.s0.g_bytes / objects: the object, its headers, its body; 1,376 for 1 KiB).
                  Its LRU moves an object to the front at most once per `lru_interval` (2 s, the
                  default, kept), so without scans it scores below lru-sim.
  nginx           nginx as cache.py runs it (one process, `master_process off`, so no cache
                  manager): the LRU bound is the keys zone, sized to hold C keys (the probe fills
                  a zone and counts its files, nodes being 128-byte slab chunks, 32 a page, then
                  sizes it again until it holds C +/- 32). A miss that finds the zone full makes
                  the worker remove the least recently used entry and its file at once
                  (ngx_http_file_cache_exists -> ngx_http_file_cache_forced_expire): exact LRU at C
                  objects. max_size is set as for nginx-max-size but nothing enforces it here.
  nginx-max-size  nginx as deployed with `max_size` (`master_process on`, so its cache manager
                  runs): `proxy_cache_path ... keys_zone=main:16m max_size=C x F
                  manager_files=10000 manager_sleep=50ms manager_threshold=200ms inactive=1d`
                  (a pass deletes up to 10,000 files or for 200 ms, not nginx's default 100 files,
                  which cannot keep up with a scan's misses), F a cache file's size
                  on the tmpfs in blocks (nginx counts ceil(max(st_size, st_blocks x 512) / f_bsize)
                  blocks per file: 4,096 bytes for 1 KiB objects). nginx exceeds max_size between
                  the manager's passes, and not briefly: a pass that gets under max_size returns
                  the wait until the least recently used entry's `inactive` expiry, capped at
                  10 s (ngx_http_file_cache_manager, unchanged from 1.22 to nginx's current
                  source), so manager_sleep only paces passes that are still deleting; at
                  hundreds of misses a second it holds far more than C objects (the table's
                  "held" columns: objects at the end, and the most seen, sampled every 1/50th of
                  the sequence). Its hit ratio depends on the request rate; it is not LRU at C.
nginx's cache directory is on tmpfs (/dev/shm), `levels=1:2 use_temp_path=off`.

Reported per proxy, alpha and scans: the hit ratio, the counted misses beside the backend's
`/obj/` requests, the objects held (end, most), and Rampart's hit ratio over each peer's.

    bench/run.sh cache-zipf                          # N=20000 x 1 KiB, C=2000, R=200000, both alphas, +/- scans
    python3 bench/cache_zipf.py --rampart target/release/rampart --objects 5000 --capacity 1000 \\
        --requests 20000 --alphas 0.8 --scans no     # a smoke run
"""
import argparse
import bisect
import collections
import itertools
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from common import nginx_main, start, stop_all, wait_port, write

BACKEND_PORT = 18130
PORTS = {"rampart": 18131, "nginx": 18132, "nginx-max-size": 18133, "varnish": 18134}
ADMIN_PORT = 18135
HOST = "zipf.bench"
PROXIES = ("rampart", "nginx", "nginx-max-size", "varnish")
PROBES = 20
NODES_PER_PAGE = 32  # nginx keys zone: 4,096-byte pages of 128-byte nodes


# --- the backend -------------------------------------------------------------------------------

def make_files(workdir, n, size):
    """N files obj/<i> of `size` bytes, each beginning `obj <i>\\n`, and one scan.bin."""
    root = os.path.join(workdir, "www")
    os.makedirs(os.path.join(root, "obj"))
    filler = os.urandom(size)
    for i in range(n):
        head = b"obj %d\n" % i
        with open(os.path.join(root, "obj", str(i)), "wb") as f:
            f.write(head + filler[: size - len(head)])
    with open(os.path.join(root, "scan.bin"), "wb") as f:
        f.write(filler)
    return root


def backend(workdir, root):
    conf = write(os.path.join(workdir, "backend.conf"), nginx_main(workdir, "backend", "10") + f"""
http {{
    log_format target '$request_uri';
    access_log {workdir}/backend-access.log target;
    default_type application/octet-stream;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    server {{
        listen 127.0.0.1:{BACKEND_PORT};
        root {root};
        add_header Cache-Control "max-age=3600";
        location /obj/ {{ }}
        location /scan/ {{ try_files /scan.bin =404; }}
    }}
}}
""")
    return start(["taskset", "-c", "1", "nginx", "-c", conf, "-p", workdir], workdir, "backend")


def backend_log_size(workdir):
    return os.path.getsize(os.path.join(workdir, "backend-access.log"))


def backend_requests(workdir, since):
    """(/obj/ requests, /scan/ requests) in the backend's access log from byte `since`."""
    with open(os.path.join(workdir, "backend-access.log"), "rb") as f:
        f.seek(since)
        lines = f.read().splitlines()
    objs = sum(1 for line in lines if line.startswith(b"/obj/"))
    return objs, len(lines) - objs


# --- the proxies -------------------------------------------------------------------------------

class Instance:
    """A started proxy: its processes, its port, what it needs to count what it holds."""

    def __init__(self, name, proc, port, held, cleanup=None, info=""):
        self.name, self.proc, self.port, self.held = name, proc, port, held
        self.cleanup, self.info = cleanup, info

    def stop(self):
        stop_all({"p": self.proc})
        if self.cleanup:
            self.cleanup()


def rampart(workdir, binary, size, tag):
    conf = write(os.path.join(workdir, f"rampart-{tag}.toml"), f"""
[admin]
listen = "127.0.0.1:{ADMIN_PORT}"

[caches.main]
size = "{size}"

[listeners.web]
bind = "127.0.0.1:{PORTS['rampart']}"
protocol = "http"

[[listeners.web.routes]]
upstream = "app"
cache = {{ store = "main" }}

[upstreams.app]
targets = ["127.0.0.1:{BACKEND_PORT}"]
""")
    proc = start(["taskset", "-c", "0", os.path.abspath(binary), "run", "-c", conf, "--workers", "1", "--pin"],
                 workdir, f"rampart-{tag}")

    def store():
        with urllib.request.urlopen(f"http://127.0.0.1:{ADMIN_PORT}/api/caches", timeout=10) as r:
            return json.load(r)["caches"][0]
    inst = Instance("rampart", proc, PORTS["rampart"], lambda: store()["objects"], info=f"size = {size}")
    inst.store = store
    return inst


def nginx(workdir, name, tag, keys_zone, max_size):
    """nginx `proxy_cache` on a new tmpfs directory: `nginx` one process (no cache manager), or
    `nginx-max-size` with its master and cache manager."""
    cache_dir = tempfile.mkdtemp(prefix="rampart-bench-zipf-nginx-", dir="/dev/shm")
    main = nginx_main(workdir, f"{name}-{tag}")
    manager = ""
    if name == "nginx-max-size":
        main = main.replace("master_process off;", "master_process on;")
        manager = " manager_files=10000 manager_sleep=50ms manager_threshold=200ms"
    conf = write(os.path.join(workdir, f"{name}-{tag}.conf"), main + f"""
http {{
    access_log off;
    keepalive_timeout 300s;
    keepalive_requests 100000000;
    proxy_cache_path {cache_dir} levels=1:2 keys_zone=main:{keys_zone} max_size={max_size}{manager} inactive=1d use_temp_path=off;
    upstream backend {{
        server 127.0.0.1:{BACKEND_PORT};
        keepalive 8;
    }}
    server {{
        listen 127.0.0.1:{PORTS[name]};
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache main;
            proxy_cache_key $scheme$host$request_uri;
            add_header X-Cache $upstream_cache_status always;
        }}
    }}
}}
""")
    proc = start(["taskset", "-c", "0", "nginx", "-c", conf, "-p", workdir], workdir, f"{name}-{tag}")
    inst = Instance(name, proc, PORTS[name], lambda: len(cache_files(cache_dir)),
                    cleanup=lambda: shutil.rmtree(cache_dir, ignore_errors=True),
                    info=f"keys_zone={keys_zone} max_size={max_size}{manager}")
    inst.cache_dir = cache_dir
    return inst


def cache_files(cache_dir):
    """nginx's cache files (32 hex digits; temporary files have shorter names)."""
    return [os.path.join(d, f) for d, _, names in os.walk(cache_dir) for f in names if len(f) == 32]


def varnish(workdir, size, tag):
    vcl = write(os.path.join(workdir, "zipf.vcl"), f"""
vcl 4.1;
backend default {{ .host = "127.0.0.1"; .port = "{BACKEND_PORT}"; }}
sub vcl_deliver {{
    if (obj.hits > 0) {{ set resp.http.X-Cache = "HIT"; }} else {{ set resp.http.X-Cache = "MISS"; }}
}}
""")
    name_dir = os.path.join(workdir, f"varnish-{tag}")
    # No jail: the benchmark's files are in a private temporary directory.
    proc = start(["taskset", "-c", "0", "varnishd", "-F", "-j", "none", "-n", name_dir,
                  "-a", f"127.0.0.1:{PORTS['varnish']}", "-f", vcl, "-s", f"malloc,{size}",
                  "-p", "thread_pools=1", "-p", "thread_pool_min=10"], workdir, f"varnish-{tag}")

    def stats():
        out = subprocess.run(["varnishstat", "-n", name_dir, "-1", "-f", "MAIN.n_object", "-f", "SMA.s0.g_bytes",
                              "-f", "MAIN.n_lru_nuked"], capture_output=True, text=True, check=True).stdout
        return {line.split()[0]: int(line.split()[1]) for line in out.splitlines() if line.strip()}
    inst = Instance("varnish", proc, PORTS["varnish"], lambda: stats()["MAIN.n_object"], info=f"-s malloc,{size}")
    inst.stats = stats
    return inst


# --- the client --------------------------------------------------------------------------------

class Client:
    """One keep-alive HTTP/1.1 connection, one request at a time."""

    def __init__(self, port):
        self.port, self.sock, self.buf = port, None, b""

    def close(self):
        if self.sock:
            self.sock.close()
        self.sock, self.buf = None, b""

    def get(self, path):
        req = b"GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path.encode(), HOST.encode())
        for attempt in (0, 1):
            if self.sock is None:
                self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                self.sock.sendall(req)
                return self._response()
            except (ConnectionError, EOFError):
                # The server closed the idle connection: once more on a new one.
                self.close()
                if attempt:
                    raise

    def _recv(self):
        data = self.sock.recv(262144)
        if not data:
            raise EOFError
        self.buf += data

    def _line(self):
        while (end := self.buf.find(b"\r\n")) < 0:
            self._recv()
        line, self.buf = self.buf[:end], self.buf[end + 2:]
        return line

    def _response(self):
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            self._recv()
        lines = self.buf[:end].decode("latin-1").split("\r\n")
        self.buf = self.buf[end + 4:]
        status = int(lines[0].split()[1])
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        if "chunked" in fields.get("transfer-encoding", "").lower():
            body = b""
            while (size := int(self._line().split(b";")[0], 16)) > 0:
                while len(self.buf) < size + 2:
                    self._recv()
                body, self.buf = body + self.buf[:size], self.buf[size + 2:]
            while self._line():
                pass
        else:
            n = int(fields.get("content-length", "0"))
            while len(self.buf) < n:
                self._recv()
            body, self.buf = self.buf[:n], self.buf[n:]
        if fields.get("connection", "").lower() == "close":
            self.close()
        return status, fields, body


def is_hit(proxy, fields):
    if proxy == "rampart":
        return fields.get("cache-status", "").startswith("Rampart; hit")
    return fields.get("x-cache") == "HIT"


# --- the sequence ------------------------------------------------------------------------------

def zipf_keys(n, alpha, count, seed):
    """`count` ranks in 0..n drawn with probability proportional to 1/(rank+1)^alpha."""
    cdf = list(itertools.accumulate(1.0 / (r + 1) ** alpha for r in range(n)))
    rng = random.Random(seed)
    total = cdf[-1]
    return [min(bisect.bisect_left(cdf, rng.random() * total), n - 1) for _ in range(count)]


def sequence(keys, scan_every, scan_len, warmup):
    """[(path, counted)]: the Zipf keys as /obj/<k>, the first `warmup` not counted, and before
    every `scan_every`-th one (from the first) `scan_len` requests for /scan/<j>, j new each time."""
    out, scanned = [], 0
    for i, k in enumerate(keys):
        if scan_every and i % scan_every == 0:
            out += [(f"/scan/{j}", False) for j in range(scanned, scanned + scan_len)]
            scanned += scan_len
        out.append((f"/obj/{k}", i >= warmup))
    return out


def lru_sim(seq, capacity):
    """Hits of an exact LRU of `capacity` objects over the counted requests of `seq`."""
    lru, hits = collections.OrderedDict(), 0
    for path, counted in seq:
        if path in lru:
            lru.move_to_end(path)
            hits += counted
        else:
            lru[path] = True
            if len(lru) > capacity:
                lru.popitem(last=False)
    return hits


def drive(inst, seq, size, workdir, sample_every):
    client = Client(inst.port)
    hits = counted = scan_hits = errors = 0
    held, first_error, since = [], None, None
    started = time.time()
    for n, (path, count) in enumerate(seq):
        if count and since is None:
            since = backend_log_size(workdir)
        status, fields, body = client.get(path)
        ok = status == 200 and len(body) == size
        if ok and path.startswith("/obj/"):
            ok = body.startswith(b"obj %s\n" % path[5:].encode())
        if not ok:
            errors += 1
            first_error = first_error or f"{path}: status {status}, {len(body)} bytes"
        hit = is_hit(inst.name, fields)
        if count:
            counted += 1
            hits += hit
        elif path.startswith("/scan/"):
            scan_hits += hit
        if n % sample_every == sample_every - 1:
            held.append(inst.held())
    elapsed = time.time() - started
    client.close()
    time.sleep(0.2)
    held.append(inst.held())
    objs, scans = backend_requests(workdir, since)
    return {"hits": hits, "counted": counted, "scan_hits": scan_hits, "errors": errors,
            "first_error": first_error, "backend_obj": objs, "backend_scan": scans,
            "held_end": held[-1], "held_max": max(held), "rps": len(seq) / elapsed}


# --- probes: each store's accounting per object ------------------------------------------------

def fetch(port, path):
    c = Client(port)
    try:
        status, _, body = c.get(path)
    finally:
        c.close()
    if status != 200:
        sys.exit(f"GET {path} on {port}: {status}")
    return body


def wait(inst, workdir, timeout=30):
    try:
        wait_port(inst.port, timeout)
        if inst.name == "rampart":
            wait_port(ADMIN_PORT, timeout)
    except RuntimeError:
        text = ""
        for f in sorted(os.listdir(workdir)):
            if f.startswith(inst.name) and f.endswith((".log", ".err")):
                text += f"--- {f}\n" + open(os.path.join(workdir, f)).read()[-3000:]
        inst.stop()
        sys.exit(f"{inst.name} did not start:\n{text}")


def probe_rampart(workdir, binary):
    inst = rampart(workdir, binary, "8MiB", "probe")
    wait(inst, workdir)
    try:
        for k in range(PROBES):
            fetch(inst.port, f"/scan/probe-{k}")
        s = inst.store()
    finally:
        inst.stop()
    if s["objects"] != PROBES:
        sys.exit(f"rampart probe: {s['objects']} objects stored for {PROBES} responses")
    return s["bytes"] / s["objects"]


def probe_varnish(workdir):
    inst = varnish(workdir, "64m", "probe")
    wait(inst, workdir)
    try:
        for k in range(PROBES):
            fetch(inst.port, f"/scan/probe-{k}")
        time.sleep(1.5)
        s = inst.stats()
    finally:
        inst.stop()
    if s["MAIN.n_object"] != PROBES:
        sys.exit(f"varnish probe: {s['MAIN.n_object']} objects stored for {PROBES} responses")
    return s["SMA.s0.g_bytes"] / PROBES


def probe_nginx(workdir, capacity):
    """(keys zone size holding `capacity` keys, bytes nginx counts per cache file)."""
    pages = -(-capacity // NODES_PER_PAGE) + 8
    for attempt in range(4):
        zone = pages * 4096
        inst = nginx(workdir, "nginx", f"probe{attempt}", zone, "1g")
        wait(inst, workdir)
        try:
            for k in range(capacity + capacity // 4 + 4 * NODES_PER_PAGE):
                fetch(inst.port, f"/scan/probe-{k}")
            files = cache_files(inst.cache_dir)
            bsize = os.statvfs(inst.cache_dir).f_bsize
            per_file = max(-(-max(st.st_size, st.st_blocks * 512) // bsize) * bsize
                           for st in map(os.stat, files))
        finally:
            inst.stop()
        held = len(files)
        if abs(held - capacity) < NODES_PER_PAGE:
            return zone, held, per_file
        pages += round((capacity - held) / NODES_PER_PAGE)
    sys.exit(f"nginx probe: a keys zone of {zone} bytes holds {held} keys, not about {capacity}")


# --- the report --------------------------------------------------------------------------------

def report(rows, args, configs):
    lines = [f"{args.objects} objects of {args.size} bytes, stores of {args.capacity} objects, "
             f"{args.requests} Zipf requests (the first {args.warmup:.0%} not counted), seed {args.seed}; "
             f"scans: {args.scan_len_} one-time keys before every {args.scan_every_}th Zipf request", "",
             "| proxy | store | per object |", "|---|---|---|"]
    for name, (info, per) in configs.items():
        lines.append(f"| {name} | {info} | {per} |")
    lines += ["", "| proxy | alpha | scans | hit ratio | misses | backend /obj/ | held end | held most | requests/s |",
              "|---|---|---|---|---|---|---|---|---|"]
    for (alpha, scans), by in rows.items():
        for name, r in by.items():
            ratio = r["hits"] / r["counted"]
            if name == "lru-sim":
                lines.append(f"| lru-sim | {alpha} | {scans} | {ratio:.3f} | {r['counted'] - r['hits']} | | "
                             f"{args.capacity} | {args.capacity} | |")
                continue
            lines.append(f"| {name} | {alpha} | {scans} | {ratio:.3f} | {r['counted'] - r['hits']} | "
                         f"{r['backend_obj']} | {r['held_end']} | {r['held_max']} | {r['rps']:.0f} |")
    lines.append("")
    for (alpha, scans), by in rows.items():
        if "rampart" not in by:
            continue
        mine = by["rampart"]["hits"] / by["rampart"]["counted"]
        ratios = [f"{mine / (r['hits'] / r['counted']):.2f}x {name}"
                  + (f" (which held up to {r['held_max']} objects, not {args.capacity})"
                     if r.get("held_max", 0) > 1.1 * args.capacity else "")
                  for name, r in by.items() if name != "rampart" and r["hits"]]
        lines.append(f"alpha {alpha}, scans {scans}: Rampart's hit ratio is " + ", ".join(ratios) + ".")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rampart", required=True)
    default = ",".join(p for p in PROXIES if p != "varnish" or shutil.which("varnishd"))
    ap.add_argument("--proxies", default=default)
    ap.add_argument("--objects", type=int, default=20000, help="N, the Zipf key set")
    ap.add_argument("--size", type=int, default=1024, help="S, bytes per object")
    ap.add_argument("--capacity", type=int, default=2000, help="C, objects each store holds")
    ap.add_argument("--requests", type=int, default=200000, help="R, Zipf requests per sequence")
    ap.add_argument("--alphas", default="0.8,1.0")
    ap.add_argument("--scans", default="no,yes", help="no, yes or both (no,yes)")
    ap.add_argument("--scan-every", type=int, default=0, help="Zipf requests between scans (default: C)")
    ap.add_argument("--scan-len", type=int, default=0, help="one-time keys per scan (default: C)")
    ap.add_argument("--warmup", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out"))
    args = ap.parse_args()
    proxies = args.proxies.split(",")
    for p in proxies:
        if p not in PROXIES:
            sys.exit(f"unknown proxy {p}; known: {', '.join(PROXIES)}")
    args.scan_every_ = args.scan_every or args.capacity
    args.scan_len_ = args.scan_len or args.capacity
    os.makedirs(args.out, exist_ok=True)
    try:
        os.sched_setaffinity(0, {1})
    except OSError:
        pass
    workdir = tempfile.mkdtemp(prefix="rampart-cache-zipf-")
    procs = {}
    try:
        print(f"writing {args.objects} files of {args.size} bytes", flush=True)
        root = make_files(workdir, args.objects, args.size)
        procs["backend"] = backend(workdir, root)
        wait_port(BACKEND_PORT)
        # Each store sized to hold C objects by its own count (see the docstring).
        sizes, configs = {}, {}
        if "rampart" in proxies:
            w = probe_rampart(workdir, args.rampart)
            sizes["rampart"] = round(args.capacity * w)
            configs["rampart"] = (f"size = {sizes['rampart']}", f"{w:.0f} bytes counted")
        if "nginx" in proxies or "nginx-max-size" in proxies:
            zone, held, per_file = probe_nginx(workdir, args.capacity)
            sizes["nginx"] = (zone, args.capacity * per_file)
            sizes["nginx-max-size"] = ("16m", args.capacity * per_file)
            configs["nginx"] = (f"keys_zone={zone} (holds {held} keys), no cache manager",
                                f"1 key; file {per_file} bytes")
            configs["nginx-max-size"] = (f"max_size={args.capacity * per_file}, cache manager",
                                         f"file {per_file} bytes")
        if "varnish" in proxies:
            w = probe_varnish(workdir)
            sizes["varnish"] = round(args.capacity * w)
            configs["varnish"] = (f"-s malloc,{sizes['varnish']}", f"{w:.0f} bytes of storage")
        configs = {p: configs[p] for p in proxies}
        for p, (info, per) in configs.items():
            print(f"{p}: {info} ({per} per object)", flush=True)
        rows = {}
        for alpha in [float(a) for a in args.alphas.split(",")]:
            keys = zipf_keys(args.objects, alpha, args.requests, args.seed)
            for scans in args.scans.split(","):
                seq = sequence(keys, args.scan_every_ if scans == "yes" else 0, args.scan_len_,
                               int(args.requests * args.warmup))
                by = rows.setdefault((alpha, scans), {})
                by["lru-sim"] = {"hits": lru_sim(seq, args.capacity),
                                 "counted": sum(1 for _, c in seq if c)}
                for p in proxies:
                    tag = f"{alpha}-{scans}"
                    if p == "rampart":
                        inst = rampart(workdir, args.rampart, sizes[p], tag)
                    elif p == "varnish":
                        inst = varnish(workdir, sizes[p], tag)
                    else:
                        inst = nginx(workdir, p, tag, *sizes[p])
                    wait(inst, workdir)
                    try:
                        r = drive(inst, seq, args.size, workdir, max(1, len(seq) // 50))
                    finally:
                        inst.stop()
                    by[p] = r
                    print(f"alpha {alpha} scans {scans:3s} {p:15s} hit ratio {r['hits'] / r['counted']:.3f}  "
                          f"misses {r['counted'] - r['hits']}  backend /obj/ {r['backend_obj']} "
                          f"/scan/ {r['backend_scan']}  held {r['held_end']} (most {r['held_max']})  "
                          f"{r['rps']:.0f} req/s  errors {r['errors']}  scan hits {r['scan_hits']}", flush=True)
                    if r["errors"]:
                        sys.exit(f"{p}: {r['errors']} bad responses, the first {r['first_error']}")
                print(f"alpha {alpha} scans {scans:3s} lru-sim         hit ratio "
                      f"{by['lru-sim']['hits'] / by['lru-sim']['counted']:.3f}", flush=True)
        text = report(rows, args, configs)
        write(os.path.join(args.out, "cache_zipf.md"), text)
        print(text)
    finally:
        stop_all(procs)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
