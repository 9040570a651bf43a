#!/usr/bin/env bash
# Side-by-side benchmark: Rampart, HAProxy and nginx, one worker each pinned to CPU 0, the same
# backend (nginx) and load generator (wrk) on CPU 1. Installs what is missing from Debian, builds
# Rampart in release mode and bench/resume-client (Go) into bench/out, then runs bench/bench.py
# with the arguments given here.
#   bench/run.sh                      # every scenario (L4, HTTP, HTTPS), 3 interleaved rounds of 10 s
#   bench/run.sh --scenarios http-small-c64,http-small-c256
#   bench/run.sh --rounds 5 --duration 20
#   bench/run.sh --baseline-commit f2eef12   # adds rampart-before: Rampart built at that commit
#   bench/run.sh --proxies rampart,nginx     # a subset of rampart, rampart-before, haproxy, nginx
#   bench/run.sh --idle-connections 5000     # idle keep-alive memory (plain HTTP and/or HTTPS); 0 skips
# HTTPS (TLS at the proxy with a fresh ECDSA P-256 certificate in bench/out/tls, plain HTTP to the
# backend; Rampart `http ... --tls-cert --tls-key`, nginx `listen ... ssl`, HAProxy `bind ... ssl crt`):
#   bench/run.sh --scenarios https-keepalive,https-close,https-resume --idle-connections 5000
#     https-keepalive  wrk over 64 keep-alive HTTPS connections: the record layer's cost
#     https-close      bench/out/resume-client -resume=false: a full handshake per request
#                      (wrk with `Connection: close` would resume: it reuses each slot's session)
#     https-resume     bench/out/resume-client: a resumed TLS 1.3 handshake per request (fails when
#                      under 90% of handshakes resume); --resume-client BIN uses another build
#   The HTTPS table adds Rampart's CPU per request over the lower of HAProxy's and nginx's.
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
# The resumed-handshake load generator, rebuilt only when its sources are newer than the binary.
mkdir -p bench/out
if [ ! -x bench/out/resume-client ] || [ -n "$(find bench/resume-client -type f -newer bench/out/resume-client)" ]; then
  go=$(command -v go || echo /usr/local/go/bin/go)
  if [ -x "$go" ] || command -v "$go" >/dev/null; then
    (cd bench/resume-client && "$go" build -o ../out/resume-client .)
  else
    echo "run.sh: no Go toolchain: bench/out/resume-client not built (https-resume needs it)" >&2
  fi
fi
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
exec python3 bench/bench.py --rampart "$rampart" "${args[@]}"
