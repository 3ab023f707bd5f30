#!/usr/bin/env bash
# The SQLite ledger sink's cost per record, in instructions (callgrind): the bench
# crates/sluice-ledger/benches/insert_instructions.rs writes N records in batches of 200 straight
# to the sink; run at two N, the difference divided by the difference in records is the cost of
# one record (building it in the bench included: run with LEDGER_SINK_OFF=1 to see that part).
# Usage: bench/ledger_insert.sh [SMALL_N LARGE_N]   (default 2000 12000)
set -euo pipefail
cd "$(dirname "$0")/.."
small=${1:-2000}
large=${2:-12000}
out=$(cargo bench -p sluice-ledger --bench insert_instructions --no-run 2>&1)
bin=$(grep -o 'target/[a-z]*/deps/insert_instructions-[0-9a-f]*' <<<"$out" | tail -1)
declare -A total
for n in "$small" "$large"; do
  total[$n]=$(LEDGER_N=$n valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" 2>&1 >/dev/null |
    awk '/Collected/ {print $4}')
done
echo "$(( (total[$large] - total[$small]) / (large - small) )) instructions a record ($bin)"
