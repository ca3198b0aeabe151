#!/usr/bin/env bash
# Ack latency at fixed offered rates, open loop (vegeta: requests leave at the intended rate
# whatever the server does, so queueing shows in the tail), under `--fsync always`, beside the
# disk's own fdatasync percentiles measured in the same run, and requests/s and events/s closed
# loop (wrk). Each binary in BINS is measured in turn, REPS times, interleaved.
#
#   bench/latency.sh                                  # BINS=target/release/veltrix REPS=3
#   BINS="/tmp/before /tmp/after" bench/latency.sh
#
# Needs: wrk, vegeta (GOFLAGS=-mod=mod go install github.com/tsenart/vegeta/v12@v12.12.0), python3.
set -euo pipefail
cd "$(dirname "$0")/.."
BINS=${BINS:-target/release/veltrix}
REPS=${REPS:-3}
DURATION=${DURATION:-10}
PORT=${PORT:-17197}
VEGETA=${VEGETA:-$(command -v vegeta || echo "$HOME/go/bin/vegeta")}
work=$(mktemp -d /tmp/vxlat.XXXX)
trap 'stop; rm -rf "$work"' EXIT

# One event, and 20 events, as NDJSON bodies (the events bench/ingest.lua sends).
ev() { printf '{"stream":"lat-%d","entity":"player-%d","type":"damage","ts":1732000000000,"kind":"counter","value":%d,"data":{"weapon":"bow","n":%d}}\n' "$1" "$1" "$1" "$1"; }
ev 1 >"$work/one.ndjson"
for i in $(seq 1 20); do ev "$i"; done >"$work/twenty.ndjson"
for b in one twenty; do
  printf 'POST http://127.0.0.1:%d/v1/events\nContent-Type: application/x-ndjson\n@%s\n' "$PORT" "$work/$b.ndjson" >"$work/$b.targets"
done

serve() { # bin mode
  rm -rf "$work/data"
  "$1" serve --listen "127.0.0.1:$PORT" --data-dir "$work/data" --fsync "$2" >"$work/log" 2>&1 &
  PID=$!
  until curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; do sleep 0.05; done
}
stop() { [[ -n ${PID:-} ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true; PID=; }
load() { cut -d' ' -f1 /proc/loadavg; }

open_loop() { # bin name targets rate
  serve "$1" always
  "$VEGETA" attack -targets="$3" -rate="$4" -duration=2s >/dev/null # warm-up
  local l; l=$(load)
  curl -fsS "http://127.0.0.1:$PORT/metrics" >"$work/m0"
  "$VEGETA" attack -targets="$3" -rate="$4" -duration="${DURATION}s" | "$VEGETA" report -type=json >"$work/r.json"
  curl -fsS "http://127.0.0.1:$PORT/metrics" >"$work/m1"
  python3 - "$work/r.json" "$(basename "$1")" "$2" "$4" "$l" "$work/m0" "$work/m1" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1])); l = r["latencies"]; us = lambda k: round(l[k] / 1000)
codes = ",".join(f"{k}:{v}" for k, v in r["status_codes"].items())
# The server's own view (request in to response head out), from its histogram: the share of
# requests within 1 ms and 2 ms during the attack.
def buckets(path):
    out = {}
    for line in open(path):
        m = re.match(r'vx_http_request_duration_seconds_bucket\{le="([^"]+)",route="/v1/events"\} (\S+)', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out
b0, b1 = buckets(sys.argv[6]), buckets(sys.argv[7])
d = {k: b1[k] - b0.get(k, 0) for k in b1}
total = d.get("+Inf", 0) or 1
share = lambda le: 100 * d.get(le, 0) / total
print(f"open-loop bin={sys.argv[2]} load={sys.argv[5]} {sys.argv[3]} rate={sys.argv[4]} p50_us={us('50th')} p90_us={us('90th')} p99_us={us('99th')} max_us={us('max')} codes={codes} server_within_1ms={share('0.001'):.2f}% server_within_2ms={share('0.002'):.2f}%")
PY
  stop
}

closed_loop() { # bin mode batch conns
  serve "$1" "$2"
  local l; l=$(load)
  local out; out=$(BATCH=$3 STREAMS=100 wrk -t2 -c"$4" -d"${DURATION}s" -s bench/ingest.lua "http://127.0.0.1:$PORT" 2>&1)
  local rps; rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  local bad; bad=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
  echo "closed-loop bin=$(basename "$1") load=$l fsync=$2 batch=$3 conns=$4 requests_per_s=$rps events_per_s=$(awk -v r="$rps" -v b="$3" 'BEGIN {printf "%d", r*b}') non2xx=${bad:-0}"
  stop
}

for rep in $(seq 1 "$REPS"); do
  mkdir -p "$work/probe" && python3 bench/fdatasync.py "$work/probe" 3000 | sed "s/^/rep=$rep /"
  for bin in $BINS; do
    open_loop "$bin" single "$work/one.targets" 5000
    open_loop "$bin" batch20 "$work/twenty.targets" 1000
    closed_loop "$bin" interval 1 64
    closed_loop "$bin" always 1000 8
  done
done
