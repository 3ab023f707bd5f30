#!/usr/bin/env bash
# What keys and limits cost per request, in one run: `sluice bench rps` (short calls, closed loop)
# against three `sluice serve` gateways in front of one mock, identical but for the admit stage:
#   plain  - the route without keys (invariant 10: no limiter touched)
#   memory - the route requires a key with five checks (requests, tokens, concurrency, budget,
#            key x model requests; limits high enough never to refuse) and prices, in memory
#   redis  - the same, with [state] redis on a local redis-server
# For each: req/s, latency p50/p99, and the gateway's CPU time per request (utime + stime of its
# process over the run, from /proc), and for redis the Redis round trips per request
# (sluice_state_round_trips_total). plain and memory run twice, interleaved, to show the noise.
#
# Usage: bench/keys.sh [SECONDS] [CONCURRENCY]   (default 4 s per run, c=64; loopback only)
# Needs: redis-server (Debian: redis-server; installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-4}
C=${2:-64}
if ! command -v redis-server >/dev/null; then
  apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
fi
cargo build --release -q -p sluice
BIN=target/release/sluice
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_line() { for _ in $(seq 100); do grep -q listening "$1" 2>/dev/null && break; sleep 0.1; done; sed -n 's/^listening on //p' "$1"; }

"$BIN" mock --listen 127.0.0.1:0 --max-records 1000 > "$WORK/mock.out" &
PIDS+=($!)
MOCK=$(wait_line "$WORK/mock.out")

RPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --loglevel warning > /dev/null &
PIDS+=($!)
for _ in $(seq 50); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

KEY=sk-bench-key
HASH=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)
base() {
  cat <<CONF
[server]
listen = "127.0.0.1:0"
[[upstream]]
name = "mock"
base_url = "http://$MOCK/v1"
protocol = "h2c"
auth = { type = "bearer", env = "BENCH_UPSTREAM_KEY" }
[[route]]
name = "chat"
models = ["*"]
upstream = "mock"
CONF
}
keyed() {
  cat <<CONF
[[price]]
models = ["gpt-4o*"]
input = 2.5
output = 10.0
[[key]]
id = "bench"
hash = "$HASH"
team = "bench"
requests = { limit = 1000000000, per = "1m" }
tokens = { limit = 1000000000000, per = "1m" }
concurrency = 100000
budget = { limit = 1000000000.0, per = "1d" }
[[key.model_limits]]
models = ["gpt-4o"]
requests = { limit = 1000000000, per = "1m" }
CONF
}
base > "$WORK/plain.toml"
{ base; keyed; } > "$WORK/memory.toml"
{ printf '[state]\nredis = "redis://127.0.0.1:%s/0"\n' "$RPORT"; base; keyed; } > "$WORK/redis.toml"

declare -A ADDR PID
for g in plain memory redis; do
  BENCH_UPSTREAM_KEY=sk-up RUST_LOG=warn "$BIN" serve --config "$WORK/$g.toml" > "$WORK/$g.out" 2> "$WORK/$g.err" &
  PID[$g]=$!
  PIDS+=($!)
  ADDR[$g]=$(wait_line "$WORK/$g.out")
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
metric() { curl -s "http://$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }

printf '%-7s %9s %9s %9s %9s %13s %s\n' gateway req/s p50_ms p99_ms errors cpu_us/req note
run() {
  local g=$1 note=""
  local a=${ADDR[$g]} p=${PID[$g]}
  local t0 rt0
  t0=$(ticks "$p")
  [ "$g" = redis ] && rt0=$(metric "$a" sluice_state_round_trips_total)
  "$BIN" bench rps --url "http://$a/v1/chat/completions" --protocol http1 -c "$C" \
    --duration-s "$DUR" --payload-bytes 1024 -H "authorization: Bearer $KEY" --json > "$WORK/r.json"
  local t1
  t1=$(ticks "$p")
  local ok rps p50 p99 err
  read -r ok rps p50 p99 err < <(python3 -c '
import json,sys; r=json.load(open(sys.argv[1]))
print(r["successes"], round(r["throughput_per_s"]), r["latency"]["p50_ms"], r["latency"]["p99_ms"], r["errors"]+r["timeouts"])' "$WORK/r.json")
  local cpu
  cpu=$(python3 -c "print(round(($t1 - $t0) / $HZ * 1e6 / max($ok, 1), 1))")
  if [ "$g" = redis ]; then
    sleep 0.3   # the last settles leave the queue
    local rt1
    rt1=$(metric "$a" sluice_state_round_trips_total)
    note="redis round trips/request: $(python3 -c "print(round(($rt1 - $rt0) / max($ok, 1), 2))")"
  fi
  printf '%-7s %9s %9s %9s %9s %13s %s\n' "$g" "$rps" "$p50" "$p99" "$err" "$cpu" "$note"
}
run plain
run memory
run redis
run plain
run memory
grep -h -i -E 'warn|error' "$WORK"/*.err | head -5 || true
