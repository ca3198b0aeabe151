#!/usr/bin/env bash
# Two builds of Veltrix in one run, interleaved: did a change cost ingest throughput or latency?
#
#   bench/ab.sh A_CHECKOUT B_CHECKOUT      # e.g. a worktree of the old commit, and this one
#
# Each checkout's release binary (`target/release/veltrix`, built here if missing) is measured
# with compare.sh's Veltrix ingest workloads, A then B within every repetition, so both see the
# same machine state: NDJSON over HTTP (ingest.toml), frames (ingest-frames.toml), and ack
# latency at LAT_RATE events/s in 20-event requests (ingest-latency.toml). One load generator
# drives both: A's `vx-loadtest`, so the tool is not a variable. Every run's line, with the
# load average before it, goes to docs/bench/ab-runs.txt; the medians are printed as a table.
#
# Parameters (environment): REPS=3 WARMUP_S=3 MEASURE_S=10 LAT_RATE=20000 PORT=17200
# ONLY="ndjson frames lat" (a subset of the three measures, e.g. ONLY=lat for the latency alone)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh

[[ $# == 2 ]] || { echo "usage: bench/ab.sh A_CHECKOUT B_CHECKOUT" >&2; exit 2; }
A=$(cd "$1" && pwd)
B=$(cd "$2" && pwd)
REPS=${REPS:-3}
WARMUP_S=${WARMUP_S:-3}
MEASURE_S=${MEASURE_S:-10}
LAT_RATE=${LAT_RATE:-20000}
PORT=${PORT:-17200}
ONLY=" ${ONLY:-ndjson frames lat} "
FRAMES_PORT=$((PORT + 1))
command -v jq >/dev/null || { as_root apt-get update >&2; as_root apt-get install -y jq >&2; }

for c in "$A" "$B"; do
  if [[ ! -x $c/target/release/veltrix || ! -x $c/target/release/vx-loadtest ]]; then
    log "building release in $c"
    (cd "$c" && cargo build --release -p veltrix -p vx-loadtest >&2)
  fi
done
LT=$A/target/release/vx-loadtest
W=$A/loadtest/workloads

bench_init ab
refuse_if_listening "$PORT" "$FRAMES_PORT"
HTTP="endpoints=\"http://127.0.0.1:$PORT\""
FRAMES="endpoints=\"frames://127.0.0.1:$FRAMES_PORT\""

# start BINARY: a fresh data dir, fsync always, as compare.sh runs it.
start() {
  rm -rf "$WORK/data"; sync
  "$1" serve --data-dir "$WORK/data" --listen "127.0.0.1:$PORT" \
    --frames-listen "127.0.0.1:$FRAMES_PORT" --fsync always >"$WORK/log" 2>&1 &
  PID=$!
  wait_ready || { cat "$WORK/log" >&2; exit 1; }
}
# run SIDE KEY WORKLOAD JQ [--set …]: one vx-loadtest run against a fresh server of SIDE.
run() {
  local side=$1 key=$2 wl=$3 q=$4; shift 4
  local bin=$A/target/release/veltrix
  [[ $side == b ]] && bin=$B/target/release/veltrix
  start "$bin"
  local l; l=$(load1)
  "$LT" run "$W/$wl" -q --set "warmup_s=$WARMUP_S" --set "measure_s=$MEASURE_S" "$@" \
    --json "$WORK/r.json" >/dev/null
  stop
  local f
  for f in $q; do
    record "${side}_${key}_${f%%=*}" "$(jqr "${f#*=}" "$WORK/r.json")" "rep=$rep load1_before=$l"
  done
}

for rep in $(seq 1 "$REPS"); do
  for side in a b; do
    if [[ $ONLY == *" ndjson "* ]]; then
      run "$side" ndjson ingest.toml "events_per_s=.operations.ingest.events_per_s" --set "$HTTP"
    fi
    if [[ $ONLY == *" frames "* ]]; then
      run "$side" frames ingest-frames.toml "events_per_s=.operations.ingest.events_per_s" --set "$FRAMES"
    fi
    if [[ $ONLY == *" lat "* ]]; then
      run "$side" lat ingest-latency.toml \
        "p50_ms=.operations.ingest.latency_ms.p50 p99_ms=.operations.ingest.latency_ms.p99 p999_ms=.operations.ingest.latency_ms.p999" \
        --set "$HTTP" --set "rate=$((LAT_RATE / 20))"
    fi
  done
done

printf '| measure | A: %s | B: %s | B/A |\n| --- | --- | --- | --- |\n' \
  "$(git -C "$A" rev-parse --short HEAD)" "$(git -C "$B" rev-parse --short HEAD)"
for k in ndjson_events_per_s frames_events_per_s lat_p50_ms lat_p99_ms lat_p999_ms; do
  [[ $ONLY == *" ${k%%_*} "* ]] || continue
  a=$(med "a_$k"); b=$(med "b_$k")
  printf '| %s | %s | %s | %s |\n' "$k" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", b / a}')"
done
