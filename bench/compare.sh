#!/usr/bin/env bash
# The gateway's cost in the path, measured in one run side by side with direct-to-mock, nginx and
# HAProxy as plain SSE-friendly reverse proxies in front of the same mock (HTTP/1.1 keep-alive
# upstream pools for all three; Sluice also with an h2c upstream).
#
# Usage: bench/compare.sh [SECONDS] [--with-litellm]   (default 8 s per throughput load; loopback only)
#   --with-litellm also runs LiteLLM's proxy (from PyPI, cached in .bench-venv/) on the small calls.
#   ROUNDS=N (env, default 3): sections 1 and 3 run every target N times, the targets taking turns
#   round by round, and print each column's median (a window where the machine is busy then
#   hits every target once instead of one target's whole run); ROUNDS=1 is one pass.
#
# What it prints (docs/BENCHMARKS.md holds a run):
#   1. small non-streaming calls, HTTP/1.1 keep-alive clients (wrk -t1 -c64): req/s, p50/p99 and
#      CPU time per request of each proxy (utime+stime from /proc/PID/stat over the load,
#      all of its processes), once with every proxy logging each request (nginx access_log
#      with buffer=64k, HAProxy `option httplog` to a file, Sluice's access log to a file) and
#      once with logging off everywhere; Sluice also with `server.workers` = the core count
#      (`sluice-w`: connections pinned to threads, opt-in);
#   2. the same with HTTP/2 clients (h2load, prior-knowledge h2c; nginx `listen ... http2`);
#   3. added latency over direct at concurrency 4, 16 and 64 (wrk, persistent connections,
#      logging off): p50 and p99;
#   4. 1,000 concurrent streams through an HTTP/1.1 upstream with Sluice's default config, and
#      through h2c with its default config (all must succeed);
#   5. 10,000 concurrent slow streams (h2c clients): peak RSS of Sluice and nginx.
# Needs: nginx, haproxy, wrk, h2load (Debian: nginx-light haproxy wrk nghttp2-client; installed
# when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=8
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
  for f in nginx nginx-log; do [ -f "$WORK/$f.pid" ] && kill "$(cat "$WORK/$f.pid")" 2>/dev/null; done
  pkill -f "haproxy -f $WORK" 2>/dev/null || true
  pkill -f "litellm --config $WORK" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_line() { for _ in $(seq 100); do grep -q listening "$1" 2>/dev/null && break; sleep 0.1; done; sed -n 's/^listening on //p' "$1"; }

"$BIN" mock --listen 127.0.0.1:0 --max-records 200000 > "$WORK/mock.out" &
MOCK_PID=$!
MOCK=$(wait_line "$WORK/mock.out")

# Sluice: the default config over an HTTP/1.1 upstream (the README's first example), with its
# access log to a file or off; the same over h2c; and h2c with room for 10,000 streams.
sluice_conf() { # name protocol access_log [extra upstream line] [extra server line]
  cat > "$WORK/$1.toml" <<CONF
[server]
listen = "127.0.0.1:0"
access_log = "$3"
${5:-}
[[upstream]]
name = "mock"
base_url = "http://$MOCK/v1"
protocol = "$2"
${4:-}
[[route]]
models = ["*"]
upstream = "mock"
CONF
  RUST_LOG=warn "$BIN" serve --config "$WORK/$1.toml" > "$WORK/$1.out" 2> "$WORK/$1.err" &
  echo $! > "$WORK/$1.pid"
}
sluice_conf sluice-h1-log http1 "$WORK/sluice-access.log"
sluice_conf sluice-h1 http1 off
# The same with connections pinned to one thread per core (`server.workers`, opt-in).
sluice_conf sluice-w-log http1 "$WORK/sluice-w-access.log" "" "workers = $(nproc)"
sluice_conf sluice-w http1 off "" "workers = $(nproc)"
sluice_conf sluice-h2c-log h2c "$WORK/sluice-h2c-access.log"
sluice_conf sluice-h2c h2c off
sluice_conf sluice-10k h2c off \
  'pool = { stream = { max_connections = 200, max_streams_per_connection = 50, max_pending = 10000 }, short = { max_connections = 16, max_streams_per_connection = 16 } }'
for g in sluice-h1-log sluice-h1 sluice-w-log sluice-w sluice-h2c-log sluice-h2c sluice-10k; do
  eval "ADDR_${g//-/_}=$(wait_line "$WORK/$g.out")"
done

BASE=$((20000 + RANDOM % 20000))
nginx_conf() { # name port access_log_line
  cat > "$WORK/$1.conf" <<CONF
worker_processes auto;
worker_rlimit_nofile 65536;
pid $WORK/$1.pid;
error_log $WORK/$1-error.log;
events { worker_connections 30000; }
http {
  $3
  upstream mock { server $MOCK; keepalive 1024; }
  server {
    listen 127.0.0.1:$2;
    listen 127.0.0.1:$(($2 + 1)) http2;
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
  nginx -c "$WORK/$1.conf"
}
nginx_conf nginx $BASE "access_log off;"
nginx_conf nginx-log $((BASE + 2)) "access_log $WORK/nginx-access.log combined buffer=64k flush=1s;"

haproxy_conf() { # name port log(0/1)
  local glog="" dlog=""
  if [ "$3" = 1 ]; then glog="log stdout format raw local0"; dlog=$'log global\n  option httplog'; fi
  cat > "$WORK/$1.cfg" <<CONF
global
  # Two descriptors per proxied connection; the workplace caps a process at 20,000.
  maxconn 9000
  $glog
defaults
  mode http
  $dlog
  # Forward small SSE chunks at once instead of waiting to merge them.
  option http-no-delay
  timeout connect 5s
  timeout client 600s
  timeout server 600s
frontend fe
  bind 127.0.0.1:$2
  bind 127.0.0.1:$(($2 + 1)) proto h2
  default_backend mock
backend mock
  http-reuse always
  server m $MOCK maxconn 9000
CONF
  haproxy -f "$WORK/$1.cfg" -db > "$WORK/$1-access.log" 2> "$WORK/$1.err" &
  echo $! > "$WORK/$1.pid.h"
}
haproxy_conf haproxy $((BASE + 4)) 0
haproxy_conf haproxy-log $((BASE + 6)) 1
sleep 0.5

LITELLM=""
LITELLM_KEY=sk-bench-compare
if [ "$WITH_LITELLM" = 1 ]; then
  if [ ! -x .bench-venv/litellm/bin/litellm ]; then
    python3 -m venv .bench-venv/litellm
    .bench-venv/litellm/bin/pip install --quiet --disable-pip-version-check 'litellm[proxy]'
  fi
  printf 'model_list:\n  - model_name: gpt-4o\n    litellm_params:\n      model: openai/gpt-4o\n      api_base: http://%s/v1\n      api_key: sk-mock\n' "$MOCK" > "$WORK/litellm.yaml"
  LITELLM=127.0.0.1:$((BASE + 8))
  (cd "$WORK" && LITELLM_MASTER_KEY=$LITELLM_KEY "$OLDPWD/.bench-venv/litellm/bin/litellm" --config "$WORK/litellm.yaml" \
    --host 127.0.0.1 --port "${LITELLM#*:}" --num_workers 1 > "$WORK/litellm.log" 2>&1 &)
  for _ in $(seq 120); do curl -s "http://$LITELLM/health/liveliness" >/dev/null 2>&1 && break; sleep 1; done
fi

# name -> "h1 address|h2 address|pids"
target() {
  case "$1" in
    direct) echo "$MOCK|$MOCK|$MOCK_PID" ;;
    sluice|sluice-log) local g=sluice-h1; [ "$1" = sluice-log ] && g=sluice-h1-log
      local v="ADDR_${g//-/_}"; echo "${!v}|${!v}|$(cat "$WORK/$g.pid")" ;;
    sluice-w|sluice-w-log|sluice-h2c|sluice-h2c-log) local v="ADDR_${1//-/_}"; echo "${!v}|${!v}|$(cat "$WORK/$1.pid")" ;;
    nginx|nginx-log) local p; p=$(sed -n 's/.*listen 127.0.0.1:\([0-9]*\);/\1/p' "$WORK/$1.conf" | head -1)
      echo "127.0.0.1:$p|127.0.0.1:$((p + 1))|$(cat "$WORK/$1.pid") $(pgrep -P "$(cat "$WORK/$1.pid")" | tr '\n' ' ')" ;;
    haproxy|haproxy-log) local p; p=$(sed -n 's/^  bind 127.0.0.1:\([0-9]*\)$/\1/p' "$WORK/$1.cfg" | head -1)
      echo "127.0.0.1:$p|127.0.0.1:$((p + 1))|$(cat "$WORK/$1.pid.h")" ;;
    litellm) echo "$LITELLM|$LITELLM|$(pgrep -f "litellm --config $WORK" | tr '\n' ' ')" ;;
  esac
}
cpu_ticks() { local s=0 p; for p in $1; do s=$((s + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done; echo $s; }
TCK=$(getconf CLK_TCK)

BODY='{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'
printf 'wrk.method = "POST"\nwrk.body = [[%s]]\nwrk.headers["Content-Type"] = "application/json"\nwrk.headers["Authorization"] = "Bearer %s"\n' "$BODY" "$LITELLM_KEY" > "$WORK/post.lua"
printf '%s' "$BODY" > "$WORK/small.json"
printf '{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}' > "$WORK/stream.json"

# wrk over HTTP/1.1: "req/s p50 p99 cpu_us_per_req"; CPU of the proxy's processes over the load.
h1_load() { # name conns secs
  local t addr pids c0 c1 out
  t=$(target "$1"); addr=${t%%|*}; pids=${t##*|}
  c0=$(cpu_ticks "$pids")
  out=$(wrk -t1 -c"$2" -d"$3s" --latency -s "$WORK/post.lua" "http://$addr/v1/chat/completions")
  c1=$(cpu_ticks "$pids")
  echo "$out" | awk -v c=$((c1 - c0)) -v tck="$TCK" -v secs="$3" '
    function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
    /Requests\/sec/ { rps = $2 } / 50%/ { p50 = ms($2) } / 99%/ { p99 = ms($2) } /Non-2xx/ { bad = $NF }
    END { n = rps * secs; printf "%9.0f %8.3f %8.3f %8.1f %6d\n", rps, p50, p99, (n > 0 ? c / tck * 1e6 / n : 0), bad }'
}
# h2load, prior-knowledge h2c: 64 connections, 1 stream each, for a fixed number of requests.
h2_load() { # name requests
  local t rest addr pids c0 c1 out
  t=$(target "$1"); rest=${t#*|}; addr=${rest%%|*}; pids=${t##*|}
  c0=$(cpu_ticks "$pids")
  out=$(h2load -c64 -m1 -t1 -n"$2" -d "$WORK/small.json" -H 'content-type: application/json' "http://$addr/v1/chat/completions" 2>&1)
  c1=$(cpu_ticks "$pids")
  echo "$out" | awk -v c=$((c1 - c0)) -v tck="$TCK" '
    function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
    /^finished in/ { rps = $4 } /^requests:/ { ok = $8 } /^status codes:/ { s2 = $3 }
    /^time for request:/ { mean = ms($6) }
    END { printf "%9.0f %8.3f %8s %8.1f %6d\n", rps, mean, "-", (ok > 0 ? c / tck * 1e6 / ok : 0), ok - s2 }'
}

echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  commit: $(git rev-parse --short HEAD 2>/dev/null || echo ?)  machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "upstream: the same sluice mock; nginx and HAProxy: HTTP/1.1 keep-alive pools; Sluice: HTTP/1.1 (default config) unless h2c"
TARGETS_LOG="direct sluice-log sluice-w-log sluice-h2c-log nginx-log haproxy-log"
TARGETS_OFF="direct sluice sluice-w sluice-h2c nginx haproxy"
[ -n "$LITELLM" ] && TARGETS_OFF="$TARGETS_OFF litellm"

ROUNDS=${ROUNDS:-3}
# The median of each column over the rounds' result lines in $1 (one line per round).
median_row() {
  awk '{ for (i = 1; i <= NF; i++) v[i, NR] = $i; nf = NF }
    END { for (i = 1; i <= nf; i++) { n = 0; for (r = 1; r <= NR; r++) a[++n] = v[i, r]
            for (x = 2; x <= n; x++) { k = a[x]; y = x - 1; while (y > 0 && a[y] + 0 > k + 0) { a[y + 1] = a[y]; y-- } a[y + 1] = k }
            m[i] = (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2) }
          printf "%9.0f %8.3f %8.3f %8.1f %6d\n", m[1], m[2], m[3], m[4], m[5] }' "$1"
}
# The lowest and highest req/s over the rounds, to show the spread.
spread() { awk 'NR == 1 || $1 < lo { lo = $1 } NR == 1 || $1 > hi { hi = $1 } END { printf "%6.0f-%-6.0f", lo, hi }' "$1"; }
for mode in on off; do
  echo
  echo "## small non-streaming calls, HTTP/1.1 keep-alive clients (wrk -t1 -c64, ${DUR}s), logging $mode; median of $ROUNDS rounds"
  printf '%-15s %9s %8s %8s %8s %6s  %s\n' target req/s p50_ms p99_ms cpu_us/req non2xx "req/s range"
  list=$TARGETS_LOG; [ "$mode" = off ] && list=$TARGETS_OFF
  for r in $(seq "$ROUNDS"); do
    for t in $list; do h1_load "$t" 64 "$DUR" >> "$WORK/h1.$mode.$t.rounds"; done
  done
  for t in $list; do
    median_row "$WORK/h1.$mode.$t.rounds" > "$WORK/h1.$mode.$t"
    printf '%-15s %s  %s\n' "$t" "$(cat "$WORK/h1.$mode.$t")" "$(spread "$WORK/h1.$mode.$t.rounds")"
  done
done
ratio() { awk -v a="$(cut -c1-9 "$WORK/$1")" -v b="$(cut -c1-9 "$WORK/$2")" 'BEGIN{ printf "%.2fx", (b > 0 ? a / b : 0) }'; }
echo "ratios (req/s): logging on: sluice/nginx $(ratio h1.on.sluice-log h1.on.nginx-log), sluice/haproxy $(ratio h1.on.sluice-log h1.on.haproxy-log);" \
  "off: sluice/nginx $(ratio h1.off.sluice h1.off.nginx), sluice/haproxy $(ratio h1.off.sluice h1.off.haproxy);" \
  "sluice logging on/off $(ratio h1.on.sluice-log h1.off.sluice);" \
  "with workers = $(nproc): on: /nginx $(ratio h1.on.sluice-w-log h1.on.nginx-log), /haproxy $(ratio h1.on.sluice-w-log h1.on.haproxy-log);" \
  "off: /nginx $(ratio h1.off.sluice-w h1.off.nginx), /haproxy $(ratio h1.off.sluice-w h1.off.haproxy)"

N2=$((DUR * 20000))
for mode in on off; do
  echo
  echo "## small non-streaming calls, HTTP/2 clients (h2load -c64 -m1, $N2 requests), logging $mode"
  printf '%-15s %9s %8s %8s %8s %6s\n' target req/s mean_ms - cpu_us/req failed
  list=$TARGETS_LOG; [ "$mode" = off ] && list=$TARGETS_OFF
  for t in $list; do
    [ "$t" = litellm ] && continue
    printf '%-15s %s\n' "$t" "$(h2_load "$t" "$N2")"
  done
done

echo
LAT=${LAT_SECS:-5}
echo "## added latency over direct (wrk -t1, persistent connections, $LAT s each, logging off): p50 / p99 ms, median of $ROUNDS rounds"
printf '%-6s' conns; for t in $TARGETS_OFF; do [ "$t" = litellm ] && continue; printf ' %21s' "$t"; done; echo
for c in 4 16 64; do
  printf '%-6s' "$c"
  for r in $(seq "$ROUNDS"); do
    for t in $TARGETS_OFF; do
      [ "$t" = litellm ] && continue
      h1_load "$t" "$c" "$LAT" >> "$WORK/lat.$c.$t.rounds"
    done
  done
  for t in $TARGETS_OFF; do
    [ "$t" = litellm ] && continue
    median_row "$WORK/lat.$c.$t.rounds" > "$WORK/lat.$c.$t"
    printf ' %10s/%10s' "$(awk '{print $2}' "$WORK/lat.$c.$t")" "$(awk '{print $3}' "$WORK/lat.$c.$t")"
  done
  echo
  printf '%-6s' "+"
  for t in $TARGETS_OFF; do
    [ "$t" = litellm ] && continue
    awk -v d="$(cat "$WORK/lat.$c.direct")" '{ split(d, x, " "); printf " %+10.3f/%+10.3f", $2 - x[2], $3 - x[3] }' "$WORK/lat.$c.$t"
  done
  echo
done

echo
echo "## 1,000 concurrent streams (HTTP/1.1 clients, 5 tokens 100 ms apart, ramp 2 s), default configs"
stream_line() {
  "$BIN" bench stream --url "http://$1/v1/chat/completions" -c 1000 -n 1000 --ramp 2s \
    -H 'x-mock: tokens=5, interval_ms=100' --max-error-rate 1 --json |
    python3 -c 'import json,sys; r=json.load(sys.stdin); f=r["first_event"]; print("completed %5d of 1000, errors %d   first event p50 %.2f p99 %.2f ms" % (r["completed"], r["errors"]+r["timeouts"], f["p50_ms"], f["p99_ms"]))'
}
echo "direct           : $(stream_line "$MOCK")"
echo "sluice (h1 up)   : $(stream_line "$ADDR_sluice_h1")"
echo "sluice (h2c up)  : $(stream_line "$ADDR_sluice_h2c")"
echo "nginx            : $(stream_line "$(target nginx | cut -d'|' -f1)")"
echo "haproxy          : $(stream_line "$(target haproxy | cut -d'|' -f1)")"

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
if [ -n "${SKIP_RSS:-}" ]; then echo "(skipped: SKIP_RSS set)"; else
echo "sluice : $(rss_line "$(cat "$WORK/sluice-10k.pid")" "http://$ADDR_sluice_10k/v1/chat/completions")"
t=$(target nginx); rest=${t#*|}
echo "nginx  : $(rss_line "${t##*|}" "http://${rest%%|*}/v1/chat/completions")"
echo "haproxy: (not run: 10,000 streams need 20,000+ descriptors, above this machine's limit of $(ulimit -Hn))"
fi
echo
echo "access log lines written: sluice $(wc -l < "$WORK/sluice-access.log"), nginx $(wc -l < "$WORK/nginx-access.log"), haproxy $(wc -l < "$WORK/haproxy-log-access.log")"
grep -h -i -E 'warn|error' "$WORK"/sluice-*.err | head -5 || true
