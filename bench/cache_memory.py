#!/usr/bin/env python3
"""Memory per stored response in Rampart's HTTP cache (issue 39): Rampart with a route `cache`
(one worker on CPU 0) in front of nginx (CPU 1) serving a 1 KiB file with
`Cache-Control: max-age=3600`; wrk (CPU 1) sends requests whose targets are all new (wrk's Lua),
so every response is a miss that is stored. Reported: the process's RSS growth over the objects
the store then holds (`GET /api/caches`), beside the store's own accounting (bytes it counts per
object: body, fields and a fixed 256-octet allowance) and the body's size.

    python3 bench/cache_memory.py --rampart target/release/rampart [--seconds 5] [--size 512MiB]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request

from cache import BACKEND_PORT, PORTS, UNIQUE, backend, files, rampart
from common import stop_all, wait_port, write

PORT, ADMIN = PORTS["rampart"], 18097


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def caches():
    with urllib.request.urlopen(f"http://127.0.0.1:{ADMIN}/api/caches", timeout=10) as r:
        return json.load(r)["caches"][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rampart", required=True)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--size", default="512MiB")
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="rampart-cache-memory-")
    root = files(workdir)
    script = write(os.path.join(workdir, "unique.lua"), UNIQUE)
    procs = {"backend": backend(workdir, root)}
    try:
        wait_port(BACKEND_PORT)
        procs["rampart"] = rampart(workdir, args.rampart, size=args.size, admin=ADMIN)
        wait_port(PORT)
        pid = procs["rampart"].pid
        # One request first, so what a first request allocates once is not counted.
        urllib.request.urlopen(f"http://127.0.0.1:{PORT}/1k.bin?warm", timeout=10).read()
        before, stored_before = rss_kib(pid), caches()
        subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c16", f"-d{args.seconds}s", "-s", script,
                        f"http://127.0.0.1:{PORT}/1k.bin?"], capture_output=True, check=True)
        after, stored = rss_kib(pid), caches()
        objects = stored["objects"] - stored_before["objects"]
        if objects <= 0:
            sys.exit(f"nothing was stored: {stored}")
        grown = (after - before) * 1024
        print(f"objects stored: {objects} (evictions {stored['evictions']}), store size {args.size}")
        print(f"RSS: {before} KiB -> {after} KiB, {grown / objects:.0f} bytes per stored object")
        print(f"the store's own count: {stored['bytes'] / max(stored['objects'], 1):.0f} bytes per object "
              f"(body 1024 bytes)")
    finally:
        stop_all(procs)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
