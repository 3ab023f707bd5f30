#!/usr/bin/env bash
# What keys and limits cost per request, in one run: `sluice bench rps` (short calls, closed loop)
# against three `sluice serve` gateways in front of one mock, identical but for the admit stage:
#   plain  - the route without keys (invariant 10: no limiter touched)
#   memory - the route requires a key with five checks (requests, tokens, concurrency, budget,
#            key x model requests; limits high enough never to refuse) and prices, in memory
#   redis  - the same, with [state] redis on a local redis-server
# Two measures:
#   closed loop, c=CONCURRENCY, ROUNDS short runs per gateway, interleaved (plain, memory,
#   redis, plain, ...), so that the machine's drift hits all alike: req/s and latency p50/p99,
#   and their medians;
#   open loop at RATE req/s for a fixed number of requests (below saturation, so that the
#   gateways do alike per wake-up): latency p50/p99, and the gateway's CPU time per request
#   (utime + stime of its process, from /proc);
#   light load (200 req/s): memory against redis, the latency Redis adds without queueing.
# For redis, also the Redis round trips per request (sluice_state_round_trips_total) and the
# fallbacks (calls answered from local memory because Redis missed its deadline). Redis's call
# deadline is raised to 50 ms: on a shared 2-core machine at saturation the default 5 ms is
# missed by scheduling delays alone, and the instance would measure its fallback instead.
#
# Usage: bench/keys.sh [SECONDS] [CONCURRENCY] [RATE] [ROUNDS]
#        (default 3 s per closed-loop run, c=64, 3000/s, 3 rounds; loopback only)
# Needs: redis-server (Debian: redis-server; installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-3}
C=${2:-64}
RATE=${3:-3000}
ROUNDS=${4:-3}
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
{ printf '[state]\nredis = "redis://127.0.0.1:%s/0"\ncall_timeout = "50ms"\n' "$RPORT"; base; keyed; } > "$WORK/redis.toml"

declare -A ADDR ADMIN PID
for g in plain memory redis; do
  BENCH_UPSTREAM_KEY=sk-up RUST_LOG=warn "$BIN" serve --config "$WORK/$g.toml" > "$WORK/$g.out" 2> "$WORK/$g.err" &
  PID[$g]=$!
  PIDS+=($!)
  ADDR[$g]=$(wait_line "$WORK/$g.out")
  # Metrics are on the admin plane: its address is the second line.
  for _ in $(seq 50); do grep -q '^admin on' "$WORK/$g.out" && break; sleep 0.1; done
  ADMIN[${ADDR[$g]}]=$(sed -n 's/^admin on //p' "$WORK/$g.out")
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
metric() { curl -s "http://${ADMIN[$1]}/metrics" | awk -v m="$2" '$1 == m {print $2}'; }

rps() { "$BIN" bench rps --url "http://$1/v1/chat/completions" --protocol http1 "${@:2}" \
  --payload-bytes 1024 -H "authorization: Bearer $KEY" --json > "$WORK/r.json"; }
field() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$WORK/r.json" "$1"; }

echo "closed loop, c=$C, $DUR s per run, $ROUNDS rounds interleaved"
printf '%-7s %-6s %9s %9s %9s %7s %s\n' gateway round req/s p50_ms p99_ms errors note
declare -A RPS P50
for round in $(seq "$ROUNDS"); do
  for g in plain memory redis; do
    a=${ADDR[$g]}
    note=""
    if [ "$g" = redis ]; then
      rt0=$(metric "$a" sluice_state_round_trips_total)
      fb0=$(metric "$a" sluice_state_fallbacks_total)
    fi
    rps "$a" -c "$C" --duration-s "$DUR"
    ok=$(field 'r["successes"]')
    if [ "$g" = redis ]; then
      sleep 0.3   # the last settles leave the queue
      rt1=$(metric "$a" sluice_state_round_trips_total)
      fb1=$(metric "$a" sluice_state_fallbacks_total)
      note="redis round trips/request: $(python3 -c "print(round(($rt1 - $rt0) / max($ok, 1), 2))"), fallbacks: $((fb1 - fb0))"
    fi
    r=$(field 'round(r["throughput_per_s"])')
    p=$(field 'round(r["latency"]["p50_ms"], 3)')
    RPS[$g]="${RPS[$g]:-} $r"
    P50[$g]="${P50[$g]:-} $p"
    printf '%-7s %-6s %9s %9s %9s %7s %s\n' "$g" "$round" "$r" "$p" "$(field 'round(r["latency"]["p99_ms"], 3)')" "$(field 'r["errors"] + r["timeouts"]')" "$note"
  done
done
median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' $1; }
for g in plain memory redis; do
  printf 'median %-7s req/s %s  p50 %s ms\n' "$g" "$(median "${RPS[$g]}")" "$(median "${P50[$g]}")"
done

N=$((RATE * DUR))
echo "open loop, $RATE req/s over $C connections, $N requests per gateway per round, $ROUNDS rounds interleaved"
printf '%-7s %9s %9s %11s\n' gateway p50_ms p99_ms cpu_us/req
declare -A CPU OP50
for round in $(seq "$ROUNDS"); do
  for g in plain memory redis; do
    p=${PID[$g]}
    t0=$(ticks "$p")
    rps "${ADDR[$g]}" --rate "$RATE" -n "$N" --connections "$C"
    ok=$(field 'r["successes"]')
    t1=$(ticks "$p")
    cpu=$(python3 -c "print(round(($t1 - $t0) / $HZ * 1e6 / max($ok, 1), 1))")
    p=$(field 'round(r["latency"]["p50_ms"], 3)')
    CPU[$g]="${CPU[$g]:-} $cpu"
    OP50[$g]="${OP50[$g]:-} $p"
    printf '%-7s %9s %9s %11s\n' "$g" "$p" "$(field 'round(r["latency"]["p99_ms"], 3)')" "$cpu"
  done
done
for g in plain memory redis; do
  printf 'median %-7s cpu %s us/request  p50 %s ms\n' "$g" "$(median "${CPU[$g]}")" "$(median "${OP50[$g]}")"
done
echo "light load, 200 req/s, 1000 requests: the added latency without queueing"
printf '%-7s %9s %9s\n' gateway p50_ms p99_ms
for g in memory redis memory redis; do
  rps "${ADDR[$g]}" --rate 200 -n 1000 --connections "$C"
  printf '%-7s %9s %9s\n' "$g" "$(field 'round(r["latency"]["p50_ms"], 3)')" "$(field 'round(r["latency"]["p99_ms"], 3)')"
done
echo "redis-server's own time per call (INFO commandstats: calls, usec_per_call):"
redis-cli -p "$RPORT" info commandstats | grep -E 'evalsha|eval:' | tr -d '\r' || true
grep -h -i -E 'warn|error' "$WORK"/*.err | head -5 || true
