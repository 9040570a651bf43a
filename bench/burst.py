"""Idle memory after a burst (issue 13): many clients that each send one request at the same
moment and then stay idle, as production sees it, beside bench.idle_memory's sequential pattern
(one connection after the other, each with its request).

All `count` connections are opened first (none sends anything yet), then every one sends its
request in one tight loop, then every answer is read; the proxy's RSS is taken 3 s after the
last answer and compared with its RSS before the connections were opened."""
import resource
import selectors
import socket
import time

from common import HTTP_PORTS, rss_kib

REQUEST = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"
ANSWER = b"hello from the backend"
SETTLE_S = 3.0


def burst_once(pid, port, count):
    """One burst against the proxy at `port` (process `pid`): (RSS before KiB, RSS after KiB,
    seconds from the first request sent to the last answer read)."""
    before = rss_kib(pid)
    socks = []
    try:
        for _ in range(count):
            socks.append(socket.create_connection(("127.0.0.1", port)))
        start = time.time()
        for s in socks:
            s.sendall(REQUEST)
        sel = selectors.DefaultSelector()
        got = {}
        for s in socks:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
            got[s] = b""
        waiting = len(socks)
        deadline = time.time() + 60
        while waiting:
            if time.time() > deadline:
                raise RuntimeError(f"{waiting} of {count} burst answers missing after 60 s")
            for key, _ in sel.select(timeout=1.0):
                s = key.fileobj
                chunk = s.recv(4096)
                if not chunk:
                    raise RuntimeError("the proxy closed a burst connection")
                got[s] += chunk
                if ANSWER in got[s]:
                    sel.unregister(s)
                    waiting -= 1
        answered = time.time() - start
        sel.close()
        time.sleep(SETTLE_S)
        return before, rss_kib(pid), answered
    finally:
        for s in socks:
            s.close()


def burst_memory(procs, proxies, count):
    """The burst pattern on each HTTP proxy, two passes each (as bench.idle_memory): the first
    also pays for what grows once (connection tables, allocator arenas), the second shows the
    steady cost. Returns the Markdown table."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    lines = ["", f"Idle memory after a burst: {count} client connections opened, then each sends one "
             f"request in one tight loop, then every answer is read; RSS {SETTLE_S:.0f} s after the last "
             "answer, growth divided by the connections; two passes per proxy.", "",
             "| proxy | pass | RSS before KiB | RSS 3 s after the burst KiB | bytes per idle connection | burst answered in s |",
             "|---|---:|---:|---:|---:|---:|"]
    for p in proxies:
        pid = procs[("http", p)].pid
        for rnd in (1, 2):
            time.sleep(0.5)
            before, after, answered = burst_once(pid, HTTP_PORTS[p], count)
            per = (after - before) * 1024 / count
            lines.append(f"| {p} | {rnd} | {before} | {after} | {per:.0f} | {answered:.2f} |")
            print(f"burst memory {p} pass {rnd}: {before} KiB -> {after} KiB, {per:.0f} bytes per connection "
                  f"(answered in {answered:.2f} s)", flush=True)
            # The connections closed: let every proxy see it before the next measurement.
            time.sleep(2.5)
    return "\n".join(lines) + "\n"
