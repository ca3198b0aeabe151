#!/usr/bin/env bash
# Where an acked ingest request's time goes, stage by stage (`vx_ingest_stage_seconds`,
# docs/OPERATIONS.md): a run of `ingest.toml` (1000-event NDJSON requests, fsync always) or of
# `ingest-frames.toml`, then /metrics read: per stage its mean, and its median and p99 from the
# histogram's buckets (the bucket's upper bound), beside the request latency vx-loadtest saw.
#
#   bench/stages.sh                      # NDJSON over HTTP, 4 connections
#   WL=ingest-frames.toml CONNS=16 bench/stages.sh
#   REPS=3 MEASURE_S=10 SERVER_ARGS="--apply-threads 1" bench/stages.sh
#
# Every run's table goes to docs/bench/stages-runs.txt with the load average before it; the
# last lines print the medians over REPS of each stage's mean.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh

WL=${WL:-ingest.toml}
CONNS=${CONNS:-4}
REPS=${REPS:-3}
WARMUP_S=${WARMUP_S:-3}
MEASURE_S=${MEASURE_S:-10}
PORT=${PORT:-17310}
FPORT=$((PORT + 1))
BIN=${BIN:-target/release/veltrix}
LT=${LT:-target/release/vx-loadtest}
read -r -a EXTRA <<<"${SERVER_ARGS:-}"
if [[ ! -x $BIN || ! -x $LT ]]; then
  log "building release"
  cargo build --release -p veltrix -p vx-loadtest >&2
fi
bench_init stages
refuse_if_listening "$PORT" "$FPORT"
STAGES="receive decode admission queue write fsync apply answer"
endpoint="http://127.0.0.1:$PORT"
[[ $WL == *frames* ]] && endpoint="frames://127.0.0.1:$FPORT"

echo "# stages.sh $(date -u +%FT%TZ) $WL, $CONNS connections, commit $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)') ${SERVER_ARGS:-}" | tee -a "$RUNS"
for rep in $(seq 1 "$REPS"); do
  rm -rf "$WORK/data"; sync
  la=$(load1)
  "$BIN" serve --data-dir "$WORK/data" --listen "127.0.0.1:$PORT" --frames-listen "127.0.0.1:$FPORT" \
    --fsync always "${EXTRA[@]}" >"$WORK/log" 2>&1 &
  PID=$!
  wait_ready || { cat "$WORK/log" >&2; exit 1; }
  "$LT" run "loadtest/workloads/$WL" -q --json "$WORK/run.json" --set "endpoints=[\"$endpoint\"]" \
    --set "connections=$CONNS" --set "warmup_s=$WARMUP_S" --set "measure_s=$MEASURE_S" >/dev/null
  curl -s "localhost:$PORT/metrics" >"$WORK/metrics"
  stop
  read -r ev p50 p99 < <(python3 -c 'import json,sys; o=json.load(open(sys.argv[1]))["operations"]["ingest"]; print(int(o["events_per_s"]), o["latency_ms"]["p50"], o["latency_ms"]["p99"])' "$WORK/run.json")
  echo "rep $rep: $ev events/s, request p50 ${p50} ms, p99 ${p99} ms, load1 $la" | tee -a "$RUNS"
  echo "| stage | mean ms | median ms (≤) | p99 ms (≤) |" | tee -a "$RUNS"
  for s in $STAGES; do
    # Buckets are cumulative in the exposition: the median and p99 are the first bound whose
    # count reaches half and 99% of the total.
    read -r mean med q99 < <(awk -v s="$s" '
      $0 ~ "^vx_ingest_stage_seconds_bucket\\{.*stage=\"" s "\"" {
        match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5); n = $NF
        les[++k] = le; cnt[k] = n
      }
      $0 ~ "^vx_ingest_stage_seconds_sum\\{stage=\"" s "\"" { sum = $NF }
      $0 ~ "^vx_ingest_stage_seconds_count\\{stage=\"" s "\"" { c = $NF }
      END {
        if (c == 0) { print "nan nan nan"; exit }
        for (i = 1; i <= k; i++) {
          if (med == "" && cnt[i] >= c / 2) med = les[i]
          if (p == "" && cnt[i] >= c * 0.99) p = les[i]
        }
        printf "%.4f %s %s\n", sum / c * 1000, med * 1000, p * 1000
      }' "$WORK/metrics")
    echo "| $s | $mean | $med | $q99 |" | tee -a "$RUNS"
    echo "$s $mean" >>"$RESULTS"
  done
done
echo
echo "medians over $REPS runs of each stage's mean (ms):"
for s in $STAGES; do printf "  %-9s %s\n" "$s" "$(med "$s")"; done
