#!/usr/bin/env bash
# The mock must never be the bottleneck of a benchmark: compare it, in one run, with nginx serving
# a static JSON file of the same size, and measure its memory while it holds 10,000 slow streams.
#
# Usage: bench/mock_vs_nginx.sh [SECONDS]     (default 10 s per load; loopback only)
# Needs: nginx, wrk, h2load (Debian: nginx-light wrk nghttp2-client; installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-10}
for tool in nginx wrk h2load curl; do
  if ! command -v "$tool" >/dev/null; then
    apt-get update -qq && apt-get install -y -qq nginx-light wrk nghttp2-client curl >/dev/null
    break
  fi
done
cargo build --release -q -p sluice
BIN=target/release/sluice
WORK=$(mktemp -d)
chmod 755 "$WORK"   # nginx workers run as www-data
trap 'kill $(jobs -p) 2>/dev/null; [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null; rm -rf "$WORK"' EXIT

BODY='{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'
printf '%s' "$BODY" > "$WORK/body.json"
printf '{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}' > "$WORK/stream.json"
printf 'wrk.method = "POST"\nwrk.body = [[%s]]\nwrk.headers["Content-Type"] = "application/json"\n' "$BODY" > "$WORK/post.lua"

"$BIN" mock --listen 127.0.0.1:0 > "$WORK/mock.out" &
MOCK_PID=$!
for _ in $(seq 50); do grep -q listening "$WORK/mock.out" 2>/dev/null && break; sleep 0.1; done
MOCK=$(sed -n 's/^listening on //p' "$WORK/mock.out")
mkdir -p "$WORK/root/v1/chat"
curl -s "http://$MOCK/v1/chat/completions" -d "$BODY" > "$WORK/root/v1/chat/completions"
SIZE=$(stat -c %s "$WORK/root/v1/chat/completions")

NGINX_PORT=$((20000 + RANDOM % 20000))
NGINX_H1=$((NGINX_PORT + 1))
# nginx 1.22 serves h2c only on an `http2` listener, so HTTP/1.1 gets a second one. POST to a
# static file is a 405 in nginx; `error_page 405 =200` serves the file anyway.
cat > "$WORK/nginx.conf" <<CONF
worker_processes auto;
pid $WORK/nginx.pid;
error_log $WORK/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  default_type application/json;
  keepalive_requests 1000000;
  http2_max_concurrent_streams 128;
  server {
    listen 127.0.0.1:$NGINX_PORT http2;
    location / { root $WORK/root; error_page 405 =200 \$uri; }
  }
  server {
    listen 127.0.0.1:$NGINX_H1;
    location / { root $WORK/root; error_page 405 =200 \$uri; }
  }
}
CONF
nginx -c "$WORK/nginx.conf"
sleep 0.3

echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  machine: $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GiB  response: $SIZE bytes  duration: ${DUR}s per load"
wrk_rps() { wrk -t2 -c64 -d"${DUR}s" --latency -s "$WORK/post.lua" "$1" | awk '/Requests\/sec/{rps=$2} /99%/{p99=$2} /Non-2xx/{bad=$NF} END{printf "%s req/s  p99 %s  non-2xx: %d", rps, p99, bad}'; }
h2_rps() { h2load -c8 -m8 -D "$DUR" -d "$WORK/body.json" -H 'content-type: application/json' "$1" 2>/dev/null | awk '/finished in/{rps=$4} /^status codes:/{ok=$3} END{printf "%s req/s  (%s 2xx)", rps, ok}'; }
echo "HTTP/1.1 keep-alive, c=64   mock:  $(wrk_rps "http://$MOCK/v1/chat/completions")"
echo "HTTP/1.1 keep-alive, c=64   nginx: $(wrk_rps "http://127.0.0.1:$NGINX_H1/v1/chat/completions")"
echo "h2c 8 conns x 8 streams     mock:  $(h2_rps "http://$MOCK/v1/chat/completions")"
echo "h2c 8 conns x 8 streams     nginx: $(h2_rps "http://127.0.0.1:$NGINX_PORT/v1/chat/completions")"

# 10,000 concurrent slow streams over h2c (100 connections x 100 streams), each 20 events 1 s
# apart; RSS sampled while all are open. A fresh mock, so the records of the loads above do not
# count.
kill $MOCK_PID
"$BIN" mock --listen 127.0.0.1:0 > "$WORK/mock2.out" &
MOCK_PID=$!
for _ in $(seq 50); do grep -q listening "$WORK/mock2.out" 2>/dev/null && break; sleep 0.1; done
MOCK=$(sed -n 's/^listening on //p' "$WORK/mock2.out")
base_rss=$(awk '/VmRSS/{print $2}' /proc/$MOCK_PID/status)
h2load -c100 -m100 -n10000 -t2 -d "$WORK/stream.json" -H 'content-type: application/json' \
  -H 'x-mock: tokens=20, interval_ms=1000' "http://$MOCK/v1/chat/completions" > "$WORK/h2load.out" 2>&1 &
H2L=$!
peak=0; open=0
for _ in $(seq 30); do
  sleep 1
  rss=$(awk '/VmRSS/{print $2}' /proc/$MOCK_PID/status)
  [ "$rss" -gt "$peak" ] && peak=$rss
  now=$(curl -s "http://$MOCK/__mock/stats?totals" | sed -n 's/.*"in_progress":\([0-9]*\).*/\1/p')
  [ "${now:-0}" -gt "$open" ] && open=$now
  kill -0 $H2L 2>/dev/null || break
done
wait $H2L || true
done_ok=$(awk '/^status codes:/{print $3}' "$WORK/h2load.out")
echo "10k slow streams (h2c)      mock: RSS at start $((base_rss/1024)) MiB, peak $((peak/1024)) MiB; most streams open at once: $open; 2xx: $done_ok"
