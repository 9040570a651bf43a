#!/usr/bin/env python3
"""Memory per idle HTTP/2 connection and per open HTTP/2 stream, Rampart beside HAProxy and nginx
(issue 38). Each proxy runs as bench/h2.py starts it for h2c (one worker on CPU 0, HTTP/2 in clear
by prior knowledge) in front of a backend of this script's own on the bench's backend port, which
answers a GET at once and holds a POST open (it reads, never answers).

- Idle connections: CONNECTIONS HTTP/2 connections each make one GET, read the answer and stay
  open; the proxy's RSS growth, 2.5 s later, divided by the connections. Two passes (the first
  also pays for tables that grow once).
- Open streams: STREAMS POST streams whose bodies never end, 100 per connection (every proxy's
  default limit), each held by the proxy with its upstream HTTP/1.1 connection (the same work for
  every proxy); the RSS growth over the same connections idle, divided by the streams.

    bench/h2_memory.py --rampart target/release/rampart [--connections 2000] [--streams 1000]
"""
import argparse
import asyncio
import os
import socket
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import BACKEND_PORT, H2C_PORTS, rss_kib, stop_all, wait_port  # noqa: E402
from h2 import h2_haproxy, h2_nginx, h2_rampart  # noqa: E402

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind, flags, stream, payload=b""):
    n = len(payload)
    return bytes([n >> 16 & 255, n >> 8 & 255, n & 255, kind, flags]) + struct.pack(">I", stream) + payload


def head_block(method):
    """GET or POST / on http, authority `bench` (HPACK: static indexes and one literal)."""
    return bytes([0x82 if method == "GET" else 0x83, 0x86, 0x84, 0x41, 5]) + b"bench"


def backend():
    """Answers GET at once, holds POST open: an asyncio server on its own thread."""
    async def serve(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if head.startswith(b"GET"):
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nhello\n")
                    await writer.drain()
                else:
                    while await reader.read(65536):
                        pass
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", BACKEND_PORT, backlog=4096)
        async with server:
            await server.serve_forever()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    wait_port(BACKEND_PORT)


def connect(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(PREFACE + frame(4, 0, 0) + frame(4, 1, 0))
    return s


def read_until_end(s, stream):
    """Reads frames until stream `stream` ends (END_STREAM on DATA or HEADERS)."""
    buf = b""
    while True:
        while len(buf) >= 9:
            n = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + n:
                break
            kind, flags, sid = buf[3], buf[4], struct.unpack(">I", buf[5:9])[0] & 0x7FFFFFFF
            buf = buf[9 + n:]
            if sid == stream and kind in (0, 1) and flags & 1:
                return
        chunk = s.recv(65536)
        if not chunk:
            raise RuntimeError("the proxy closed a test connection")
        buf += chunk


def idle_connections(port, count):
    socks = []
    for _ in range(count):
        s = connect(port)
        s.sendall(frame(1, 5, 1, head_block("GET")))
        socks.append(s)
    for s in socks:
        read_until_end(s, 1)
    return socks


def measure(name, pid, port, connections, streams):
    lines = []
    for rnd in (1, 2):
        time.sleep(1)
        before = rss_kib(pid)
        socks = idle_connections(port, connections)
        time.sleep(2.5)
        idle = rss_kib(pid)
        per_conn = (idle - before) * 1024 / connections
        # Open streams on the first connections: POSTs whose bodies never end.
        per = 100
        for i in range(streams // per):
            s = socks[i]
            s.sendall(b"".join(frame(1, 4, 3 + 2 * k, head_block("POST")) for k in range(per)))
        time.sleep(2.5)
        held = rss_kib(pid)
        per_stream = (held - idle) * 1024 / streams
        lines.append(f"| {name} | {rnd} | {before} | {idle} | {per_conn:.0f} | {held} | {per_stream:.0f} |")
        print(lines[-1], flush=True)
        for s in socks:
            s.close()
        time.sleep(2.5)
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rampart", required=True)
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--streams", type=int, default=1000)
    args = parser.parse_args()
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    workdir = tempfile.mkdtemp(prefix="h2-memory-")
    backend()
    procs = {
        "rampart": h2_rampart(workdir, args.rampart, "h2c", None),
        "haproxy": h2_haproxy(workdir, "h2c", None),
        "nginx": h2_nginx(workdir, "h2c", None),
    }
    try:
        for name in procs:
            wait_port(H2C_PORTS[name])
        print("| proxy | pass | RSS before KiB | with idle connections KiB | bytes per idle connection "
              "| with open streams KiB | bytes per open stream |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, proc in procs.items():
            measure(name, proc.pid, H2C_PORTS[name], args.connections, args.streams)
    finally:
        stop_all(procs)


if __name__ == "__main__":
    main()
