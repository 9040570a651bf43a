#!/usr/bin/env bash
# Side-by-side benchmark: Rampart, HAProxy and nginx, one worker each pinned to CPU 0, the same
# backend (nginx) and load generator (wrk) on CPU 1. Installs what is missing from Debian, builds
# Rampart in release mode, then runs bench/bench.py with the arguments given here.
#   bench/run.sh                      # every scenario (L4 and HTTP), 3 interleaved rounds of 10 s
#   bench/run.sh --scenarios http-small-c64,http-small-c256
#   bench/run.sh --rounds 5 --duration 20
set -euo pipefail
cd "$(dirname "$0")/.."
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
cargo build --release -p rampart --bin rampart
exec python3 bench/bench.py --rampart "${CARGO_TARGET_DIR:-target}/release/rampart" "$@"
