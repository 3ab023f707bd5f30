#!/usr/bin/env bash
# Instructions per small call, counted by valgrind's callgrind (user space only, and steady
# from run to run where wall-clock time on a shared machine is not): the gateway, and nginx
# as a reference, each proxying the same small non-streaming chat calls (wrk -t1 -c8) to one
# `sluice mock` over HTTP/1.1 keep-alive.
#
# usage: bench/instructions.sh SLUICE_BIN [seconds=20] [nginx]
#   EXTRA_CONFIG: TOML appended to the gateway's config (e.g. a [ledger] table); without it
#   the ledger is on, as for any `sluice serve --config FILE` (SQLite next to the config).
#   nginx: also count nginx (one worker, master process off, access_log off).
# Prints instructions per request; leaves the callgrind files in $WORK (printed) for
# `callgrind_annotate`. Needs valgrind and wrk (and nginx for the reference). Only 127.0.0.1.
set -euo pipefail

BIN=$(realpath "$1")
SECS=${2:-20}
WITH_NGINX=${3:-}
WORK=$(mktemp -d /tmp/sluice-instr.XXXXXX)
chmod 755 "$WORK"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

BASE=$((15000 + RANDOM % 15000))   # below the ephemeral port range
MOCK=127.0.0.1:$BASE
GW=127.0.0.1:$((BASE + 1))
NG=127.0.0.1:$((BASE + 2))

"$BIN" mock --listen "$MOCK" >/dev/null 2>&1 &
PIDS+=($!)

cat > "$WORK/gw.toml" <<CONF
[server]
listen = "$GW"
admin_listen = "127.0.0.1:0"
access_log = "off"

[[upstream]]
name = "mock"
base_url = "http://$MOCK/v1"
protocol = "http1"

[[route]]
models = ["*"]
upstream = "mock"
${EXTRA_CONFIG:-}
CONF

cat > "$WORK/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}],"max_tokens":16}'
wrk.headers["Content-Type"] = "application/json"
LUA

wait_up() { # url
  for _ in $(seq 200); do curl -s -o /dev/null "$1" && return 0; sleep 0.2; done
  echo "not up: $1" >&2; return 1
}

count() { # name pid url out
  local name=$1 pid=$2 url=$3 out=$4
  wrk -t1 -c8 -d"${SECS}s" -s "$WORK/post.lua" "$url" > "$WORK/$name.wrk"
  kill -INT "$pid" 2>/dev/null || kill -QUIT "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  local reqs total
  reqs=$(awk '/requests in/ {print $1}' "$WORK/$name.wrk")
  total=$(awk '/^summary:/ {print $2}' "$out")
  echo "$name: $reqs requests, $((total / reqs)) instructions per request ($out)"
}

valgrind --tool=callgrind ${CG_OPTS:-} --callgrind-out-file="$WORK/sluice.cg" "$BIN" serve --config "$WORK/gw.toml" \
  >/dev/null 2>"$WORK/sluice.vg" &
GP=$!
PIDS+=($GP)
wait_up "http://$GW/healthz"
count sluice "$GP" "http://$GW/v1/chat/completions" "$WORK/sluice.cg"

if [ -n "$WITH_NGINX" ]; then
  cat > "$WORK/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  upstream mock { server $MOCK; keepalive 1024; }
  server {
    listen $NG;
    location / {
      proxy_pass http://mock;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
CONF
  valgrind --tool=callgrind --callgrind-out-file="$WORK/nginx.cg" nginx -c "$WORK/nginx.conf" \
    2>"$WORK/nginx.vg" &
  NP=$!
  PIDS+=($NP)
  wait_up "http://$NG/v1/models"
  count nginx "$NP" "http://$NG/v1/chat/completions" "$WORK/nginx.cg"
fi
echo "files: $WORK"
