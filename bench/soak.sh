#!/usr/bin/env bash
# Soak: the gateway under mixed load for a long while, sampled every 10 s, to show that nothing
# grows without bound (memory, descriptors, tasks) and that latency holds.
#
# Load, all at once, against a gateway in front of the mock (loopback only):
#   - small calls: `sluice bench rps`, an open loop at RATE/s, in 10 s slices (each slice's p99
#     is the sample's p99);
#   - streams: `sluice bench stream`, STREAMS at once, 10 % of them cancelled after 3 events;
#   - a few slow readers (streams read at ~200 B/s) and slow writers (bodies at 10 B/s),
#     restarted as the gateway cuts them (bench/slow_clients.py).
# Every 10 s one line: seconds, RSS (KiB), open descriptors, runtime tasks, client connections,
# active streams, body budget in use, and the last slice's rps, p99 and errors. A JSON summary
# follows (first and last samples, maxima).
#
# Usage: bench/soak.sh [SECONDS] [RATE] [STREAMS]      (default 600 s, 200/s, 50 streams)
#   SLUICE_BIN: the binary (default target/release/sluice, built when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-600}
RATE=${2:-200}
STREAMS=${3:-50}
BIN=${SLUICE_BIN:-target/release/sluice}
[ -x "$BIN" ] || cargo build --release -q -p sluice
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_line() { for _ in $(seq 100); do grep -q listening "$1" 2>/dev/null && break; sleep 0.1; done; sed -n 's/^listening on //p' "$1"; }

"$BIN" mock --listen 127.0.0.1:0 --max-records 10000 > "$WORK/mock.out" 2>&1 &
PIDS+=($!)
MOCK=$(wait_line "$WORK/mock.out")
cat > "$WORK/gw.toml" <<CONF
[server]
listen = "127.0.0.1:0"
access_log = "$WORK/access.log"
client_timeouts = { body_idle = "10s", send = "20s" }
[[upstream]]
name = "mock"
base_url = "http://$MOCK/v1"
protocol = "h2c"
[[route]]
models = ["*"]
upstream = "mock"
CONF
"$BIN" serve "$WORK/gw.toml" > "$WORK/gw.out" 2> "$WORK/gw.err" &
GW_PID=$!
PIDS+=($GW_PID)
GW=$(wait_line "$WORK/gw.out")
# The metrics are on the admin plane (its address is the second line).
for _ in $(seq 50); do grep -q '^admin on' "$WORK/gw.out" && break; sleep 0.1; done
ADMIN=$(sed -n 's/^admin on //p' "$WORK/gw.out")
URL="http://$GW/v1/chat/completions"
END=$((SECONDS + DUR))

# Small calls, in 10 s slices: each slice's JSON report is one line of rps.jsonl.
(
  while [ $SECONDS -lt $END ]; do
    "$BIN" bench rps --url "$URL" --rate "$RATE" --duration-s 10 --timeout-ms 5000 --json \
      2>/dev/null | tr -d '\n' >> "$WORK/rps.jsonl" || true
    echo >> "$WORK/rps.jsonl"
  done
) &
PIDS+=($!)
# Streams, 10 % cancelled.
(
  while [ $SECONDS -lt $END ]; do
    "$BIN" bench stream --url "$URL" -c "$STREAMS" -n $((STREAMS * 4)) --ramp-ms 2000 \
      -H 'x-mock: tokens=40, interval_ms=100' --close-after-events 3 --close-share 0.1 \
      --max-duration-s 60 --json > /dev/null 2>&1 || true
  done
) &
PIDS+=($!)
# Slow readers and writers, restarted when cut.
for mode in slow-read slow-write; do
  (
    while [ $SECONDS -lt $END ]; do
      python3 bench/slow_clients.py "$GW" "$mode" 3 60 >> "$WORK/slow.jsonl" 2>/dev/null || true
    done
  ) &
  PIDS+=($!)
done

metric() { awk -v m="$1" '$1 == m {print $2}' "$WORK/metrics"; }
printf '%6s %9s %6s %7s %6s %7s %10s %7s %9s %6s\n' s rss_kib fds tasks conns streams budget rps p99_ms errors
START=$SECONDS
: > "$WORK/samples.tsv"
while [ $SECONDS -lt $END ]; do
  sleep 10
  curl -s "http://$ADMIN/metrics" > "$WORK/metrics" || true
  RSS=$(awk '/VmRSS/{print $2}' "/proc/$GW_PID/status")
  FDS=$(ls "/proc/$GW_PID/fd" | wc -l)
  TASKS=$(metric sluice_runtime_alive_tasks)
  CONNS=$(metric sluice_client_connections)
  ACTIVE=$(metric sluice_active_streams)
  BUDGET=$(metric sluice_body_budget_used_bytes)
  LAST=$(grep -v '^$' "$WORK/rps.jsonl" 2>/dev/null | tail -1 || true)
  RPS=$(printf '%s' "$LAST" | python3 -c 'import json,sys
try:
  d=json.load(sys.stdin); print(round(d.get("throughput_per_s", 0),1), round(d["latency"]["p99_ms"],1) if "latency" in d else d.get("p99_ms","-"), d.get("errors",0)+d.get("timeouts",0))
except Exception: print("- - -")')
  set -- $RPS
  T=$((SECONDS - START))
  printf '%6s %9s %6s %7s %6s %7s %10s %7s %9s %6s\n' "$T" "$RSS" "$FDS" "${TASKS:--}" "${CONNS:--}" "${ACTIVE:--}" "${BUDGET:--}" "$1" "$2" "$3"
  printf '%s\t%s\t%s\t%s\t%s\n' "$T" "$RSS" "$FDS" "${TASKS:-0}" "$2" >> "$WORK/samples.tsv"
done
python3 - "$WORK/samples.tsv" <<'PY'
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
num = lambda v: float(v) if v not in ("-", "") else None
if rows:
    first, last = rows[0], rows[-1]
    col = lambda i: [num(r[i]) for r in rows if num(r[i]) is not None]
    print(json.dumps({
        "samples": len(rows),
        "rss_kib": {"first": num(first[1]), "last": num(last[1]), "max": max(col(1))},
        "fds": {"first": num(first[2]), "last": num(last[2]), "max": max(col(2))},
        "tasks": {"first": num(first[3]), "last": num(last[3]), "max": max(col(3) or [0])},
        "p99_ms_max": max(col(4) or [0]),
    }))
PY
grep -c . "$WORK/slow.jsonl" 2>/dev/null | sed 's/^/slow-client rounds finished: /' || true
