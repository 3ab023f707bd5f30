#!/usr/bin/env bash
# Where a small call's CPU goes, per proxy: user and system time per request (utime and stime
# of all the proxy's processes from /proc over the load) and, with `syscalls`, the system
# calls per request (strace -c -f over a second load). Sluice (HTTP/1.1 upstream, access log
# off), nginx (two workers, access_log off) and HAProxy, each in front of the same
# `sluice mock`, loaded in turn with wrk -t1 -c64, round after round.
#
# usage: bench/cpu-split.sh SLUICE_BIN [rounds=2] [seconds=6] [syscalls]
# Needs wrk, nginx, haproxy (and strace for `syscalls`). Only 127.0.0.1.
set -euo pipefail

BIN=$(realpath "$1")
ROUNDS=${2:-2}
SECS=${3:-6}
SYSCALLS=${4:-}
# shellcheck source=bench/proxies.sh
. "$(dirname "$0")/proxies.sh"
proxies_init sluice-split

"$BIN" mock --listen "$MOCK" >/dev/null 2>&1 &
PIDS+=($!)
start_proxies "$BIN"

cat > "$WORK/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}],"max_tokens":16}'
wrk.headers["Content-Type"] = "application/json"
LUA
for _ in $(seq 100); do curl -s -o /dev/null "http://$GW/healthz" && break; sleep 0.1; done

ticks() { # pids... -> "utime stime" summed
  local u=0 s=0 a b
  for p in "$@"; do
    read -r a b < <(awk '{print $14, $15}' "/proc/$p/stat")
    u=$((u + a)); s=$((s + b))
  done
  echo "$u $s"
}

one() { # name addr pids...
  local name=$1 addr=$2 url out reqs u0 s0 u1 s1
  shift 2
  url="http://$addr/v1/chat/completions"
  wrk -t1 -c64 -d1s -s "$WORK/post.lua" "$url" >/dev/null
  read -r u0 s0 < <(ticks "$@")
  out=$(wrk -t1 -c64 -d"${SECS}s" -s "$WORK/post.lua" "$url")
  read -r u1 s1 < <(ticks "$@")
  reqs=$(echo "$out" | awk '/requests in/ {print $1}')
  awk -v n="$name" -v r="$reqs" -v d="$SECS" -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v hz="$(getconf CLK_TCK)" \
    'BEGIN {printf "%-8s %7.0f req/s   user %5.1f   sys %5.1f   total %5.1f us/request\n", n, r/d, u*1e6/hz/r, s*1e6/hz/r, (u+s)*1e6/hz/r}'
  if [ -n "$SYSCALLS" ]; then
    local args=() p
    for p in "$@"; do args+=(-p "$p"); done
    timeout -s INT $((SECS + 1)) strace -c -f "${args[@]}" -o "$WORK/$name.strace" >/dev/null 2>&1 &
    local sp=$!
    sleep 0.5
    out=$(wrk -t1 -c64 -d"${SECS}s" -s "$WORK/post.lua" "$url")
    wait "$sp" || true
    reqs=$(echo "$out" | awk '/requests in/ {print $1}')
    echo "         system calls per request (strace -c -f):" \
      "$(awk -v r="$reqs" '$1 ~ /^[0-9.]+$/ && NF >= 5 && $4/r >= 0.01 {printf "%s %.2f, ", $NF, $4/r}' "$WORK/$name.strace")"
  fi
}

for r in $(seq "$ROUNDS"); do
  echo "round $r"
  one sluice "$GW" "$GP"
  # shellcheck disable=SC2046
  one nginx "$NG" $(pgrep -P "$(cat "$WORK/nginx.pid")" | tr '\n' ' ')
  one haproxy "$HA" "$(cat "$WORK/haproxy.pid")"
done
