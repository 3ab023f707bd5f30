#!/usr/bin/env bash
# What the operations features cost, in one run, against one `sluice mock`:
#   1. small-call req/s through `sluice serve` with traces off, at 1 % and at 100 % sampling
#      (spans really exported, OTLP/HTTP protobuf), and with the dashboard's feed open;
#   2. the gateway's CPU per second at idle with the dashboard's feed closed, 1 viewer open,
#      and 16 viewers (the cap) open.
# Usage: bench/ops.sh [SECONDS] [ROUNDS]   (default 3 s per load, 5 rounds, interleaved, medians
# reported: the machine is shared, so single runs swing; loopback only)
# The OTLP collector is a second `sluice mock`: it answers /v1/traces with 404 after reading
# the body, so the gateway pays for building, encoding and sending every span (the spans
# count as failed exports, which is what `sluice_trace_spans_dropped_total` then shows).
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-3}
ROUNDS=${2:-5}
cargo build --release -q -p sluice
BIN=target/release/sluice
WORK=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

first_line() { # FILE PREFIX: waits for the line starting with PREFIX, prints the rest
  for _ in $(seq 100); do
    line=$(grep -m1 "^$2" "$1" 2>/dev/null || true)
    if [ -n "$line" ]; then echo "${line#"$2"}"; return; fi
    sleep 0.1
  done
  echo "no '$2' in $1" >&2; exit 1
}

$BIN mock --listen 127.0.0.1:0 > "$WORK/mock.out" &
MOCK=$(first_line "$WORK/mock.out" "listening on ")
$BIN mock --listen 127.0.0.1:0 --max-records 1000 --max-recorded-body 1 > "$WORK/otlp.out" &
OTLP=$(first_line "$WORK/otlp.out" "listening on ")

gateway() { # NAME TELEMETRY-LINES: starts `sluice serve`, sets GW, ADMIN, PID
  cat > "$WORK/$1.toml" <<TOML
[server]
listen = "127.0.0.1:0"
[[upstream]]
name = "mock"
base_url = "http://$MOCK/v1"
protocol = "h2c"
[[route]]
models = ["*"]
upstream = "mock"
$2
TOML
  RUST_LOG=warn $BIN serve "$WORK/$1.toml" > "$WORK/$1.out" 2>"$WORK/$1.err" &
  PID=$!
  GW=$(first_line "$WORK/$1.out" "listening on ")
  ADMIN=$(first_line "$WORK/$1.out" "admin on ")
}

TRACES="[telemetry]
endpoint = \"http://$OTLP\"
batch_size = 4096
batch_interval = \"1s\"
queue_size = 200000"
gateway off ""
declare -A G A P
G[off]=$GW; A[off]=$ADMIN; P[off]=$PID
gateway p1 "$TRACES
sampling_ratio = 0.01"
G[p1]=$GW; A[p1]=$ADMIN; P[p1]=$PID
gateway p100 "$TRACES
sampling_ratio = 1.0"
G[p100]=$GW; A[p100]=$ADMIN; P[p100]=$PID

rps() { # ADDR: closed loop, 32 in flight, small non-streaming chat calls
  $BIN bench rps --url "http://$1/v1/chat/completions" -c 32 --duration-s "$DUR" \
    --payload-bytes 512 --json > "$WORK/rps.json"
  python3 - "$WORK/rps.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("%.0f %.2f %d" % (r["throughput_per_s"], r["latency"]["p99_ms"], r["errors"] + r["timeouts"]))
PY
}

declare -A RUNS
for v in off p1 p100 feed; do RUNS[$v]=""; done
echo "== small calls, ${DUR}s each, ${ROUNDS} rounds (req/s, p99 ms, failures)"
for round in $(seq "$ROUNDS"); do
  for v in off p1 p100 feed; do
    g=$v; [ "$v" = feed ] && g=off
    if [ "$v" = feed ]; then curl -sN "http://${A[off]}/admin/feed" > /dev/null & VIEWER=$!; sleep 1; fi
    read -r tput p99 fails < <(rps "${G[$g]}")
    [ "$v" = feed ] && kill "$VIEWER"
    echo "round $round  $v: $tput req/s, p99 $p99 ms, $fails failures"
    RUNS[$v]="${RUNS[$v]} $tput"
  done
done
median() { python3 -c "import statistics,sys; print(int(statistics.median(map(int, sys.argv[1:]))))" $1; }
OFF=$(median "${RUNS[off]}")
for v in off p1 p100 feed; do
  m=$(median "${RUNS[$v]}")
  echo "median $v: $m req/s ($(python3 -c "print('%.2f' % ($m / $OFF))")x off)"
done
curl -s "http://${A[p100]}/metrics" | grep -E '^sluice_trace_(spans_exported|spans_dropped|exports)_total' || true

cpu_ms_per_s() { # PID SECONDS: CPU time the process's threads ran, per second (schedstat, ns)
  local t0 t1
  t0=$(cat /proc/"$1"/task/*/schedstat | awk '{s+=$1} END {print s}')
  sleep "$2"
  t1=$(cat /proc/"$1"/task/*/schedstat | awk '{s+=$1} END {print s}')
  python3 -c "print('%.3f' % (($t1 - $t0) / 1e6 / $2))"
}
IDLE=10
echo "== idle CPU of the gateway, ${IDLE}s each (ms of CPU per second)"
echo "feed closed: $(cpu_ms_per_s "${P[off]}" $IDLE)"
curl -sN "http://${A[off]}/admin/feed" > /dev/null & V1=$!
sleep 1
echo "1 viewer:    $(cpu_ms_per_s "${P[off]}" $IDLE)"
VS=()
for _ in $(seq 15); do curl -sN "http://${A[off]}/admin/feed" > /dev/null & VS+=($!); done
sleep 1
echo "16 viewers:  $(cpu_ms_per_s "${P[off]}" $IDLE)"
kill "$V1" "${VS[@]}"
sleep 1
echo "closed again: $(cpu_ms_per_s "${P[off]}" $IDLE)"
