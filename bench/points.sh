#!/usr/bin/env bash
# Small reads and Redis's stream commands beside Redis (issue 32), in one sitting:
#
#   bench/points.sh                 # REPS=3; about 15 minutes on the 2-core box
#   OLD=/path/to/old/checkout bench/points.sh   # also the same pages and scans on an older build
#
# One Veltrix (`--fsync always`, HTTP and the Redis-protocol listener) and one Redis 7 (AOF,
# `appendfsync everysec`) run side by side for the whole sitting, each filled once by
# vx-loadtest's preparation: 16 streams of 100,000 128-byte events (on Redis, streams with the
# ids `<seq>-0`, see docs/LOADTEST.md), 100,000 keys for Redis's GET. Then, REPS times, each
# measure in turn (the load generator shares the two cores):
#   point_http     a 1-event page over HTTP (`GET …/events?from=N&limit=1`), 50 connections, closed loop
#   point_open     the same at RATE reads/s offered, open loop (replay-point.toml): p50/p99,
#                  and the share the server itself answered within 1 ms (its histogram)
#   redis_get      Redis GET of a 128-byte value, 50 connections, closed loop
#   xrange_vx      `XRANGE s N-0 N-0` over Veltrix's RESP listener, 50 connections, closed loop
#   xrange_redis   the same on Redis's streams holding the same events
#   xadd_vx        `XADD` at pipeline depth 16, 4 connections (xadd.toml), fsync always
#   xadd_redis     the same on Redis, appendfsync everysec
#   pages          256-event pages from random positions, 4 connections (replay-pages.toml)
#   scans          whole 100k-event streams, 4 connections
# With OLD, a second server from OLD's release binary (same data, its own data dir) gets the
# pages and scans too, interleaved, so "not slower than before" is one sitting's comparison.
# Every run's line, with the load average before it, goes to docs/bench/points-runs.txt; the
# medians are printed as a table.
#
# Parameters (environment): REPS=3 WARMUP_S=2 MEASURE_S=8 RATE=20000 PORT=17300 (HTTP; RESP is
# PORT+1, Redis PORT+2, OLD's HTTP PORT+3) OLD= (a checkout with target/release/veltrix) or
# OLD_BIN= (an older veltrix binary itself); ONLY= (a regex of the measures to run, e.g.
# ONLY='point_http|redis_get|xrange' while iterating; the table then shows only those).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh

REPS=${REPS:-3}
WARMUP_S=${WARMUP_S:-2}
MEASURE_S=${MEASURE_S:-8}
RATE=${RATE:-20000}
PORT=${PORT:-17300}
RESP_PORT=$((PORT + 1))
REDIS_PORT=$((PORT + 2))
OLD_PORT=$((PORT + 3))
OLD=${OLD:-}
OLD_BIN=${OLD_BIN:-${OLD:+$OLD/target/release/veltrix}}
ONLY=${ONLY:-.}

command -v jq >/dev/null || { as_root apt-get update >&2; as_root apt-get install -y jq >&2; }
command -v redis-server >/dev/null || { as_root apt-get update >&2; as_root apt-get install -y redis-server >&2; }
cargo build --release -p veltrix -p vx-loadtest >&2
VX=$ROOT/target/release/veltrix
LT=$ROOT/target/release/vx-loadtest
W=$ROOT/loadtest/workloads

bench_init points
refuse_if_listening "$PORT" "$RESP_PORT" "$REDIS_PORT" "$OLD_PORT"
PIDS=()
stop_all() { for p in "${PIDS[@]}"; do stop_pid "$p"; done; rm -rf "$WORK"; }
trap stop_all EXIT

"$VX" serve --data-dir "$WORK/vx" --listen "127.0.0.1:$PORT" --resp-listen "127.0.0.1:$RESP_PORT" \
  --fsync always >"$WORK/vx.log" 2>&1 &
PIDS+=($!)
PID=$!
wait_ready || { cat "$WORK/vx.log" >&2; exit 1; }
if [[ -n $OLD_BIN ]]; then
  "$OLD_BIN" serve --data-dir "$WORK/old" --listen "127.0.0.1:$OLD_PORT" \
    --fsync always >"$WORK/old.log" 2>&1 &
  PIDS+=($!)
  (PORT=$OLD_PORT PID=$! wait_ready) || { cat "$WORK/old.log" >&2; exit 1; }
fi
mkdir -p "$WORK/redis"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK/redis" --save '' \
  --appendonly yes --appendfsync everysec >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

HTTP="endpoints=\"http://127.0.0.1:$PORT\""
OLD_HTTP="endpoints=\"http://127.0.0.1:$OLD_PORT\""
VX_RESP="endpoints=\"resp://127.0.0.1:$RESP_PORT\""
REDIS="endpoints=\"resp://127.0.0.1:$REDIS_PORT\""

# lt KEY OP WORKLOAD [--set …]: one run; records KEY's ops/s, events/s and latency.
lt() {
  local key=$1 op=$2 wl=$3; shift 3
  [[ $key =~ $ONLY ]] || return 0
  local l; l=$(load1)
  "$LT" run "$W/$wl" -q --set "warmup_s=$WARMUP_S" --set "measure_s=$MEASURE_S" "$@" \
    --json "$WORK/r.json" >/dev/null
  local j=$WORK/r.json
  record "${key}_ops" "$(jqr ".operations.$op.ops_per_s" "$j")" \
    "rep=$rep $key events_per_s=$(jqr ".operations.$op.events_per_s" "$j") p50=$(jqr ".operations.$op.latency_ms.p50" "$j") p99=$(jqr ".operations.$op.latency_ms.p99" "$j") errors=$(jqr ".operations.$op.errors // 0" "$j") load1_before=$l"
  record "${key}_events" "$(jqr ".operations.$op.events_per_s" "$j")"
  record "${key}_p50" "$(jqr ".operations.$op.latency_ms.p50" "$j")"
  record "${key}_p99" "$(jqr ".operations.$op.latency_ms.p99" "$j")"
}

# The server's own view of the events route (vx_http_request_duration_seconds, up to the
# response head): the share of its requests under 1 ms and the count, read before and after a
# run, so the open loop's client-side tail can be told from the server's.
srv_hist() {
  curl -s "http://127.0.0.1:$PORT/metrics" | awk '
    /^vx_http_request_duration_seconds_bucket\{le="0.001",route="\/v1\/streams\/\{stream\}\/events"\}/ {u=$2}
    /^vx_http_request_duration_seconds_count\{route="\/v1\/streams\/\{stream\}\/events"\}/ {c=$2}
    END {print u+0, c+0}'
}
# lt_srv KEY …: lt, and the share of the run's reads (warm-up included) the server answered
# within 1 ms, as KEY_srv_1ms (percent).
lt_srv() {
  local key=$1
  [[ $key =~ $ONLY ]] || return 0
  local u0 c0 u1 c1
  read -r u0 c0 < <(srv_hist)
  lt "$@"
  read -r u1 c1 < <(srv_hist)
  record "${key}_srv_1ms" "$(awk -v u=$((u1 - u0)) -v c=$((c1 - c0)) 'BEGIN {printf "%.3f", c ? 100 * u / c : 0}')"
}

POINT=(--set page_events=1 --set connections=50)
for rep in $(seq 1 "$REPS"); do
  lt point_http page replay-pages.toml --set "$HTTP" "${POINT[@]}"
  lt_srv point_open page replay-point.toml --set "$HTTP" --set "rate=$RATE"
  lt redis_get get kv-70-25-5.toml --set "$REDIS" --set read_pct=100 --set write_pct=0 \
    --set delete_pct=0 --set key_space=100000
  lt xrange_vx page replay-pages.toml --set "$VX_RESP" "${POINT[@]}"
  lt xrange_redis page replay-pages.toml --set "$REDIS" "${POINT[@]}"
  lt xadd_vx xadd xadd.toml --set "$VX_RESP"
  # The ingest lane's streams from the last repetition: written with XADD *, their ids are
  # Redis's own (time-based), which the preparation of a later run refuses.
  [[ xadd_redis =~ $ONLY ]] && for s in $(seq 0 15); do redis-cli -p "$REDIS_PORT" DEL "xadd-$s" >/dev/null; done
  lt xadd_redis xadd xadd.toml --set "$REDIS"
  lt pages page replay-pages.toml --set "$HTTP"
  [[ -n $OLD_BIN ]] && lt old_pages page replay-pages.toml --set "$OLD_HTTP"
  lt scans scan replay-pages.toml --set "$HTTP" --set scan_pct=100
  [[ -n $OLD_BIN ]] && lt old_scans scan replay-pages.toml --set "$OLD_HTTP" --set scan_pct=100
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
row() { # LABEL KEY UNIT
  [[ $2 =~ $ONLY ]] || return 0
  printf '| %s | %s %s | %s / %s |\n' "$1" "$(med "${2}_$3")" "$3" "$(med "${2}_p50")" "$(med "${2}_p99")"
}
echo
echo "Measured $(date -u +%F) on $(nproc) vCPU, $(uname -r); Veltrix $(git rev-parse --short HEAD); $(redis-server --version | cut -d' ' -f3); medians of $REPS."
echo
echo '| measure | median | p50 / p99 ms |'
echo '| --- | --- | --- |'
row "1-event page over HTTP, 50 conns, closed loop" point_http ops
row "1-event page over HTTP at $RATE/s offered, open loop" point_open ops
row "Redis GET, 50 conns, closed loop" redis_get ops
row "XRANGE s N-0 N-0 on Veltrix, 50 conns" xrange_vx ops
row "XRANGE s N-0 N-0 on Redis, 50 conns" xrange_redis ops
row "XADD pipeline 16 on Veltrix (fsync always)" xadd_vx ops
row "XADD pipeline 16 on Redis (AOF everysec)" xadd_redis ops
row "256-event pages, 4 conns" pages events
[[ -n $OLD_BIN ]] && row "256-event pages, 4 conns, OLD" old_pages events
row "whole 100k-event streams, 4 conns" scans events
[[ -n $OLD_BIN ]] && row "whole 100k-event streams, 4 conns, OLD" old_scans events
echo
[[ point_open =~ $ONLY ]] && echo "open loop: the server answered $(med point_open_srv_1ms)% of the reads within 1 ms (median of runs; its own histogram, to the response head)"
echo "point read ÷ Redis GET: $(ratio "$(med point_http_ops)" "$(med redis_get_ops)")"
echo "XRANGE Veltrix ÷ Redis: $(ratio "$(med xrange_vx_ops)" "$(med xrange_redis_ops)")"
echo "XADD Veltrix ÷ Redis: $(ratio "$(med xadd_vx_ops)" "$(med xadd_redis_ops)")"
if [[ -n $OLD_BIN ]]; then
  echo "pages ÷ OLD: $(ratio "$(med pages_events)" "$(med old_pages_events)")"
  echo "scans ÷ OLD: $(ratio "$(med scans_events)" "$(med old_scans_events)")"
fi
