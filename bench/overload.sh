#!/usr/bin/env bash
# Memory under sustained overload: a tiny queue, many connections, 429s expected. Samples the
# server's RSS every 2 s; flat RSS with a steady 429 rate is the claim of docs/API.md §4.
#   bench/overload.sh          # DURATION=30s CONNS=64 QUEUE=1024
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-30s}
CONNS=${CONNS:-64}
PORT=${PORT:-17196}
export BATCH=${BATCH:-1000} STREAMS=${STREAMS:-100}
dir=$(mktemp -d /tmp/vxover.XXXX)
VX_INGEST_QUEUE_CAPACITY=${QUEUE:-1024} target/release/veltrix serve --listen "127.0.0.1:$PORT" \
  --data-dir "$dir/data" --fsync always --shards 4 >"$dir/log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 1 200); do curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break; sleep 0.05; done
wrk -t2 -c"$CONNS" -d"$DURATION" -s bench/ingest.lua "http://127.0.0.1:$PORT" >"$dir/wrk" 2>&1 &
W=$!
while kill -0 $W 2>/dev/null; do
  echo "rss_kb=$(awk '/VmRSS/ {print $2}' /proc/$PID/status) readyz=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/readyz")"
  sleep 2
done
grep -E "Requests/sec|Non-2xx|requests in" "$dir/wrk"
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^vx_ingest_requests_rejected_total\{.*backpressure|^vx_events_ingested_total\{format="ndjson"' || true
