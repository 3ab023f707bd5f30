#!/usr/bin/env bash
# A/B in one run: the same small-call load through two builds of the gateway, interleaved
# round by round against one mock, so that a noisy machine shifts both alike and the ratio
# holds. Prints req/s, CPU per request (utime+stime of the gateway process over the round,
# from /proc) and p50/p99 for each build, and B/A ratios of the medians.
#
# usage: bench/ab.sh A_BIN B_BIN [rounds=5] [seconds=8] [connections=64] [route_extra]
#   A_BIN, B_BIN: `sluice` binaries (e.g. an older commit's target/release/sluice and HEAD's)
#   route_extra: extra TOML lines for the route (both builds must accept them)
# Env A_SERVER / B_SERVER: extra [server] lines for one side only, to compare two settings of
# one build (e.g. A_SERVER='workers = 0' with the same binary on both sides).
# Env CLIENT=h2load: load with h2load over HTTP/2 (h2c, -m1) for the same time instead of wrk;
# its p50/p99 columns are then the mean and the max (h2load gives no percentiles).
# Env BODY_KB=N: send a chat request of about N KiB (a conversation of English prose with an
# escape every ~40 bytes) instead of the small call; BODY_FILE=path: send that file's bytes.
# Needs wrk. Only 127.0.0.1.
set -euo pipefail
A=${1:?A_BIN}; B=${2:?B_BIN}
ROUNDS=${3:-5}; SECS=${4:-8}; CONNS=${5:-64}; ROUTE_EXTRA=${6:-}
CLIENT=${CLIENT:-wrk}
case "$CLIENT" in
  wrk) command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)"; exit 2; } ;;
  h2load) command -v h2load >/dev/null || { echo "needs h2load (apt-get install nghttp2-client)"; exit 2; } ;;
  *) echo "CLIENT is wrk or h2load"; exit 2 ;;
esac
DIR=$(mktemp -d)
# Waits for the servers to exit, so that a run started right after finds the ports free.
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"' EXIT
MOCK_PORT=19190; PA=19181; PB=19182

"$B" mock --listen 127.0.0.1:$MOCK_PORT >"$DIR/mock.log" 2>&1 &
for i in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$MOCK_PORT/v1/models" && break; sleep 0.1; done

cfg() {
  cat <<CFG
[server]
listen = "127.0.0.1:$1"
$2
[[upstream]]
name = "mock"
base_url = "http://127.0.0.1:$MOCK_PORT/v1"
protocol = "http1"
[[route]]
models = ["*"]
upstream = "mock"
$ROUTE_EXTRA
CFG
}
# Builds with an admin plane get their own port each (older builds have none).
admin() { "$1" serve --help 2>/dev/null | grep -q admin-listen && echo 'admin_listen = "127.0.0.1:0"' || true; }
cfg $PA "$(admin "$A")
${A_SERVER:-}" >"$DIR/a.toml"; cfg $PB "$(admin "$B")
${B_SERVER:-}" >"$DIR/b.toml"
# Each gateway logs every request to a file, as a default deployment would.
"$A" serve --config "$DIR/a.toml" >"$DIR/a.out" 2>"$DIR/a.log" & APID=$!
"$B" serve --config "$DIR/b.toml" >"$DIR/b.out" 2>"$DIR/b.log" & BPID=$!
for p in $PA $PB; do
  for i in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$p/healthz" && break; sleep 0.1; done
done

cat >"$DIR/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}],"max_tokens":16}'
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  io.write(string.format("RESULT %d %.1f %.3f %.3f %d\n", summary.requests,
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
LUA
if [ -n "${BODY_KB:-}" ]; then
  BODY_FILE="$DIR/body.json"
  prose='The gateway forwards each event as it arrives, and a slow client slows only its own stream.\n Retries happen only when no byte reached the client; \"idempotent\" requests may be sent again.\tSee section 4.2 été.\n'
  body='{"model":"gpt-4o","messages":[{"role":"system","content":"You are a helpful assistant."}'
  turn=0
  while [ "${#body}" -lt $((BODY_KB * 1024)) ]; do
    role=user; [ $((turn % 2)) -eq 1 ] && role=assistant
    body+=",{\"role\":\"$role\",\"content\":\"$prose$prose$prose$prose\"}"
    turn=$((turn + 1))
  done
  printf '%s],"max_tokens":16}' "$body" >"$BODY_FILE"
fi
if [ -n "${BODY_FILE:-}" ]; then
  printf 'local f = assert(io.open("%s", "rb"))\nwrk.body = f:read("*a")\nf:close()\n' \
    "$(realpath "$BODY_FILE")" >>"$DIR/post.lua"
fi

# h2load sends a file's bytes: the same body as wrk's.
if [ -z "${BODY_FILE:-}" ]; then
  printf '%s' '{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}],"max_tokens":16}' >"$DIR/small.json"
fi
H2_BODY=${BODY_FILE:-$DIR/small.json}

# One load of SECS seconds at CONNS connections: "RESULT requests req/s p50_ms p99_ms errors".
load() { # port seconds
  if [ "$CLIENT" = wrk ]; then
    wrk -t1 -c"$CONNS" -d"$2s" -s "$DIR/post.lua" "http://127.0.0.1:$1/v1/chat/completions" | grep '^RESULT'
  else
    h2load -t1 -c"$CONNS" -m1 -D "$2" -d "$H2_BODY" -H 'content-type: application/json' \
      "http://127.0.0.1:$1/v1/chat/completions" 2>&1 | awk '
        function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
        /^finished in/ { rps = $4 }
        /^requests:/ { done = $8; failed = $10 + $12 }
        /^time for request:/ { mean = ms($6); max = ms($5) }
        END { printf "RESULT %d %.1f %.3f %.3f %d\n", done, rps, mean, max, failed }'
  fi
}

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

run() { # name pid port
  local t0 t1 out
  t0=$(ticks "$2")
  out=$(load "$3" "$SECS")
  t1=$(ticks "$2")
  read -r _ reqs rps p50 p99 errs <<<"$out"
  local cpu_us; cpu_us=$(awk -v d=$((t1 - t0)) -v hz="$HZ" -v n="$reqs" 'BEGIN { printf "%.1f", d / hz * 1e6 / (n > 0 ? n : 1) }')
  echo "$1 $rps $cpu_us $p50 $p99 $errs" >>"$DIR/results"
  printf '%-2s %10s req/s %8s us/req  p50 %7s ms  p99 %7s ms  errors %s\n' "$1" "$rps" "$cpu_us" "$p50" "$p99" "$errs"
}

# Warm both up (connections, pools, caches), then interleave, alternating who goes first.
load "$PA" 2 >/dev/null
load "$PB" 2 >/dev/null
for r in $(seq "$ROUNDS"); do
  if (( r % 2 )); then run A $APID $PA; run B $BPID $PB; else run B $BPID $PB; run A $APID $PA; fi
done

awk '
  { rps[$1] = rps[$1] " " $2; cpu[$1] = cpu[$1] " " $3; p50[$1] = p50[$1] " " $4; p99[$1] = p99[$1] " " $5 }
  function median(s,   a, n, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  END {
    printf "\nmedians      req/s    us CPU/req   p50 ms   p99 ms\n"
    for (k in rps) printf "%-6s %10.0f %12.1f %8.3f %8.3f\n", k, median(rps[k]), median(cpu[k]), median(p50[k]), median(p99[k])
    printf "B/A    %10.3f %12.3f %8.3f %8.3f\n", median(rps["B"]) / median(rps["A"]), median(cpu["B"]) / median(cpu["A"]), median(p50["B"]) / median(p50["A"]), median(p99["B"]) / median(p99["A"])
  }' "$DIR/results"
