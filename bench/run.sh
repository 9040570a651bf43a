#!/usr/bin/env bash
# Side-by-side benchmark: Rampart, HAProxy and nginx, one worker each pinned to CPU 0, the same
# backend (nginx) and load generator (wrk) on CPU 1. Installs what is missing from Debian, builds
# Rampart in release mode, then runs bench/bench.py with the arguments given here.
#   bench/run.sh                      # every scenario (L4 and HTTP), 3 interleaved rounds of 10 s
#   bench/run.sh --scenarios http-small-c64,http-small-c256
#   bench/run.sh --rounds 5 --duration 20
#   bench/run.sh --baseline-commit f2eef12   # adds rampart-before: Rampart built at that commit
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
