#!/usr/bin/env bash
# Reproduces the quinn+h3 vs quiche HTTP/3 measurement (issue 40), with Caddy (the HTTP/3
# reference named in issue 40) as a fourth server.
# Server pinned to CPU 0, load generator (h3load, this project's quinn+h3 client: Debian's h2load
# has no HTTP/3) pinned to CPU 1; ROUNDS interleaved rounds per scenario.
# Needs libclang for quiche's boring-sys bindgen step (Debian: apt-get install libclang1-14),
# and caddy (Debian: apt-get install caddy; its systemd service is not needed and need not run).
# Usage: bench/h3-stacks/run.sh   (env: ROUNDS=3 N=200000 NCONN=10000 OUT=bench/h3-stacks/out)
set -euo pipefail
cd "$(dirname "$0")"
ROUNDS=${ROUNDS:-3}
N=${N:-200000}
NCONN=${NCONN:-10000}
GCC_INC=$(dirname "$(ls /usr/lib/gcc/x86_64-linux-gnu/*/include/stddef.h | head -1)")
export BINDGEN_EXTRA_CLANG_ARGS=${BINDGEN_EXTRA_CLANG_ARGS:--I$GCC_INC}
OUT=${OUT:-out}
mkdir -p "$OUT"
cargo build --release --quiet
TICK=$(getconf CLK_TCK)
command -v caddy >/dev/null || { echo "caddy not found (Debian: apt-get install caddy)" >&2; exit 1; }

# quiche-batch: the same quiche-server with QUICHE_BATCH_IO=1 (recvmmsg + GSO written in
# quiche-server.rs, i.e. application code, not something quiche provides).
# caddy: Debian's caddy with a JSON config written here: admin endpoint off, one server on
# 127.0.0.1:4436 (HTTP/3 on UDP; Caddy also listens on TCP 4436 for HTTP/1.1 and HTTP/2, unused
# here), TLS with a self-signed ECDSA P-256 certificate for localhost/127.0.0.1 made by openssl,
# automatic HTTPS off, every request answered by static_response 200 "hello, world\n".
# GOMAXPROCS=1 and taskset -c 0 keep it on one core like the others.
SERVERS="quinn quiche quiche-batch caddy"
declare -A PORT=([quinn]=4433 [quiche]=4434 [quiche-batch]=4435 [caddy]=4436)
declare -A PID
CADDY_DIR=$(mktemp -d)
cleanup() {
  for p in "${PID[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$CADDY_DIR"
}
trap cleanup EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "$CADDY_DIR/key.pem" -out "$CADDY_DIR/cert.pem" 2>/dev/null
cat > "$CADDY_DIR/caddy.json" <<EOF
{
  "admin": {"disabled": true, "config": {"persist": false}},
  "storage": {"module": "file_system", "root": "$CADDY_DIR/data"},
  "apps": {
    "tls": {"certificates": {"load_files": [
      {"certificate": "$CADDY_DIR/cert.pem", "key": "$CADDY_DIR/key.pem"}]}},
    "http": {"servers": {"bench": {
      "listen": ["127.0.0.1:${PORT[caddy]}"],
      "protocols": ["h1", "h2", "h3"],
      "automatic_https": {"disable": true},
      "tls_connection_policies": [{}],
      "routes": [{"handle": [
        {"handler": "static_response", "status_code": 200, "body": "hello, world\n"}]}]
    }}}
  }
}
EOF

taskset -c 0 target/release/quinn-server 4433 > "$OUT/quinn.log" 2>&1 &
PID[quinn]=$!
taskset -c 0 target/release/quiche-server 4434 > "$OUT/quiche.log" 2>&1 &
PID[quiche]=$!
QUICHE_BATCH_IO=1 taskset -c 0 target/release/quiche-server 4435 > "$OUT/quiche-batch.log" 2>&1 &
PID[quiche-batch]=$!
XDG_CONFIG_HOME=$CADDY_DIR XDG_DATA_HOME=$CADDY_DIR GOMAXPROCS=1 \
  taskset -c 0 caddy run --config "$CADDY_DIR/caddy.json" > "$OUT/caddy.log" 2>&1 &
PID[caddy]=$!
for s in $SERVERS; do
  up='ready\|serving initial configuration'   # ours print "ready", Caddy logs the second
  for _ in $(seq 50); do grep -q "$up" "$OUT/$s.log" && break; sleep 0.1; done
  grep "$up" "$OUT/$s.log"
done
caddy version | tee "$OUT/caddy-version.txt"

cpu() { awk '{print $14, $15}' "/proc/$1/stat"; }   # utime stime in clock ticks
# Kernel UDP counters for the whole host: InDatagrams (loopback: each delivery counted once; a
# GSO/GRO batch handed over whole counts once) and RcvbufErrors (datagrams dropped, buffer full)
udp_in() { awk '/^Udp: [0-9]/ {print $2; exit}' /proc/net/snmp; }
udp_drop() { awk '/^Udp: [0-9]/ {print $6; exit}' /proc/net/snmp; }

# warm-up (handshake code paths, allocator)
for s in $SERVERS; do
  taskset -c 1 target/release/h3load -c 4 -m 10 -n 20000 "https://127.0.0.1:${PORT[$s]}/" > /dev/null
done

RES="$OUT/results.tsv"
echo -e "scenario\tserver\tround\treq_s\tdone\tutime_ticks\tstime_ticks\tudp_datagrams\tudp_rcvbuf_drops" > "$RES"
for r in $(seq "$ROUNDS"); do
  for sc in "c16m10:-c 16 -m 10 -n $N" "c64m1:-c 64 -m 1 -n $N" "c16r1:-c 16 -m 1 -r 1 -n $NCONN"; do
    name=${sc%%:*}; opts=${sc#*:}
    for s in $SERVERS; do
      read -r u0 k0 < <(cpu "${PID[$s]}"); d0=$(udp_in); e0=$(udp_drop)
      # shellcheck disable=SC2086
      taskset -c 1 target/release/h3load $opts "https://127.0.0.1:${PORT[$s]}/" \
        > "$OUT/h3load-$name-$s-$r.txt"
      read -r u1 k1 < <(cpu "${PID[$s]}"); d1=$(udp_in); e1=$(udp_drop)
      rps=$(awk '/^finished in/ {print $4}' "$OUT/h3load-$name-$s-$r.txt")
      done_=$(awk '/^requests:/ {print $8}' "$OUT/h3load-$name-$s-$r.txt")
      echo -e "$name\t$s\t$r\t$rps\t$done_\t$((u1-u0))\t$((k1-k0))\t$((d1-d0))\t$((e1-e0))" | tee -a "$RES"
    done
  done
done
for s in $SERVERS; do
  echo "$s RSS after run: $(awk '/VmRSS/ {print $2, $3}' /proc/${PID[$s]}/status)" | tee -a "$OUT/rss.txt"
done

python3 - "$RES" "$TICK" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
tick_us = 1e6 / int(sys.argv[2])
print("\n| scenario | server | req/s (median) | user µs/req | kernel µs/req | total µs/req | server CPU busy | UDP deliveries/req | rcvbuf drops (sum) |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for sc in ("c16m10", "c64m1", "c16r1"):
    for s in ("quinn", "quiche", "quiche-batch", "caddy"):
        rs = [r for r in rows if r["scenario"] == sc and r["server"] == s]
        rps = statistics.median(float(r["req_s"]) for r in rs)
        u = statistics.median(int(r["utime_ticks"]) * tick_us / int(r["done"]) for r in rs)
        k = statistics.median(int(r["stime_ticks"]) * tick_us / int(r["done"]) for r in rs)
        t = statistics.median((int(r["utime_ticks"]) + int(r["stime_ticks"])) * tick_us / int(r["done"]) for r in rs)
        busy = statistics.median((int(r["utime_ticks"]) + int(r["stime_ticks"])) * tick_us * float(r["req_s"]) / int(r["done"]) / 1e6 for r in rs)
        dg = statistics.median(int(r["udp_datagrams"]) / int(r["done"]) for r in rs)
        drops = sum(int(r["udp_rcvbuf_drops"]) for r in rs)
        print(f"| {sc} | {s} | {rps:,.0f} | {u:.2f} | {k:.2f} | {t:.2f} | {busy:.0%} | {dg:.2f} | {drops} |")
PY
