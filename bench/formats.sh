#!/usr/bin/env bash
# End-to-end ingest per format with the same load generator: wrk posting one pre-built body of
# 1000 events (identical events in every format), `--fsync interval` (FSYNC=always to change).
# Medians of REPS runs, for each binary of BINS (interleaved).
#   bench/formats.sh            # REPS=3 DURATION=10s CONNS=8 BINS=target/release/veltrix
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}; DURATION=${DURATION:-10s}; CONNS=${CONNS:-8}; PORT=${PORT:-17195}
BINS=${BINS:-target/release/veltrix}
FSYNC=${FSYNC:-interval}
bodies=$(mktemp -d /tmp/vxbodies.XXXX)
cargo run -q --release -p vx-proto --example bench_bodies -- "$bodies" 1000 100
# shellcheck source=bench/lib.sh
. bench/lib.sh
RES=$(mktemp)
for rep in $(seq 1 "$REPS"); do
 for BIN in $BINS; do
  b=$(basename "$BIN")
  for fmt in ndjson frames; do
    case $fmt in ndjson) ct=application/x-ndjson ;; frames) ct=application/vnd.veltrix.frames ;; esac
    dir=$(mktemp -d /tmp/vxfmt.XXXX)
    "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$dir/data" --fsync "$FSYNC" >"$dir/log" 2>&1 &
    PID=$!
    for _ in $(seq 1 200); do curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break; sleep 0.05; done
    out=$(BODY="$bodies/$fmt.body" CT=$ct wrk -t2 -c"$CONNS" -d"$DURATION" -s bench/body.lua "http://127.0.0.1:$PORT/v1/events" 2>&1)
    kill $PID; wait $PID 2>/dev/null || true; rm -rf "$dir"
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out"); bad=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
    eps=$(awk -v r="$rps" 'BEGIN {printf "%d", r*1000}')
    echo "format-run bin=$b fsync=$FSYNC format=$fmt rep=$rep load=$(cut -d' ' -f1 /proc/loadavg) events_per_s=$eps non2xx=${bad:-0} body_bytes=$(stat -c %s "$bodies/$fmt.body")"
    echo "$b-$fmt $eps" >>"$RES"
  done
 done
done
for BIN in $BINS; do
  b=$(basename "$BIN")
  for f in ndjson frames; do echo "median bin=$b $f events_per_s=$(awk -v k="$b-$f" '$1==k {print $2}' "$RES" | median)"; done
done
rm -rf "$RES" "$bodies"
