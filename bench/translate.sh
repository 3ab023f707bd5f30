#!/usr/bin/env bash
# What provider translation costs end to end, in one run: one `sluice serve` in front of one
# `sluice mock` (which answers as OpenAI, Anthropic and Gemini on one port), with three routes
# that differ only in what the gateway does with an OpenAI client's request:
#   passthrough  - model "pass":         OpenAI client -> OpenAI upstream (the same bytes)
#   to-anthropic - model "to-anthropic": OpenAI client -> Anthropic Messages upstream
#   to-gemini    - model "to-gemini":    OpenAI client -> Gemini generateContent upstream
# Each route has its own upstream (its own pool), all over h2c to the same mock.
# Three measures, rounds interleaved (pass, anthropic, gemini, pass, ...) so that the shared
# machine's drift hits all routes alike, with the medians over the rounds:
#   closed loop, c=CONCURRENCY, SECONDS per run: non-streaming req/s and latency p50/p99;
#   streams, STREAMS per run (c=STREAM_C, 10 tokens, no gap between events): first-event
#     latency p50/p99 (request sent -> first complete SSE event the client gets: the held
#     preamble flushed with the first content, translated or not). No gap, because the mock
#     paces every event, preamble included, and each format has a different preamble (Gemini
#     none, Anthropic three events): with gaps the figure would measure the mock's format.
#   open loop at RATE req/s for RATE*SECONDS requests (below saturation): the gateway's CPU
#     time per request (utime + stime of its process from /proc, over the run) and p50/p99.
#
# Usage: bench/translate.sh [SECONDS] [CONCURRENCY] [RATE] [ROUNDS] [STREAMS]
#        (default 3 s, c=32, 1000/s, 3 rounds, 300 streams; loopback only; about 2 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-3}
C=${2:-32}
RATE=${3:-1000}
ROUNDS=${4:-3}
STREAMS=${5:-300}
STREAM_C=20
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

echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (+ uncommitted changes)'), $(nproc) cores, load before: $(cut -d' ' -f1-3 /proc/loadavg)"

"$BIN" mock --listen 127.0.0.1:0 --max-records 1000 > "$WORK/mock.out" &
PIDS+=($!)
MOCK=$(wait_line "$WORK/mock.out")

cat > "$WORK/gw.toml" <<CONF
[server]
listen = "127.0.0.1:0"
[[upstream]]
name = "openai"
base_url = "http://$MOCK/v1"
protocol = "h2c"
provider = "openai"
[[upstream]]
name = "anthropic"
base_url = "http://$MOCK/v1"
protocol = "h2c"
provider = "anthropic"
[[upstream]]
name = "gemini"
base_url = "http://$MOCK/v1beta"
protocol = "h2c"
provider = "gemini"
[[route]]
models = ["pass"]
upstream = "openai"
[[route]]
models = ["to-anthropic"]
upstream = "anthropic"
[[route]]
models = ["to-gemini"]
upstream = "gemini"
CONF
RUST_LOG=warn "$BIN" serve --config "$WORK/gw.toml" > "$WORK/gw.out" 2> "$WORK/gw.err" &
GW_PID=$!
PIDS+=($!)
GW=$(wait_line "$WORK/gw.out")

ROUTES=(pass to-anthropic to-gemini)
# A ~1 KiB chat request for a route's model.
body() {
  python3 -c 'import json,sys; print(json.dumps({"model": sys.argv[1], "max_tokens": 64, "messages": [{"role": "user", "content": ("the quick brown fox jumps over the lazy dog " * 22)[:940]}]}))' "$1"
}
for m in "${ROUTES[@]}"; do body "$m" > "$WORK/$m.body"; done
stream_body() { printf '{"model":"%s","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}' "$1"; }

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
rps() { "$BIN" bench rps --url "http://$GW/v1/chat/completions" --protocol http1 --body "$(cat "$WORK/$1.body")" "${@:2}" --json > "$WORK/r.json"; }
field() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$WORK/r.json" "$1"; }
median() { python3 -c 'import statistics,sys; print(round(statistics.median(float(x) for x in sys.argv[1:]), 3))' $1; }

# Every route answers before anything is measured (and warms its pool).
for m in "${ROUTES[@]}"; do
  rps "$m" -c 4 -n 200
  [ "$(field 'r["successes"]')" = 200 ] || { echo "route $m fails: $(cat "$WORK/r.json")"; exit 1; }
done

echo
echo "non-streaming, closed loop, c=$C, $DUR s per run, $ROUNDS rounds interleaved"
printf '%-13s %-6s %9s %9s %9s %7s\n' route round req/s p50_ms p99_ms errors
declare -A RPS P50 P99
for round in $(seq "$ROUNDS"); do
  for m in "${ROUTES[@]}"; do
    rps "$m" -c "$C" --duration "${DUR}s"
    r=$(field 'round(r["throughput_per_s"])'); p=$(field 'round(r["latency"]["p50_ms"], 3)'); q=$(field 'round(r["latency"]["p99_ms"], 3)')
    RPS[$m]="${RPS[$m]:-} $r"; P50[$m]="${P50[$m]:-} $p"; P99[$m]="${P99[$m]:-} $q"
    printf '%-13s %-6s %9s %9s %9s %7s\n' "$m" "$round" "$r" "$p" "$q" "$(field 'r["errors"] + r["timeouts"]')"
  done
done

echo
echo "streaming, $STREAMS streams per run (c=$STREAM_C, 10 tokens, no gap), $ROUNDS rounds interleaved"
printf '%-13s %-6s %14s %14s %7s\n' route round first_p50_ms first_p99_ms errors
declare -A F50 F99
for round in $(seq "$ROUNDS"); do
  for m in "${ROUTES[@]}"; do
    "$BIN" bench stream --url "http://$GW/v1/chat/completions" --protocol http1 -c "$STREAM_C" -n "$STREAMS" \
      --ramp 200ms --body "$(stream_body "$m")" -H 'x-mock: tokens=10, interval_ms=0' --json > "$WORK/r.json"
    p=$(field 'round(r["first_event"]["p50_ms"], 3)'); q=$(field 'round(r["first_event"]["p99_ms"], 3)')
    F50[$m]="${F50[$m]:-} $p"; F99[$m]="${F99[$m]:-} $q"
    printf '%-13s %-6s %14s %14s %7s\n' "$m" "$round" "$p" "$q" "$(field 'r["errors"] + r["timeouts"]')"
  done
done

N=$((RATE * DUR))
echo
echo "non-streaming, open loop, $RATE req/s, $N requests per run, $ROUNDS rounds interleaved"
printf '%-13s %-6s %9s %9s %11s\n' route round p50_ms p99_ms cpu_us/req
declare -A CPU O50 O99
for round in $(seq "$ROUNDS"); do
  for m in "${ROUTES[@]}"; do
    t0=$(ticks "$GW_PID")
    rps "$m" --rate "$RATE" -n "$N"
    t1=$(ticks "$GW_PID")
    ok=$(field 'r["successes"]')
    cpu=$(python3 -c "print(round(($t1 - $t0) / $HZ * 1e6 / max($ok, 1), 1))")
    p=$(field 'round(r["latency"]["p50_ms"], 3)'); q=$(field 'round(r["latency"]["p99_ms"], 3)')
    CPU[$m]="${CPU[$m]:-} $cpu"; O50[$m]="${O50[$m]:-} $p"; O99[$m]="${O99[$m]:-} $q"
    printf '%-13s %-6s %9s %9s %11s\n' "$m" "$round" "$p" "$q" "$cpu"
  done
done

echo
echo "medians over $ROUNDS rounds (load after: $(cut -d' ' -f1-3 /proc/loadavg))"
printf '| %-12s | %9s | %10s | %10s | %15s | %15s | %13s | %16s |\n' route req/s p50_ms p99_ms stream_first_p50 stream_first_p99 cpu_us/req open_p50/p99_ms
printf '|%s|%s|%s|%s|%s|%s|%s|%s|\n' --- ---: ---: ---: ---: ---: ---: ---:
for m in "${ROUTES[@]}"; do
  printf '| %-12s | %9s | %10s | %10s | %15s | %15s | %13s | %16s |\n' "$m" "$(median "${RPS[$m]}")" "$(median "${P50[$m]}")" \
    "$(median "${P99[$m]}")" "$(median "${F50[$m]}")" "$(median "${F99[$m]}")" "$(median "${CPU[$m]}")" \
    "$(median "${O50[$m]}") / $(median "${O99[$m]}")"
done
grep -h -i -E 'warn|error' "$WORK"/*.err | head -5 || true
