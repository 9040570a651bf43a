#!/usr/bin/env python3
"""An HTTP/3 test client on aioquic, for Rampart's end-to-end tests (crates/rampart/tests/common/h3.rs).
Run with the Python of the venv that scripts/quic-clients makes (target/tools/aioquic).

    aioquic_client.py URL [--method M] [--data-file F | --data-size N] [--header 'n: v']...
                      [--concurrent N] [--count N] [--insecure | --ca FILE] [--trailers]
                      [--connect HOST:PORT] [--timeout SECS]

It opens ONE QUIC connection and makes --count requests (default 1) on it, --concurrent at a
time (default 1), each on a stream of its own. Each request prints one JSON line on stdout, in
the order they finish:

    {"status":200,"headers":[["name","value"],...],"body_sha256":"...","body_len":N,"trailers":[...]}

or {"error":"..."} (a failed connection prints one per request); the exit status is 1 when any
request failed. Headers are in the order received, without pseudo-headers; interim (1xx)
responses are skipped. --data-size N sends N bytes where byte i is i mod 251 (the same body as
the Go client's). --trailers sends `te: trailers` and, after the body, the trailer section
`x-request-trailer: done`. Certificates are verified against --ca when given, against certifi's
roots otherwise, not at all with --insecure. --connect sends the datagrams to HOST:PORT instead
of the URL's address (the URL still gives the server name and :authority).
"""
import argparse
import asyncio
import hashlib
import json
import ssl
import sys
from urllib.parse import urlsplit

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset

CHUNK = 64 * 1024


class Exchange:
    """One request's response as it arrives on its stream."""

    def __init__(self, loop):
        self.done = loop.create_future()
        self.status = None
        self.headers = []
        self.trailers = []
        self.hash = hashlib.sha256()
        self.length = 0

    def fail(self, message):
        if not self.done.done():
            self.done.set_exception(RuntimeError(message))

    def result(self):
        return {"status": self.status, "headers": self.headers, "body_sha256": self.hash.hexdigest(),
                "body_len": self.length, "trailers": self.trailers}


def pairs(fields):
    return [[k.decode("latin-1"), v.decode("latin-1")] for k, v in fields if not k.startswith(b":")]


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.exchanges = {}

    def quic_event_received(self, event):
        if isinstance(event, StreamReset):
            ex = self.exchanges.pop(event.stream_id, None)
            if ex:
                ex.fail(f"stream reset by the server, error code {event.error_code:#x}")
            return
        if isinstance(event, ConnectionTerminated):
            for ex in self.exchanges.values():
                ex.fail(f"connection closed: error code {event.error_code:#x} {event.reason_phrase}")
            self.exchanges.clear()
        for h3_event in self.h3.handle_event(event):
            ex = self.exchanges.get(getattr(h3_event, "stream_id", None))
            if ex is None:
                continue
            if isinstance(h3_event, HeadersReceived):
                if ex.status is None:
                    status = dict(h3_event.headers).get(b":status")
                    if status is None:
                        ex.fail("response without :status")
                        continue
                    if status.startswith(b"1") and not h3_event.stream_ended:
                        continue  # interim response
                    ex.status = int(status)
                    ex.headers = pairs(h3_event.headers)
                else:
                    ex.trailers = pairs(h3_event.headers)
            elif isinstance(h3_event, DataReceived):
                ex.hash.update(h3_event.data)
                ex.length += len(h3_event.data)
            if h3_event.stream_ended:
                self.exchanges.pop(h3_event.stream_id, None)
                if ex.status is None:
                    ex.fail("stream ended before a response")
                elif not ex.done.done():
                    ex.done.set_result(ex.result())

    async def request(self, method, url, headers, body, trailers):
        parts = urlsplit(url)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        authority = parts.netloc
        extra = []
        for name, value in headers:
            if name == "host":
                authority = value
            else:
                extra.append((name.encode(), value.encode()))
        fields = [(b":method", method.encode()), (b":scheme", b"https"), (b":authority", authority.encode()),
                  (b":path", path.encode()), (b"user-agent", b"rampart-test-aioquic")]
        if body is not None:
            fields.append((b"content-length", str(len(body)).encode()))
        if trailers:
            fields.append((b"te", b"trailers"))
        fields += extra
        stream_id = self._quic.get_next_available_stream_id()
        ex = Exchange(asyncio.get_running_loop())
        self.exchanges[stream_id] = ex
        has_body = body is not None and len(body) > 0
        self.h3.send_headers(stream_id, fields, end_stream=not (has_body or trailers))
        if has_body:
            view = memoryview(body)
            for at in range(0, len(body), CHUNK):
                last = at + CHUNK >= len(body)
                self.h3.send_data(stream_id, bytes(view[at:at + CHUNK]), end_stream=last and not trailers)
        if trailers:
            self.h3.send_headers(stream_id, [(b"x-request-trailer", b"done")], end_stream=True)
        self.transmit()
        try:
            return await ex.done
        finally:
            self.exchanges.pop(stream_id, None)


def parse_args():
    ap = argparse.ArgumentParser(description="HTTP/3 test client (aioquic): one JSON line per request")
    ap.add_argument("url")
    ap.add_argument("--method", default="GET")
    data = ap.add_mutually_exclusive_group()
    data.add_argument("--data-file", help="send this file as the request body")
    data.add_argument("--data-size", type=int, help="send N generated bytes (byte i = i mod 251)")
    ap.add_argument("--header", action="append", default=[], help="'name: value' (repeatable)")
    ap.add_argument("--concurrent", type=int, default=1, help="requests in flight at once (streams)")
    ap.add_argument("--count", type=int, default=1, help="requests in all")
    verify = ap.add_mutually_exclusive_group()
    verify.add_argument("--insecure", action="store_true", help="do not verify the certificate")
    verify.add_argument("--ca", help="verify the certificate against this PEM file")
    ap.add_argument("--trailers", action="store_true", help="send te: trailers and a request trailer")
    ap.add_argument("--connect", metavar="HOST:PORT", help="send to this address instead of the URL's")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds each request may take")
    return ap.parse_args()


def body_of(args):
    if args.data_file is not None:
        with open(args.data_file, "rb") as f:
            return f.read()
    if args.data_size is not None:
        pattern = bytes(range(251))
        return (pattern * (args.data_size // 251 + 1))[:args.data_size]
    return None


def split_host_port(hostport, default_port):
    if hostport.startswith("["):
        host, _, rest = hostport[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    host, sep, port = hostport.rpartition(":")
    return (host, int(port)) if sep else (hostport, default_port)


async def run(args):
    parts = urlsplit(args.url)
    if parts.scheme != "https" or not parts.hostname:
        raise SystemExit(f"not an https URL: {args.url}")
    headers = []
    for h in args.header:
        name, sep, value = h.partition(":")
        if not sep:
            raise SystemExit(f"header without a colon: {h!r}")
        headers.append((name.strip().lower(), value.strip()))
    body = body_of(args)
    host, port = parts.hostname, parts.port or 443
    if args.connect:
        host, port = split_host_port(args.connect, port)
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=parts.hostname,
                               idle_timeout=max(args.timeout, 5.0))
    if args.insecure:
        config.verify_mode = ssl.CERT_NONE
    elif args.ca:
        config.load_verify_locations(cafile=args.ca)
    failed = emitted = 0
    made = []

    def emit(obj):
        nonlocal failed, emitted
        failed += "error" in obj
        emitted += 1
        sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    try:
        def create(*a, **kw):
            made.append(Client(*a, **kw))
            return made[-1]

        async with connect(host, port, configuration=config, create_protocol=create) as client:
            queue = asyncio.Queue()
            for _ in range(args.count):
                queue.put_nowait(None)

            async def worker():
                while not queue.empty():
                    queue.get_nowait()
                    try:
                        emit(await asyncio.wait_for(
                            client.request(args.method, args.url, headers, body, args.trailers), args.timeout))
                    except asyncio.TimeoutError:
                        emit({"error": f"no whole response within {args.timeout} s"})
                    except Exception as e:  # noqa: BLE001 - every failure is one JSON line
                        emit({"error": str(e) or type(e).__name__})

            await asyncio.gather(*(worker() for _ in range(max(1, min(args.concurrent, args.count)))))
    except Exception as e:  # noqa: BLE001 - the connection failed (handshake, certificate, timeout)
        why = str(e) or type(e).__name__
        closed = made and getattr(made[0]._quic, "_close_event", None)
        if closed:
            why += f" (error code {closed.error_code:#x}: {closed.reason_phrase})"
        # One error line for each request that has none yet (all of them when the handshake failed).
        for _ in range(args.count - emitted):
            emit({"error": f"connection: {why}"})
    return 1 if failed else 0


def main():
    args = parse_args()
    try:
        waves = -(-max(1, args.count) // max(1, args.concurrent))
        code = asyncio.run(asyncio.wait_for(run(args), args.timeout * (waves + 1) + 10))
    except asyncio.TimeoutError:
        print(json.dumps({"error": "the whole run took too long"}))
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
