#!/usr/bin/env bash
# Memory after a burst: the gateway's RSS at rest, during a burst of misbehaving clients (issue 15:
# 30 clients each uploading 10 MiB and stalling, 40 clients that never read an 8 MB non-streaming
# response), and after the gateway has cut them. Prints one JSON line.
#
# Usage: bench/burst_rss.sh [UPLOADERS] [NON_READERS]     (default 30 40; loopback only, ~40 s)
# Environment: SLUICE_BIN (default target/release/sluice, built when missing); anything else the
# allocator reads from the environment (e.g. MALLOC_ARENA_MAX) is passed to the gateway, so
# allocator settings can be compared run against run.
set -euo pipefail
cd "$(dirname "$0")/.."
UP=${1:-30}
NR=${2:-40}
BIN=${SLUICE_BIN:-target/release/sluice}
[ -x "$BIN" ] || cargo build --release -q -p sluice
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_line() { for _ in $(seq 100); do grep -q listening "$1" 2>/dev/null && break; sleep 0.1; done; sed -n 's/^listening on //p' "$1"; }

"$BIN" mock --listen 127.0.0.1:0 > "$WORK/mock.out" 2>&1 &
PIDS+=($!)
MOCK=$(wait_line "$WORK/mock.out")
cat > "$WORK/gw.toml" <<CONF
[server]
listen = "127.0.0.1:0"
client_timeouts = { body_idle = "5s", send = "5s", keep_alive = "5s" }
[[upstream]]
name = "mock"
base_url = "http://$MOCK/v1"
protocol = "h2c"
[[route]]
models = ["*"]
upstream = "mock"
CONF
"$BIN" serve "$WORK/gw.toml" > "$WORK/gw.out" 2> "$WORK/gw.err" &
GW_PID=$!
PIDS+=($GW_PID)
GW=$(wait_line "$WORK/gw.out")
rss_kib() { awk '/VmRSS/{print $2}' "/proc/$GW_PID/status"; }

for _ in $(seq 20); do
  curl -s "http://$GW/v1/chat/completions" -d '{"model":"gpt-4o"}' > /dev/null
done
BASE=$(rss_kib)
python3 bench/slow_clients.py "$GW" stall-upload "$UP" 10 > "$WORK/up.json" &
PIDS+=($!)
python3 bench/slow_clients.py "$GW" no-read "$NR" 8000000 > "$WORK/nr.json" &
PIDS+=($!)
PEAK=0
for _ in $(seq 20); do
  sleep 1
  R=$(rss_kib)
  [ "$R" -gt "$PEAK" ] && PEAK=$R
done
# The clients are cut by now (5 s timeouts); the keep-alive closes their idle connections.
sleep 10
for _ in $(seq 20); do
  curl -s "http://$GW/v1/chat/completions" -d '{"model":"gpt-4o"}' > /dev/null
done
AFTER=$(rss_kib)
BUDGET=$(curl -s "http://$GW/metrics" | awk '/^sluice_body_budget_used_bytes/{print $2}')
printf '{"baseline_kib":%s,"peak_kib":%s,"after_kib":%s,"after_over_baseline":%s,"budget_used_after":%s,"uploaders":%s,"non_readers":%s}\n' \
  "$BASE" "$PEAK" "$AFTER" "$(awk -v a="$AFTER" -v b="$BASE" 'BEGIN{printf "%.1f", a/b}')" "$BUDGET" "$UP" "$NR"
