#!/usr/bin/env bash
# The gateway's cost in the path, measured in one run side by side with direct-to-mock, nginx and
# HAProxy as plain SSE-friendly reverse proxies in front of the same mock.
#
# Usage: bench/compare.sh [SECONDS] [--with-litellm]   (default 10 s per throughput load; loopback only)
#   --with-litellm also runs LiteLLM's proxy (from PyPI, cached in .bench-venv/) against the same mock.
#   (LiteLLM forwards `x-pass-*` headers with the prefix stripped, so every request carries its
#   `x-mock` behaviour twice; the other proxies pass `x-mock` itself, and the mock ignores the
#   copy. The bearer key is LiteLLM's master key; the others forward it and the mock ignores it.)
# Needs: nginx, haproxy, wrk, h2load (Debian: nginx-light haproxy wrk nghttp2-client; installed
# when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=10
WITH_LITELLM=0
for arg in "$@"; do
  case "$arg" in
    --with-litellm) WITH_LITELLM=1 ;;
    *) DUR=$arg ;;
  esac
done
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
for tool in nginx haproxy wrk h2load curl; do
  if ! command -v "$tool" >/dev/null; then
    apt-get update -qq && apt-get install -y -qq nginx-light haproxy wrk nghttp2-client curl >/dev/null
    break
  fi
done
cargo build --release -q -p sluice
BIN=target/release/sluice
WORK=$(mktemp -d)
chmod 755 "$WORK"   # nginx workers run as www-data
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null
  [ -f "$WORK/haproxy.pid" ] && kill "$(cat "$WORK/haproxy.pid")" 2>/dev/null
  pkill -f "litellm --config $WORK" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_line() { for _ in $(seq 100); do grep -q listening "$1" 2>/dev/null && break; sleep 0.1; done; sed -n 's/^listening on //p' "$1"; }

"$BIN" mock --listen 127.0.0.1:0 --max-records 200000 > "$WORK/mock.out" &
MOCK=$(wait_line "$WORK/mock.out")

cat > "$WORK/sluice.toml" <<CONF
[server]
listen = "127.0.0.1:0"
[[upstream]]
name = "mock"
base_url = "http://$MOCK/v1"
protocol = "h2c"
# Room for 10,000 concurrent streams (200 x 50); short calls spread over connections of 16.
pool = { stream = { max_connections = 200, max_streams_per_connection = 50, max_pending = 10000 }, short = { max_connections = 16, max_streams_per_connection = 16 } }
[[route]]
models = ["*"]
upstream = "mock"
CONF
RUST_LOG=warn "$BIN" serve --config "$WORK/sluice.toml" > "$WORK/gw.out" 2> "$WORK/gw.err" &
GW_PID=$!
GW=$(wait_line "$WORK/gw.out")
# The same gateway with an HTTP/1.1 upstream: for small calls the protocol is the difference.
sed 's/protocol = "h2c"/protocol = "http1"/' "$WORK/sluice.toml" > "$WORK/sluice-h1.toml"
RUST_LOG=warn "$BIN" serve --config "$WORK/sluice-h1.toml" > "$WORK/gw1.out" 2> "$WORK/gw1.err" &
GW1=$(wait_line "$WORK/gw1.out")

NGINX=127.0.0.1:$((20000 + RANDOM % 20000))
NGINX_H2=127.0.0.1:$((${NGINX#*:} + 1))
cat > "$WORK/nginx.conf" <<CONF
worker_processes auto;
worker_rlimit_nofile 65536;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 30000; }
http {
  access_log off;
  upstream mock { server $MOCK; keepalive 1024; }
  server {
    listen $NGINX;
    listen $NGINX_H2 http2;
    location / {
      proxy_pass http://mock;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_cache off;
      proxy_read_timeout 600s;
    }
  }
}
CONF
nginx -c "$WORK/nginx.conf"

HAPROXY=127.0.0.1:$((${NGINX#*:} + 2))
HAPROXY_H2=127.0.0.1:$((${NGINX#*:} + 3))
cat > "$WORK/haproxy.cfg" <<CONF
global
  # Two descriptors per proxied connection; the workplace caps a process at 20,000.
  maxconn 9000
  pidfile $WORK/haproxy.pid
defaults
  mode http
  # Forward small SSE chunks at once instead of waiting to merge them (HAProxy delays them
  # otherwise: ~200 ms to first event and to cancel in a first run).
  option http-no-delay
  timeout connect 5s
  timeout client 600s
  timeout server 600s
frontend fe
  bind $HAPROXY
  bind $HAPROXY_H2 proto h2
  default_backend mock
backend mock
  http-reuse always
  server m $MOCK maxconn 9000
CONF
haproxy -D -f "$WORK/haproxy.cfg"
sleep 0.3

LITELLM=""
LITELLM_KEY=sk-bench-compare
if [ "$WITH_LITELLM" = 1 ]; then
  if [ ! -x .bench-venv/litellm/bin/litellm ]; then
    python3 -m venv .bench-venv/litellm
    .bench-venv/litellm/bin/pip install --quiet --disable-pip-version-check 'litellm[proxy]'
  fi
  printf 'model_list:\n  - model_name: gpt-4o\n    litellm_params:\n      model: openai/gpt-4o\n      api_base: http://%s/v1\n      api_key: sk-mock\n' "$MOCK" > "$WORK/litellm.yaml"
  LITELLM=127.0.0.1:$((${NGINX#*:} + 4))
  (cd "$WORK" && LITELLM_MASTER_KEY=$LITELLM_KEY "$OLDPWD/.bench-venv/litellm/bin/litellm" --config "$WORK/litellm.yaml" \
    --host 127.0.0.1 --port "${LITELLM#*:}" --num_workers 1 > "$WORK/litellm.log" 2>&1 &)
  for _ in $(seq 120); do curl -s "http://$LITELLM/health/liveliness" >/dev/null 2>&1 && break; sleep 1; done
fi

BODY='{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'
printf 'wrk.method = "POST"\nwrk.body = [[%s]]\nwrk.headers["Content-Type"] = "application/json"\nwrk.headers["Authorization"] = "Bearer %s"\n' "$BODY" "$LITELLM_KEY" > "$WORK/post.lua"
printf '{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}' > "$WORK/stream.json"

echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  machine: $(nproc) cores  sluice upstream: h2c; nginx and haproxy upstream: HTTP/1.1 keep-alive"
echo
echo "## small non-streaming requests, HTTP/1.1 keep-alive, 64 connections (wrk, ${DUR}s)"
wrk_line() { wrk -t2 -c64 -d"${DUR}s" --latency -s "$WORK/post.lua" "$2" | awk -v out="$WORK/rps.$1" '/Requests\/sec/{rps=$2} /99%/{p99=$2} /Non-2xx/{bad=$NF} END{printf "%10s req/s  p99 %8s  non-2xx %d", rps, p99, bad; print rps > out}'; }
echo "direct : $(wrk_line direct "http://$MOCK/v1/chat/completions")"
echo "sluice : $(wrk_line sluice "http://$GW/v1/chat/completions")   (h2c upstream)"
echo "sluice1: $(wrk_line sluice1 "http://$GW1/v1/chat/completions")   (HTTP/1.1 upstream)"
echo "nginx  : $(wrk_line nginx "http://$NGINX/v1/chat/completions")"
echo "haproxy: $(wrk_line haproxy "http://$HAPROXY/v1/chat/completions")"
[ -n "$LITELLM" ] && echo "litellm: $(wrk_line litellm "http://$LITELLM/v1/chat/completions")"
ratio() { awk -v a="$(cat "$WORK/rps.$1")" -v b="$(cat "$WORK/rps.$2")" 'BEGIN{printf "%.2fx", a/b}'; }
echo "ratios : sluice/direct $(ratio sluice direct), sluice/nginx $(ratio sluice nginx), sluice/haproxy $(ratio sluice haproxy); HTTP/1.1 upstream: sluice1/nginx $(ratio sluice1 nginx)"

echo
echo "## 1,000 concurrent streams (HTTP/1.1 clients, 5 tokens 100 ms apart, ramp 2 s): first event"
stream_line() {
  "$BIN" bench stream --url "http://$1/v1/chat/completions" -c 1000 -n 1000 --ramp 2s \
    -H 'x-mock: tokens=5, interval_ms=100' -H 'x-pass-x-mock: tokens=5, interval_ms=100' \
    -H "authorization: Bearer $LITELLM_KEY" --max-error-rate 1 --json |
    python3 -c 'import json,sys; r=json.load(sys.stdin); t=r["ttfb"]; f=r["first_event"]; print("completed %5d errors %d  ttfb p50 %.2f p99 %.2f ms   first event p50 %.2f p99 %.2f ms" % (r["completed"], r["errors"]+r["timeouts"], t["p50_ms"], t["p99_ms"], f["p50_ms"], f["p99_ms"]))'
}
echo "direct : $(stream_line "$MOCK")"
echo "sluice : $(stream_line "$GW")"
echo "nginx  : $(stream_line "$NGINX")"
echo "haproxy: $(stream_line "$HAPROXY")"
[ -n "$LITELLM" ] && echo "litellm: $(stream_line "$LITELLM")"

echo
echo "## disconnect -> upstream cancel (200 concurrent, 1,000 streams closed after 3 events)"
cancel_line() {
  "$BIN" bench stream --url "http://$1/v1/chat/completions" -c 200 -n 1000 --ramp 500ms \
    -H 'x-mock: tokens=1000, interval_ms=20' -H 'x-pass-x-mock: tokens=1000, interval_ms=20' \
    -H "authorization: Bearer $LITELLM_KEY" --close-after-events 3 \
    --mock-stats "http://$MOCK/__mock/stats" --max-error-rate 1 --json |
    python3 -c 'import json,sys; r=json.load(sys.stdin); c=r["cancel_latency"] or {}; print("closed %5d  cancel seen by upstream: p50 %.2f p99 %.2f max %.2f ms (n=%d)" % (r["closed_early"], c.get("p50_ms",-1), c.get("p99_ms",-1), c.get("max_ms",-1), c.get("count",0)))'
  curl -s -X POST "http://$MOCK/__mock/reset" > /dev/null
}
curl -s -X POST "http://$MOCK/__mock/reset" > /dev/null
echo "direct : $(cancel_line "$MOCK")"
echo "sluice : $(cancel_line "$GW")"
echo "nginx  : $(cancel_line "$NGINX")"
echo "haproxy: $(cancel_line "$HAPROXY")"
[ -n "$LITELLM" ] && echo "litellm: $(cancel_line "$LITELLM")"

echo
echo "## 10,000 concurrent slow streams (h2c clients: 100 connections x 100 streams; 20 events 1 s apart)"
rss_line() {
  local pidlist=$1 url=$2
  local base peak=0 now
  base=$(for p in $pidlist; do awk '/VmRSS/{print $2}' /proc/$p/status; done | awk '{s+=$1} END{print s}')
  h2load -c100 -m100 -n10000 -t2 -d "$WORK/stream.json" -H 'content-type: application/json' \
    -H 'x-mock: tokens=20, interval_ms=1000' "$url" > "$WORK/h2load.out" 2>&1 &
  local h2l=$!
  for _ in $(seq 40); do
    sleep 1
    now=$(for p in $pidlist; do awk '/VmRSS/{print $2}' /proc/$p/status; done | awk '{s+=$1} END{print s}')
    [ "$now" -gt "$peak" ] && peak=$now
    kill -0 $h2l 2>/dev/null || break
  done
  wait $h2l || true
  echo "RSS before $((base/1024)) MiB, peak $((peak/1024)) MiB; 2xx $(awk '/^status codes:/{print $3}' "$WORK/h2load.out") of 10000"
}
echo "sluice : $(rss_line "$GW_PID" "http://$GW/v1/chat/completions")"
NGINX_PIDS=$(pgrep -f "nginx: worker process" | tr '\n' ' '; cat "$WORK/nginx.pid")
echo "nginx  : $(rss_line "$NGINX_PIDS" "http://$NGINX_H2/v1/chat/completions")"
echo "haproxy: (not run: 10,000 streams need 20,000+ descriptors, above this machine's limit of $(ulimit -Hn))"
[ -n "$LITELLM" ] && echo "litellm: (not run: its server speaks no h2c, and 10,000 HTTP/1.1 streams into one Python worker is not a fair fight)"
true
