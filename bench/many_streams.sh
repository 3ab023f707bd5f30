#!/usr/bin/env bash
# Many concurrent streams through one instance (issue 31 item 4): `sluice bench stream` opens
# STREAMS streams at once over HTTP/2 (h2c, 100 streams a connection, so STREAMS/100
# connections) to one gateway, whose upstream is one `sluice mock` over h2c (100 streams a
# connection); each stream is EVENTS content events INTERVAL_MS apart (a model's pace, slowed so
# that this machine's two cores can carry the client and the mock as well as the gateway).
# Prints one JSON line: the gateway's peak RSS (VmHWM), its most descriptors (sampled each
# second) and its CPU per forwarded event
# (utime+stime over the run / events the client read), and the client's view: streams
# completed and failed, time to first event p50 / max and their ratio (starvation).
#
# Usage: bench/many_streams.sh [STREAMS=100000] [EVENTS=30] [INTERVAL_MS=2000] [RAMP=30s]
# Environment: SLUICE_BIN (default target/release/sluice, built when missing). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
STREAMS=${1:-100000}
EVENTS=${2:-30}
INTERVAL=${3:-2000}
RAMP=${4:-30s}
BIN=${SLUICE_BIN:-target/release/sluice}
[ -x "$BIN" ] || cargo build --release -q -p sluice
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
# One descriptor per connection: the client's, the gateway's two sides, the mock's.
ulimit -n "$(ulimit -Hn)"

wait_line() { for _ in $(seq 100); do grep -q listening "$1" 2>/dev/null && break; sleep 0.1; done; sed -n 's/^listening on //p' "$1"; }

"$BIN" mock --listen 127.0.0.1:0 --tokens "$EVENTS" --interval-ms "$INTERVAL" --ttft-ms 0 \
  --h2-max-concurrent-streams 200 --max-records 1000 > "$WORK/mock.out" 2>&1 &
PIDS+=($!)
MOCK=$(wait_line "$WORK/mock.out")
# Upstream capacity 1,100 connections x 100 streams (100 x the 256 KiB stream window is the
# connection's 25 MiB window); the client side's limits raised for one address.
cat > "$WORK/gw.toml" <<CONF
[server]
listen = "127.0.0.1:0"
access_log = "off"
client_resets = { per_connection = 1000000, per_ip = 1000000 }
[[upstream]]
name = "mock"
base_url = "http://$MOCK/v1"
protocol = "h2c"
pool.stream = { max_connections = 1100, max_streams_per_connection = 100, max_pending = 200000, acquire_timeout = "60s" }
[[route]]
models = ["*"]
upstream = "mock"
[ledger]
sink = { kind = "none" }
CONF
"$BIN" serve "$WORK/gw.toml" > "$WORK/gw.out" 2> "$WORK/gw.err" &
GW_PID=$!
PIDS+=($GW_PID)
GW=$(wait_line "$WORK/gw.out")
ticks() { awk '{print $14 + $15}' "/proc/$GW_PID/stat"; }

# The most descriptors the gateway held, sampled every second while the load runs.
( max=0; while kill -0 "$GW_PID" 2>/dev/null; do
    n=$(ls "/proc/$GW_PID/fd" 2>/dev/null | wc -l); [ "$n" -gt "$max" ] && max=$n && echo "$max" > "$WORK/fds"
    sleep 1
  done ) &
PIDS+=($!)
T0=$(ticks)
"$BIN" bench stream --url "http://$GW/v1/chat/completions" --protocol h2c \
  -c "$STREAMS" -n "$STREAMS" --ramp "$RAMP" --timeout 900s --duration 900s --json \
  --max-error-rate 1 > "$WORK/bench.json"
T1=$(ticks)
HWM=$(awk '/VmHWM/{print $2}' "/proc/$GW_PID/status")
FDS=$(cat "$WORK/fds" 2>/dev/null || echo 0)
python3 - "$WORK/bench.json" "$STREAMS" "$EVENTS" "$INTERVAL" "$HWM" "$((T1 - T0))" "$(getconf CLK_TCK)" "$FDS" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
streams, events, interval, hwm_kib, ticks, hz, fds = map(int, sys.argv[2:])
fe = r["first_event"]
print(json.dumps({
    "streams": streams, "events_per_stream": events, "interval_ms": interval,
    "completed": r["completed"], "failed": r["errors"] + r["timeouts"],
    "failure_causes": r["failure_causes"],
    "events_read": r["events"],
    "gateway_peak_rss_mib": round(hwm_kib / 1024, 1),
    "gateway_peak_descriptors": fds,
    "gateway_cpu_s": round(ticks / hz, 2),
    "gateway_cpu_us_per_event": round(ticks / hz * 1e6 / max(r["events"], 1), 2),
    "first_event_p50_ms": fe["p50_ms"], "first_event_max_ms": fe["max_ms"],
    "first_event_max_over_p50": round(fe["max_ms"] / max(fe["p50_ms"], 1e-9), 2),
}))
PY
