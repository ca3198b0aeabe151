#!/usr/bin/env bash
# What tracing costs on ingest: requests/s closed loop (wrk, bench/ingest.lua), each binary of
# BINS in turn, REPS interleaved reps, medians at the end. A BINS entry may be a wrapper script
# that sets env vars, e.g. OTLP export on:
#   printf '#!/bin/sh\nVX_TELEMETRY_OTLP_ENDPOINT=http://127.0.0.1:9 exec target/release/veltrix "$@"\n' >/tmp/vx-otel
#   BINS="target/release/veltrix /tmp/vx-otel" bench/tracing.sh                      # single events
#   BATCH=1000 CONNS=8 FSYNC=always BINS="…" bench/tracing.sh                        # 1000-event requests
# Needs: wrk. Lines go to docs/bench/tracing-runs.txt.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
source bench/lib.sh
BINS=${BINS:-target/release/veltrix}
REPS=${REPS:-4}
BATCH=${BATCH:-1}
CONNS=${CONNS:-64}
FSYNC=${FSYNC:-interval}
DURATION=${DURATION:-10}
PORT=${PORT:-17198}
refuse_if_listening "$PORT"
bench_init tracing
for rep in $(seq 1 "$REPS"); do
  for bin in $BINS; do
    rm -rf "$WORK/data"
    "$bin" serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" --fsync "$FSYNC" >"$WORK/log" 2>&1 &
    PID=$!
    wait_ready
    l=$(load1)
    rps=$(BATCH=$BATCH STREAMS=100 wrk -t2 -c"$CONNS" -d"${DURATION}s" -s bench/ingest.lua "http://127.0.0.1:$PORT" 2>&1 | awk '/Requests\/sec/ {print $2}')
    record "$(basename "$bin")" "$rps" "rep=$rep load=$l batch=$BATCH conns=$CONNS fsync=$FSYNC requests_per_s"
    stop
  done
done
for bin in $BINS; do
  echo "median $(basename "$bin") batch=$BATCH requests_per_s=$(med "$(basename "$bin")")" | tee -a "$RUNS"
done
