#!/usr/bin/env bash
# Side-by-side benchmark: Rampart, HAProxy and nginx, one worker each pinned to CPU 0, the same
# backend (nginx) and load generator (wrk) on CPU 1. Installs what is missing from Debian, builds
# Rampart in release mode and bench/resume-client, bench/grpc-backend, bench/fault-backend and
# grpc-go's interop server (bench/grpc-interop, all Go) into bench/out, then runs bench/bench.py with
# the arguments given here.
#   bench/run.sh                      # every scenario (L4, HTTP, HTTPS, HTTP/2, SNI), 3 interleaved rounds of 10 s
#   bench/run.sh --scenarios http-small-c64,http-small-c256
#   bench/run.sh --rounds 5 --duration 20
#   bench/run.sh --baseline-commit f2eef12   # adds rampart-before: Rampart built at that commit
#   bench/run.sh --proxies rampart,nginx     # a subset of rampart, rampart-before, haproxy, nginx
#   bench/run.sh --idle-connections 5000     # idle keep-alive memory (plain HTTP and/or HTTPS); 0 skips
#   bench/run.sh --scenarios http-small-c64 --idle-pattern burst   # plain HTTP idle memory after a burst:
#                                            # all connections opened, then every request sent at once
#                                            # (burst.py); sequential (one after the other) or both (default)
# Connection churn through the L4 listeners (issue 13), one request per client connection:
#   bench/run.sh --scenarios l4-close-c64,l4-reset-c64,http-close-c64 --idle-connections 0
#     l4-close-c64     wrk with `Connection: close`: the backend closes each connection after its answer
#     l4-reset-c64     bench/out/resume-client -reset over plain HTTP: a keep-alive request, and the
#                      client resets the connection once it has the answer (the backend keeps its side open)
# HTTPS (TLS at the proxy with a fresh ECDSA P-256 certificate in bench/out/tls, plain HTTP to the
# backend; Rampart `http ... --tls-cert --tls-key`, nginx `listen ... ssl`, HAProxy `bind ... ssl crt`):
#   bench/run.sh --scenarios https-keepalive,https-close,https-resume --idle-connections 5000
#     https-keepalive  wrk over 64 keep-alive HTTPS connections: the record layer's cost
#     https-close      bench/out/resume-client -resume=false: a full handshake per request
#                      (wrk with `Connection: close` would resume: it reuses each slot's session)
#     https-resume     bench/out/resume-client: a resumed TLS 1.3 handshake per request (fails when
#                      under 90% of handshakes resume); --resume-client BIN uses another build
#   The HTTPS table adds Rampart's CPU per request over the lower of HAProxy's and nginx's.
# HTTP/2 (bench/h2.py; h2load from nghttp2-client on CPU 1; Rampart `http`, nginx `listen ... http2`,
# HAProxy `bind ... proto h2` or `alpn h2,http/1.1`; HTTP/1.1 to the same backend):
#   bench/run.sh --scenarios h2-clear-c1m100,h2-clear-c64m10,h2-tls-c1m100,h2-tls-c64m10,grpc-unary-h2c
#     h2-clear-*       in clear with prior knowledge; c1m100: 1 connection x 100 streams, c64m10: 64 x 10
#     h2-tls-*         over TLS, ALPN h2 (same certificate as HTTPS)
#     grpc-unary-h2c   h2load posting one fixed gRPC unary call over h2c, 64 x 10, to bench/out/grpc-backend
#                      (h2c, on CPU 1) through Rampart `--upstream-protocol h2c`, nginx `grpc_pass`,
#                      HAProxy `server ... proto h2`; --grpc-backend BIN uses another build
#     grpc-unary-h2c-interop  the same load and proxies in front of grpc-go's interop server instead
#                      (google.golang.org/grpc/interop/server, the gRPC interop suite's server, at the
#                      version pinned in bench/grpc-interop/go.mod, built into bench/out/grpc-interop;
#                      in clear, on CPU 1): grpc.testing.TestService/UnaryCall with a SimpleRequest
#                      asking for a 22-byte payload (`grpc-backend -call interop -write-request`);
#                      after each round one call through the proxy must come back with exactly the
#                      interop server's SimpleResponse and grpc-status 0 (`grpc-backend -call interop
#                      -check`); --grpc-interop BIN uses another build
#     grpc-large-h2c-interop  the same call through the same proxies asking for 64 KiB (`-call
#                      interop-large`), 16 x 10: DATA of 16 KiB frames both sides of each proxy
#   bench/run.sh --scenarios grpc-unary-h2c,grpc-unary-h2c-interop --rounds 5 --duration 6 --idle-connections 0
#   The HTTP/2 table's "busy %" is the proxy's CPU seconds over the measured window's. To check the
#   CPU reading itself (issue 37): python3 bench/cpu_check.py --rampart target/release/rampart
#   [--mode grpc-interop] reads one proxy under the same load three ways (/proc/PID/stat, schedstat,
#   perf task-clock) with its system calls per call (after one run.sh has built bench/out).
#   The table adds Rampart's CPU per request and p99 over the lower of HAProxy's and nginx's; a round
#   with any failed request, or not over HTTP/2, or (gRPC) without grpc-status 0 in the trailers fails.
# TLS passthrough by SNI (issue 14, bench/sni.py; the proxies hold no certificate):
#   bench/run.sh --scenarios sni-passthrough --idle-connections 0
#     sni-passthrough  bench/out/resume-client -resume=false -sni bench.example: one request per connection,
#                      its full TLS handshake through the proxy (routing on the ClientHello's SNI: Rampart
#                      `[[listeners.NAME.routes]] match = { sni = ... }`, HAProxy `req.ssl_sni`, nginx stream
#                      `ssl_preread`) to the backend nginx's TLS port, 64 at a time. Same table as HTTPS, per
#                      connection; a round with a failed request or a handshake not verified against the
#                      backend's own certificate, or where another name was not refused, fails.
# Gateway filters (issue 15, bench/filters.py; Rampart against itself, needs redis-server for `global`):
#   bench/run.sh filters                         # bare route vs request_id, jwt, rate_limit, all three, global
#   bench/run.sh filters --variants bare,all3 --rounds 7
# Static files (issue 25, bench/static.py; Rampart's `static` action beside nginx `root` with
# `sendfile on`, the same 1 KiB and 1 MiB files, each one worker pinned to CPU 0, wrk on CPU 1;
# requests/s, p50/p99, CPU µs per request user and kernel apart, Rampart's CPU over nginx's):
#   bench/run.sh static                                  # static-1k-c64 and static-1m-c16, 5 rounds of 10 s
#   bench/run.sh static --scenarios static-1k-c64 --rounds 7 --duration 15
# HTTP cache hits (issue 39, bench/cache.py; Rampart's route `cache` beside nginx `proxy_cache` on
# tmpfs and Varnish, malloc storage, when Debian's varnish is installed):
#   bench/run.sh cache                                   # cache-hit-1k-c64 and cache-hit-100k-c16
# Cache hit ratio on a Zipf key set larger than the stores (issue 39, bench/cache_zipf.py; Rampart's
# S3-FIFO memory store beside nginx `proxy_cache` and Varnish malloc storage, both LRU, each sized to
# hold the same number of objects; the same Zipf request sequence, with and without scans):
#   bench/run.sh cache-zipf                              # 20,000 x 1 KiB objects, stores of 2,000, 200,000 requests
#   bench/run.sh cache-zipf --alphas 1.0 --scans yes --proxies rampart,nginx
# The bad day (issue 29, bench/badday.py; three fault backends from bench/out/fault-backend; Rampart
# beside HAProxy `retry-on`/`observe layer7`/`maxconn` + queue and nginx `proxy_next_upstream`/
# `max_fails`/`max_conns`): one of three backends answering 503, all answering 503, one turning
# slow (+200 ms), a burst of twice what the backends take; success rate, attempts per request,
# p99, when the slow backend stopped getting requests:
#   bench/run.sh badday                                  # 3 rounds of 10 s
#   bench/run.sh badday --scenarios one-slow --rounds 1
# UDP load balancing (bench/udp.py; DNS: dnsperf to one unbound on CPU 1 through Rampart's `protocol =
# "udp"` listener, nginx `stream` `listen ... udp` with `proxy_responses 1`, and dnsdist, each one
# worker on CPU 0; scripts/dns-tools installs unbound, kdig, dnsperf, dnsdist): queries/s and CPU
# per query at saturation, then lost queries at a fixed rate (20,000/s: target 0):
#   bench/run.sh udp                                     # 3 rounds of 10 s
#   bench/run.sh udp --proxies nginx,dnsdist,direct --rounds 1 --duration 3 --rate 10000
# HTTP/3 (bench/h3.py; Rampart `http3 = true` on a TLS listener beside Caddy's reverse_proxy with
# HTTP/3, GOMAXPROCS=1, both to the nginx backend; h3load from bench/h3-stacks, built here, and
# h2load over TLS to the same listeners): requests/s, p50/p99, CPU per request user and kernel apart:
#   bench/run.sh h3                                      # h3-c16m10, h3-c64m1, h3-c16r1, h2-c16m10
#   bench/run.sh h3 --scenarios h3-c16r1 --proxies caddy --rounds 1 --duration 3
# Tracing (issue 41, bench/tracing.py; Rampart against itself, one worker on CPU 0: `http` with no
# tracing flag, and with `--otlp-endpoint` to Jaeger all-in-one (scripts/telemetry-servers, on CPU 1)
# at `--trace-sampling 0.01` and `1`; http-small-c64's wrk load and grpc-unary-h2c's h2load load):
# CPU per request user and kernel apart, over tracing off's (target: at most 1.02 at 1%, 1.10 at 100%),
# saturated (max) and at a fixed rate below every variant's ceiling (rate: h2load --rps, --rate-http/--rate-grpc):
#   bench/run.sh tracing                                 # http,grpc x off,1,100 x max,rate, 3 rounds of 10 s
#   bench/run.sh tracing --workloads http --variants off,100 --rounds 5 --otlp-protocol grpc
set -euo pipefail
cd "$(dirname "$0")/.."
rev=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --baseline-commit) rev=$2; shift 2 ;;
    --baseline-commit=*) rev=${1#*=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
need=()
command -v nginx >/dev/null || need+=(nginx-light)
[ -e /usr/lib/nginx/modules/ngx_stream_module.so ] || need+=(libnginx-mod-stream)
command -v haproxy >/dev/null || need+=(haproxy)
command -v wrk >/dev/null || need+=(wrk)
command -v h2load >/dev/null || need+=(nghttp2-client)
command -v redis-server >/dev/null || need+=(redis-server)
command -v perf >/dev/null || need+=(linux-perf)
command -v varnishd >/dev/null || need+=(varnish)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
python3 -c "import matplotlib" 2>/dev/null || python3 -m pip install --quiet matplotlib
# Builds the rampart binary of the workspace in the current directory and prints its path (wherever
# CARGO_TARGET_DIR or Cargo's configuration puts it).
build() {
  cargo build --release -p rampart --bin rampart --message-format=json-render-diagnostics |
    python3 -c 'import json, sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable")][-1])'
}
rampart=$(build)
# The Go tools: the resumed-handshake load generator, the h2c gRPC backend, the fault backends and
# grpc-go's interop server (a package of the module that bench/grpc-interop/go.mod pins, fetched
# from the Go module proxy on the first build), each rebuilt only when bench/NAME holds a file
# newer than bench/out/NAME.
mkdir -p bench/out
go=$(command -v go || echo /usr/local/go/bin/go)
for tool in resume-client:.:https-resume,l4-reset-c64,sni-passthrough grpc-backend:.:grpc-unary-h2c \
    fault-backend:.:badday grpc-interop:google.golang.org/grpc/interop/server:grpc-unary-h2c-interop; do
  name=${tool%%:*} rest=${tool#*:}
  pkg=${rest%%:*}
  if [ ! -x "bench/out/$name" ] || [ -n "$(find "bench/$name" -type f -newer "bench/out/$name")" ]; then
    if [ -x "$go" ] || command -v "$go" >/dev/null; then
      (cd "bench/$name" && "$go" build -o "../out/$name" "$pkg")
    else
      echo "run.sh: no Go toolchain: bench/out/$name not built (${rest#*:} needs it)" >&2
    fi
  fi
done
if [ -n "$rev" ]; then
  # The baseline: REV built in its own clone and target directory, kept as bench/out/rampart-<commit>.
  commit=$(git rev-parse --verify "$rev^{commit}")
  baseline=bench/out/rampart-${commit:0:12}
  if [ ! -x "$baseline" ]; then
    src=bench/out/baseline-src
    [ -d "$src" ] || git clone -q . "$src"
    git -C "$src" cat-file -e "$commit" 2>/dev/null || git -C "$src" fetch -q origin
    git -C "$src" checkout -q --detach "$commit"
    cp "$(cd "$src" && CARGO_TARGET_DIR="$PWD/../baseline-target" build)" "$baseline"
  fi
  args+=(--baseline "$baseline")
fi
if [ "${args[0]:-}" = filters ]; then
  exec python3 bench/filters.py --rampart "$rampart" "${args[@]:1}"
fi
if [ "${args[0]:-}" = badday ]; then
  exec python3 bench/badday.py --rampart "$rampart" "${args[@]:1}"
fi
if [ "${args[0]:-}" = cache-zipf ]; then
  command -v varnishd >/dev/null || echo "varnishd is not installed (Debian varnish): the Zipf bench runs without it" >&2
  exec python3 bench/cache_zipf.py --rampart "$rampart" "${args[@]:1}"
fi
if [ "${args[0]:-}" = cache ]; then
  command -v varnishd >/dev/null || echo "varnishd is not installed (Debian varnish): the cache bench runs without it" >&2
  exec python3 bench/cache.py --rampart "$rampart" "${args[@]:1}"
fi
if [ "${args[0]:-}" = udp ]; then
  exec python3 bench/udp.py --rampart "$rampart" "${args[@]:1}"
fi
if [ "${args[0]:-}" = tracing ]; then
  exec python3 bench/tracing.py --rampart "$rampart" "${args[@]:1}"
fi
if [ "${args[0]:-}" = h3 ]; then
  # Caddy (its service kept from starting, as scripts/servers does), and libclang for the bindgen
  # step of quiche's boring-sys in bench/h3-stacks, whose h3load is built here (see its README).
  h3need=()
  command -v caddy >/dev/null || h3need+=(caddy)
  ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 || h3need+=(libclang1-14)
  if [ ${#h3need[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    own=""; [ -e /usr/sbin/policy-rc.d ] || own=1
    if [ -n "$own" ]; then
      printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
      $SUDO chmod 755 /usr/sbin/policy-rc.d
    fi
    apt-cache show "${h3need[@]}" >/dev/null 2>&1 || $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${h3need[@]}"
    [ -z "$own" ] || $SUDO rm -f /usr/sbin/policy-rc.d
  fi
  gcc_inc=$(dirname "$(ls /usr/lib/gcc/x86_64-linux-gnu/*/include/stddef.h | head -1)")
  (cd bench/h3-stacks && BINDGEN_EXTRA_CLANG_ARGS=${BINDGEN_EXTRA_CLANG_ARGS:--I$gcc_inc} \
    cargo build --release --quiet --bin h3load)
  exec python3 bench/h3.py --rampart "$rampart" "${args[@]:1}"
fi
if [ "${args[0]:-}" = static ]; then
  exec python3 bench/static.py --rampart "$rampart" "${args[@]:1}"
fi
exec python3 bench/bench.py --rampart "$rampart" "${args[@]}"
