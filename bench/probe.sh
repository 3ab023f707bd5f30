#!/usr/bin/env bash
# Seed 000's experiment as a benchmark: 40 long streams kept at 40 plus one probe a second for
# 60 s, against sluice-mock with one upstream connection degraded, through three gateways:
#   (a) trap:  all traffic on ONE HTTP/2 connection (the article's Go pool, no health checks)
#   (b) lanes: Sluice's default pool (streams on lane `stream`, probes on lane `short`)
#   (c) http1: an HTTP/1.1 upstream (a connection per request in flight)
# plus a baseline with no background streams. Loopback only; bounded in time.
#
# Usage: bench/probe.sh [SECONDS] [STREAMS]    (default 60 s per scenario, 40 streams)
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-60}
K=${2:-40}
cargo build --release -q -p sluice
BIN=target/release/sluice
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
wait_line() { for _ in $(seq 100); do grep -q listening "$1" 2>/dev/null && break; sleep 0.1; done; sed -n 's/^listening on //p' "$1"; }

STREAM_H='x-mock: tokens=1000000, interval_ms=10, token_bytes=1000'
DEGRADED_H='x-mock: tokens=1000000, interval_ms=10, token_bytes=1000, degrade=50000'

run() { # name, upstream lines, route lines, streams
  local name=$1 up=$2 route=$3 k=$4
  "$BIN" mock --listen 127.0.0.1:0 > "$WORK/mock-$name.out" &
  local mock_pid=$!
  local mock
  mock=$(wait_line "$WORK/mock-$name.out")
  printf '[server]\nlisten = "127.0.0.1:0"\n[[upstream]]\nname = "mock"\nbase_url = "http://%s/v1"\n%s\n[[route]]\nmodels = ["*"]\nupstream = "mock"\n%s\n' \
    "$mock" "$up" "$route" > "$WORK/$name.toml"
  RUST_LOG=error "$BIN" serve --config "$WORK/$name.toml" > "$WORK/gw-$name.out" 2>/dev/null &
  local gw_pid=$!
  local gw
  gw=$(wait_line "$WORK/gw-$name.out")
  "$BIN" bench probe --url "http://$gw/v1/chat/completions" -k "$k" --duration "${DUR}s" --max-error-rate 1 \
    --mock-stats "http://$mock/__mock/stats" \
    --stream-header "$STREAM_H" --first-stream-header "$DEGRADED_H" --json > "$WORK/$name.json"
  kill "$gw_pid" "$mock_pid" 2>/dev/null || true
  wait "$gw_pid" "$mock_pid" 2>/dev/null || true
  python3 - "$name" "$WORK/$name.json" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
r = json.load(open(path))
lat = r["latency"]
print("%-8s probes %4d  ok %4d  errors %d  timeouts %d  mean %9.1f ms  p95 %9.1f ms  max %9.1f ms  shared with a long stream %d/%d  on the degraded connection %d" % (
    name, r["requests"], r["successes"], r["errors"], r["timeouts"], lat["mean_ms"], lat["p95_ms"],
    lat["max_ms"], r["shared_with_long_stream"], r["probes_located"], r["on_degraded_connection"]))
PY
}

echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  machine: $(nproc) cores  $K long streams, probes 1 s apart, ${DUR}s per scenario"
run baseline 'protocol = "h2c"' '' 0
run trap 'protocol = "h2c"
pool = { stream = { min_connections = 1, max_connections = 1, max_streams_per_connection = 100 }, ping_interval = "1h", stall_timeout = "1h" }' 'lane = "stream"' "$K"
run lanes 'protocol = "h2c"' '' "$K"
run http1 'protocol = "http1"' '' "$K"
