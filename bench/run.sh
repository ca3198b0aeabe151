#!/usr/bin/env bash
# Ingest and replay throughput of the release binary, measured with wrk on this machine.
# The load generator shares the cores with the server. Prints one line per run and medians.
#
#   bench/run.sh                 # REPS=3 DURATION=15s CONNS=8 BATCH=1000 STREAMS=100
#
# Needs: wrk (apt-get install wrk), a release build (cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
DURATION=${DURATION:-15s}
CONNS=${CONNS:-8}
BATCH=${BATCH:-1000}
STREAMS=${STREAMS:-100}
PORT=${PORT:-17199}
BIN=target/release/veltrix
command -v wrk >/dev/null || { echo "wrk not found: apt-get install -y wrk" >&2; exit 1; }
[[ -x $BIN ]] || cargo build --release --bin veltrix
export BATCH STREAMS

# shellcheck source=bench/lib.sh
. bench/lib.sh

serve() { # mode dir
  "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$2" --fsync "$1" >"$2.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 200); do
    curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "server did not become ready" >&2; cat "$2.log" >&2; exit 1
}
stop() { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; }
trap stop EXIT

RES=$(mktemp)
for mode in always interval; do
  for rep in $(seq 1 "$REPS"); do
    dir=$(mktemp -d /tmp/vxbench.XXXX)
    serve "$mode" "$dir/data"
    out=$(wrk -t2 -c"$CONNS" -d"$DURATION" -s bench/ingest.lua "http://127.0.0.1:$PORT" 2>&1)
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out"); non2xx=${non2xx:-0}
    p50=$(awk '/Latency/ {print $2}' <<<"$out")
    eps=$(awk -v r="$rps" -v b="$BATCH" 'BEGIN {printf "%d", r*b}')
    echo "ingest-run mode=$mode rep=$rep conns=$CONNS batch=$BATCH events_per_s=$eps requests_per_s=$rps non2xx=$non2xx avg_latency=$p50"
    echo "ingest-$mode $eps" >>"$RES"
    if [[ $mode == interval ]]; then
      # Replay: whole streams of the data just written, NDJSON, 100k events per request max.
      events=$(curl -fsS "http://127.0.0.1:$PORT/v1/streams/bench-1" | sed -E 's/.*"events":([0-9]+).*/\1/')
      per=$(( events < 100000 ? events : 100000 ))
      out=$(wrk -t2 -c4 -d"$DURATION" "http://127.0.0.1:$PORT/v1/streams/bench-1/events?limit=100000" 2>&1)
      rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
      reps=$(awk -v r="$rps" -v b="$per" 'BEGIN {printf "%d", r*b}')
      echo "replay-run rep=$rep events_per_request=$per events_per_s=$reps requests_per_s=$rps"
      echo "replay $reps" >>"$RES"
    fi
    stop
    rm -rf "$dir"
  done
done
for k in ingest-always ingest-interval replay; do
  echo "median $k events_per_s=$(awk -v k=$k '$1==k {print $2}' "$RES" | median)"
done
rm -f "$RES"
