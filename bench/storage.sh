#!/usr/bin/env bash
# Storage at size (issue 6), with the release binary:
#   1. anonymous RSS sampled every second while wrk stores EVENTS events over STREAMS streams in
#      1000-event NDJSON requests (`--fsync always`), with the figures at 10M and at the end;
#   2. restart time of that data dir (SIGTERM, start, until /readyz answers 200);
#   3. 256-event pages from random old positions of one stream of PAGE_STREAM_EVENTS events,
#      open loop with vegeta at PAGE_RATE pages/s, REPS runs.
#
#   bench/storage.sh                       # EVENTS=50000000 STREAMS=10000 BIN=target/release/veltrix
#   EVENTS=10000000 BIN=/tmp/old-veltrix bench/storage.sh rss   # only step 1 and 2
#
# Needs: wrk, vegeta (GOFLAGS=-mod=mod go install github.com/tsenart/vegeta/v12@v12.12.0).
# Writes its samples to $OUT (default /tmp/vx-storage-bench) and prints one line per figure.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/veltrix}
EVENTS=${EVENTS:-50000000}
STREAMS=${STREAMS:-10000}
PAGE_STREAM_EVENTS=${PAGE_STREAM_EVENTS:-10000000}
PAGE_RATE=${PAGE_RATE:-2000}
REPS=${REPS:-3}
PORT=${PORT:-17198}
OUT=${OUT:-/tmp/vx-storage-bench}
VEGETA=${VEGETA:-$(command -v vegeta || echo "$HOME/go/bin/vegeta")}
STEPS=${1:-all}
command -v wrk >/dev/null || { echo "wrk not found: apt-get install -y wrk" >&2; exit 1; }
mkdir -p "$OUT"

# shellcheck source=bench/lib.sh
. bench/lib.sh
metric() { curl -fsS "http://127.0.0.1:$PORT/metrics" | awk -v m="$1" '$1==m {print $2}'; }
serve() { # dir
  local t0; t0=$(date +%s.%N)
  "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$1" --fsync always >>"$1.log" 2>&1 &
  PID=$!
  until curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; do
    kill -0 "$PID" 2>/dev/null || { echo "server exited" >&2; tail -5 "$1.log" >&2; exit 1; }
    sleep 0.02
  done
  READY_S=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN {printf "%.2f", a - b}')
}
stop() { [[ -n ${PID:-} ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true; PID=; }
trap stop EXIT
anon_kb() { awk '/RssAnon/ {print $2}' "/proc/$PID/status"; }

fill() { # dir events streams samples.csv
  local dir=$1 want=$2 streams=$3 csv=$4
  echo "elapsed_s,stored_events,rss_anon_kib" >"$csv"
  local t0=$SECONDS
  BATCH=1000 STREAMS=$streams wrk -t2 -c8 -d3600s -s bench/ingest.lua "http://127.0.0.1:$PORT" >"$dir.wrk" 2>&1 &
  local WRK=$!
  local n=0
  while (( n < want )); do
    sleep 1
    n=$(metric vx_stored_events_total); n=${n%.*}
    echo "$((SECONDS - t0)),$n,$(anon_kb)" >>"$csv"
  done
  kill "$WRK"; wait "$WRK" 2>/dev/null || true
  sleep 1
  echo "$((SECONDS - t0)),$(metric vx_stored_events_total),$(anon_kb)" >>"$csv"
}

if [[ $STEPS == all || $STEPS == rss ]]; then
  dir=$OUT/rss-data; rm -rf "$dir" "$dir.log"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  serve "$dir"
  fill "$dir" "$EVENTS" "$STREAMS" "$OUT/rss.csv"
  awk -F, 'NR>1 && $2>=10000000 && !a {print "rss at_events=" $2 " rss_anon_mib=" int($3/1024); a=1}' "$OUT/rss.csv"
  tail -1 "$OUT/rss.csv" | awk -F, '{print "rss at_events=" $2 " rss_anon_mib=" int($3/1024) " elapsed_s=" $1}'
  awk -F, 'NR>1 {if ($3>m) m=$3} END {print "rss max_anon_mib=" int(m/1024)}' "$OUT/rss.csv"
  echo "disk bytes=$(du -sb "$dir" | cut -f1) segments=$(ls "$dir/log" | grep -c '\.log$')"
  for rep in $(seq 1 "$REPS"); do
    stop
    serve "$dir"
    echo "restart rep=$rep ready_s=$READY_S rss_anon_mib=$(( $(anon_kb) / 1024 )) $(grep -o 'bootstrap_ms=[0-9]*' "$dir.log" | tail -1)"
  done
  stop
fi

if [[ $STEPS == all || $STEPS == pages ]]; then
  dir=$OUT/page-data; rm -rf "$dir" "$dir.log"
  serve "$dir"
  fill "$dir" "$PAGE_STREAM_EVENTS" 1 "$OUT/page-fill.csv"
  last=$(curl -fsS "http://127.0.0.1:$PORT/v1/streams/bench-0" | sed -E 's/.*"last_seq":([0-9]+).*/\1/')
  # Old positions: uniformly random in the first 90% of the stream, one target per line.
  awk -v n="$last" -v port="$PORT" 'BEGIN {srand(7); for (i = 0; i < 20000; i++)
    printf "GET http://127.0.0.1:%d/v1/streams/bench-0/events?from=%d&limit=256\n\n", port, 1 + int(rand() * n * 0.9)}' >"$OUT/page-targets"
  # Warm-up: the blocking pool's threads and the descriptor cache fill on the first requests.
  "$VEGETA" attack -targets="$OUT/page-targets" -rate="$PAGE_RATE" -duration=3s >/dev/null
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) stream_events=$last"
  for rep in $(seq 1 "$REPS"); do
    "$VEGETA" attack -targets="$OUT/page-targets" -rate="$PAGE_RATE" -duration=10s >"$OUT/pages-$rep.bin"
    "$VEGETA" report <"$OUT/pages-$rep.bin" | awk -v r="$rep" -v rate="$PAGE_RATE" '/Latencies/ {print "pages rep=" r " rate=" rate " " $0} /Success/ {print "pages rep=" r " " $0}'
  done
  stop
fi
