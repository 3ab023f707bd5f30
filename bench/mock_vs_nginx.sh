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
trap 'kill $(jobs -p) 2>/dev/null; [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null; rm -rf "$WORK"' EXIT

BODY='{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'
printf '%s' "$BODY" > "$WORK/body.json"
printf 'wrk.method = "POST"\nwrk.body = [[%s]]\nwrk.headers["Content-Type"] = "application/json"\n' "$BODY" > "$WORK/post.lua"

"$BIN" mock --listen 127.0.0.1:0 > "$WORK/mock.out" &
MOCK_PID=$!
for _ in $(seq 50); do grep -q listening "$WORK/mock.out" 2>/dev/null && break; sleep 0.1; done
MOCK=$(sed -n 's/^listening on //p' "$WORK/mock.out")
mkdir -p "$WORK/root/v1/chat"
curl -s "http://$MOCK/v1/chat/completions" -d "$BODY" > "$WORK/root/v1/chat/completions"
SIZE=$(stat -c %s "$WORK/root/v1/chat/completions")

NGINX_PORT=$((20000 + RANDOM % 20000))
cat > "$WORK/nginx.conf" <<CONF
worker_processes auto;
pid $WORK/nginx.pid;
error_log $WORK/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  default_type application/json;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$NGINX_PORT http2;
    location / { root $WORK/root; error_page 405 =200 \$uri; }
  }
}
CONF
# The same port must also take HTTP/1.1 for wrk: nginx 1.22 serves h2c only on an http2 listener,
# so HTTP/1.1 gets its own listener.
NGINX_H1=$((NGINX_PORT + 1))
sed -i "s|listen 127.0.0.1:$NGINX_PORT http2;|listen 127.0.0.1:$NGINX_PORT http2;\n  }\n  server {\n    listen 127.0.0.1:$NGINX_H1;\n    location / { root $WORK/root; error_page 405 =200 \\\$uri; }|" "$WORK/nginx.conf"
nginx -c "$WORK/nginx.conf"
sleep 0.3

echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  machine: $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GiB  response: $SIZE bytes  duration: ${DUR}s per load"
wrk_rps() { wrk -t2 -c64 -d"${DUR}s" --latency -s "$WORK/post.lua" "$1" | awk '/Requests\/sec/{rps=$2} /99%/{p99=$2} END{printf "%s req/s  p99 %s", rps, p99}'; }
h2_rps() { h2load -c8 -m8 -D "$DUR" -d "$WORK/body.json" -H 'content-type: application/json' "$1" 2>/dev/null | awk '/finished in/{rps=$4} /^requests:/{ok=$8} END{printf "%s req/s  (%s ok)", rps, ok}'; }
echo "HTTP/1.1 keep-alive, c=64   mock:  $(wrk_rps "http://$MOCK/v1/chat/completions")"
echo "HTTP/1.1 keep-alive, c=64   nginx: $(wrk_rps "http://127.0.0.1:$NGINX_H1/v1/chat/completions")"
echo "h2c 8 conns x 8 streams     mock:  $(h2_rps "http://$MOCK/v1/chat/completions")"
echo "h2c 8 conns x 8 streams     nginx: $(h2_rps "http://127.0.0.1:$NGINX_PORT/v1/chat/completions")"

# 10,000 concurrent slow streams over h2c (100 connections x 100 streams), each 20 events 1 s
# apart; RSS sampled while all are open.
base_rss=$(awk '/VmRSS/{print $2}' /proc/$MOCK_PID/status)
h2load -c100 -m100 -n10000 -t2 -d "$WORK/body.json" -H 'content-type: application/json' \
  -H 'x-mock: tokens=20, interval_ms=1000' "http://$MOCK/v1/chat/completions" > "$WORK/h2load.out" 2>&1 &
H2L=$!
peak=0; open=0
for _ in $(seq 24); do
  sleep 1
  rss=$(awk '/VmRSS/{print $2}' /proc/$MOCK_PID/status)
  [ "$rss" -gt "$peak" ] && peak=$rss
  now=$(curl -s "http://$MOCK/__mock/stats?totals" | python3 -c 'import json,sys; print(json.load(sys.stdin)["totals"]["in_progress"])')
  [ "$now" -gt "$open" ] && open=$now
  kill -0 $H2L 2>/dev/null || break
done
wait $H2L || true
done_ok=$(awk '/^requests:/{print $8}' "$WORK/h2load.out")
echo "10k slow streams (h2c)      mock: RSS idle $((base_rss/1024)) MiB, peak $((peak/1024)) MiB; max open streams seen $open; completed $done_ok"
