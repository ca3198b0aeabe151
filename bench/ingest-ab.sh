#!/usr/bin/env bash
# Ingest with and without features, two builds interleaved in one run (issue 20 item 5):
#
#   bench/ingest-ab.sh A_BINARY B_BINARY     # e.g. the last commit's target/release/veltrix and this one
#
# For each repetition, for each build: ingest.toml (1000-event NDJSON requests, 4 connections,
# fsync always) with the feature store off (events without an entity), with the built-ins (an
# entity per event, 100,000 entities), and with three windowed aggregates declared as well
# (count 5m, count 1h, distinct streams 1d: bench/lib.sh's decl3_yaml), each on a fresh data
# dir. One load generator (this checkout's vx-loadtest). Every run's line with the load
# average before it goes to stdout; the medians and the ratios to "off" of the same build end it.
#
# Parameters (environment): REPS=3 WARMUP_S=2 MEASURE_S=10 PORT=17300 CONNECTIONS=4 (the
# load generator's connections: ingest.toml's 4 keep one or two requests in a group, so the
# case is bound by each request's latency; 16 keep the server's threads busy)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh
[[ $# == 2 ]] || { echo "usage: bench/ingest-ab.sh A_BINARY B_BINARY" >&2; exit 2; }
BINS=("$1" "$2")
REPS=${REPS:-3}
PORT=${PORT:-17300}
LT=$ROOT/target/release/vx-loadtest
WORK=$(mktemp -d)
trap 'stop; rm -rf "$WORK"' EXIT
decl3_yaml "$WORK/decl3.yaml"
declare -A R
for rep in $(seq 1 "$REPS"); do
  for b in 0 1; do
    for mode in off builtins decl3; do
      args=(); set_=()
      [[ $mode == decl3 ]] && args=(--config "$WORK/decl3.yaml")
      [[ $mode == off ]] && set_=(--set entities=false)
      rm -rf "$WORK/d"
      "${BINS[$b]}" serve --data-dir "$WORK/d" --listen "127.0.0.1:$PORT" "${args[@]}" >>"$WORK/log" 2>&1 &
      PID=$!
      wait_ready
      l=$(load1)
      "$LT" run loadtest/workloads/ingest.toml --set "endpoints=http://127.0.0.1:$PORT" \
        --set "warmup_s=${WARMUP_S:-2}" --set "measure_s=${MEASURE_S:-10}" \
        --set "connections=${CONNECTIONS:-4}" "${set_[@]}" -q --json "$WORK/j" >/dev/null
      v=$(jq .operations.ingest.events_per_s "$WORK/j")
      stop
      echo "build=$((b == 0 ? 0 : 1)) mode=$mode rep=$rep connections=${CONNECTIONS:-4} events_per_s=$v load1_before=$l"
      R[$b.$mode]+="$v "
    done
  done
done
med() { tr ' ' '\n' | grep . | median; }
for b in 0 1; do
  off=$(echo "${R[$b.off]}" | med)
  for mode in off builtins decl3; do
    m=$(echo "${R[$b.$mode]}" | med)
    echo "median build=$b ${BINS[$b]} mode=$mode events_per_s=$m of_off=$(awk -v a="$m" -v o="$off" 'BEGIN {printf "%.2f", a / o}')"
  done
done
