#!/usr/bin/env bash
# CPU per streamed event: Sluice (HTTP/1.1 upstream, access log off), nginx (two workers,
# proxy_buffering off, access_log off) and HAProxy, each in front of the same `sluice mock`
# sending N-token SSE streams (as fast as it can by default), loaded in turn with wrk -t1, round after
# round. CPU is utime+stime of all the proxy's processes from /proc over the load, divided by
# the streams (each of N content events, a final event and `[DONE]`).
#
# usage: bench/stream_cpu.sh SLUICE_BIN [rounds=2] [seconds=5] [tokens=200] [interval_ms=0] [conns=16]
#   interval_ms > 0 paces the events as a model does (each then comes in a read of its own).
# Needs wrk, nginx, haproxy. Only 127.0.0.1.
set -euo pipefail

BIN=$(realpath "$1")
ROUNDS=${2:-2}
SECS=${3:-5}
TOKENS=${4:-200}
INTERVAL=${5:-0}
CONNS=${6:-16}
# shellcheck source=bench/proxies.sh
. "$(dirname "$0")/proxies.sh"
proxies_init sluice-stream-cpu

"$BIN" mock --listen "$MOCK" --tokens "$TOKENS" --interval-ms "$INTERVAL" --ttft-ms 0 >/dev/null 2>&1 &
PIDS+=($!)
# wrk ends each load with its streams in flight: to the gateway, cancellations by one address,
# which past 200 in 10 s would have it refuse the next load (README, "Limits and timeouts").
start_proxies "$BIN" 'client_resets = { per_ip = 1000000, per_connection = 1000000 }'

cat > "$WORK/stream.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}],"stream":true}'
wrk.headers["Content-Type"] = "application/json"
LUA
for _ in $(seq 100); do curl -s -o /dev/null "http://$GW/healthz" && break; sleep 0.1; done
EVENTS=$(curl -sN "http://$GW/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}],"stream":true}' | grep -c '^data:')
echo "each stream: $EVENTS events (data: lines) through Sluice"

ticks() { # pids... -> utime+stime summed
  local t=0 p
  for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$t"
}

one() { # name addr pids...
  local name=$1 addr=$2 url out streams t0 t1
  shift 2
  url="http://$addr/v1/chat/completions"
  wrk -t1 -c"$CONNS" -d1s -s "$WORK/stream.lua" "$url" >/dev/null
  t0=$(ticks "$@")
  out=$(wrk -t1 -c"$CONNS" -d"${SECS}s" -s "$WORK/stream.lua" "$url")
  t1=$(ticks "$@")
  streams=$(echo "$out" | awk '/requests in/ {print $1}')
  awk -v n="$name" -v s="$streams" -v e="$EVENTS" -v d=$((t1 - t0)) -v secs="$SECS" -v hz="$(getconf CLK_TCK)" \
    'BEGIN {printf "%-8s %6.0f streams/s   CPU %7.1f us/stream   %5.2f us/event\n", n, s/secs, d*1e6/hz/s, d*1e6/hz/s/e}'
}

for r in $(seq "$ROUNDS"); do
  echo "round $r"
  one sluice "$GW" "$GP"
  # shellcheck disable=SC2046
  one nginx "$NG" $(pgrep -P "$(cat "$WORK/nginx.pid")" | tr '\n' ' ')
  one haproxy "$HA" "$(cat "$WORK/haproxy.pid")"
done
