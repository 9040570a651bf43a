#!/usr/bin/env bash
# Instructions per request of one Rampart binary, which a busy machine's noise does not move:
# Rampart runs under cachegrind (no cache simulation, one worker) while h2load sends N requests;
# the difference between a run of 12,000 and one of 2,000 requests, divided by 10,000, cancels
# start-up and shutdown. Needs valgrind, h2load, nginx (the HTTP/1.1 backend) and
# bench/out/grpc-backend (built by bench/run.sh).
#   bench/instructions.sh grpc target/release/rampart   # gRPC unary over h2c (h2load -c 16 -m 10)
#   bench/instructions.sh h1 bench/out/rampart-<commit>  # HTTP/1.1 keep-alive (h2load --h1 -c 16)
#   bench/instructions.sh h2 target/release/rampart      # HTTP/2 in clear to HTTP/1.1 (h2load -c 16 -m 10)
#   bench/instructions.sh cache-miss target/release/rampart  # HTTP/1.1 (h2load --h1 -c 1), a route
#                                     # with `cache`, every request a new target: a miss, stored
#   bench/instructions.sh cache-none target/release/rampart  # the same targets, a route without one
# RAMPART_EXTRA adds arguments to the one-line modes' command line, e.g. tracing at 1% to a
# collector that is not there (each export fails, counted; the per-request work is what counts):
#   RAMPART_EXTRA="--otlp-endpoint http://127.0.0.1:9 --trace-sampling 0.01" bench/instructions.sh grpc BIN
set -euo pipefail
mode=$1 bin=$(realpath "$2")
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cat > "$work/nginx.conf" <<CONF
worker_processes 1; daemon off; pid $work/nginx.pid; error_log $work/error.log;
events { worker_connections 1024; }
http { access_log off; server { listen 127.0.0.1:19080; location / { return 200 "hello, world\n"; }
  location /object/ { add_header Cache-Control "max-age=3600" always; return 200 "hello, world\n"; } } }
CONF
nginx -c "$work/nginx.conf" -p "$work" &
bench/out/grpc-backend -write-request "$work/request.bin"
bench/out/grpc-backend -listen 127.0.0.1:19081 >"$work/backend.log" 2>&1 &
case $mode in
  grpc) to=(--to 127.0.0.1:19081 --upstream-protocol h2c)
        load=(h2load -c 16 -m 10 -d "$work/request.bin" -H 'content-type: application/grpc' -H 'te: trailers' http://127.0.0.1:19052/bench.Bench/Unary) ;;
  h2)   to=(--to 127.0.0.1:19080)
        load=(h2load -c 16 -m 10 http://127.0.0.1:19052/) ;;
  h1)   to=(--to 127.0.0.1:19080)
        load=(h2load --h1 -c 16 http://127.0.0.1:19052/) ;;
  cache-miss|cache-none)
        # One config file (a route with or without `cache`), and 12,000 distinct targets, each
        # asked once: h2load gives every client the list from its start, so one client.
        to=() cache=""
        [ "$mode" = cache-miss ] && cache='cache = { store = "main" }'
        printf '[caches.main]\nsize = "256MiB"\n\n[listeners.web]\nbind = "127.0.0.1:19052"\nprotocol = "http"\n\n[[listeners.web.routes]]\nupstream = "app"\n%s\n\n[upstreams.app]\ntargets = ["127.0.0.1:19080"]\n' \
          "$cache" > "$work/cache.toml"
        for i in $(seq 1 12000); do echo "http://127.0.0.1:19052/object/$i"; done > "$work/targets.txt"
        load=(h2load --h1 -c 1 -i "$work/targets.txt") ;;
  *) echo "mode: grpc, h1, h2, cache-miss or cache-none" >&2; exit 2 ;;
esac
# Total instructions of one run of N requests.
total() {
  # shellcheck disable=SC2086
  local args=(http --listen 127.0.0.1:19052 "${to[@]}" ${RAMPART_EXTRA:-} --workers 1)
  [ -f "$work/cache.toml" ] && args=(run -c "$work/cache.toml" --workers 1)
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$work/cg.$1" \
    "$bin" "${args[@]}" >"$work/rampart.$1.log" 2>&1 &
  local pid=$!
  until grep -q "listening\|ready" "$work/rampart.$1.log" 2>/dev/null; do sleep 0.2; done
  "${load[@]}" -n "$1" >"$work/load.$1.log"
  grep -q "$1 succeeded" "$work/load.$1.log" || { echo "not every request succeeded" >&2; exit 1; }
  kill -TERM "$pid"; wait "$pid" || true
  awk '/^summary:/ {print $2}' "$work/cg.$1"
}
small=$(total 2000)
large=$(total 12000)
echo "$mode $(basename "$bin"): $(( (large - small) / 10000 )) instructions per request"
