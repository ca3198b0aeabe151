#!/usr/bin/env bash
# The feature store beside Redis 7, in one command (bench/compare.sh runs it as its last step):
#
#   bench/features.sh           # REPS=3 by default; about 12 minutes on the 2-core box
#
# 1. Reads: a Veltrix server and a Redis server (no persistence), each holding the same
#    1,000,000 16-byte keys with a 128-byte value (the features-*/kv-* workloads of
#    loadtest/workloads/, which differ only in scenario and endpoint; preloaded once, by the
#    first run), one system at a time:
#    - GET at a fixed offered rate of 20,000/s, open loop (features-get.toml / kv-get.toml):
#      p50/p99/p99.9 from the intended send time;
#    - GET throughput, closed loop, 50 connections, no pipelining;
#    - batch reads of 100 keys (POST /v1/features/query / MGET), closed loop: values/s.
# 2. Ingest (ingest.toml, 1000-event NDJSON requests, fsync always) with the feature store off
#    (events without an entity), with the built-in features (an entity per event, 100,000
#    entities), and with three windowed aggregates declared as well. Interleaved per rep.
# 3. Restart: RESTART_EVENTS events over RESTART_ENTITIES entities (with the three
#    aggregates), then time to ready (vx_bootstrap_duration_seconds) from the shutdown
#    snapshot, and rebuilt from the log with the snapshots removed; anonymous memory (RssAnon)
#    per entity, against an empty server.
# 4. The Redis protocol (SECTIONS=resp): kv-70-25-5.toml with kv_type=hash, unchanged but for its
#    endpoint, against Veltrix's RESP listener (fsync always: every HSET/DEL durable before its
#    reply) and Redis (appendonly yes, appendfsync everysec), one system at a time, the same
#    1,000,000 preloaded keys: GET only and the 70/25/5 mix, closed loop, 50 connections,
#    pipeline depth 1 and 16. Interleaved per rep. During the HGET-only runs that preload
#    nothing, the CPU of the server and of vx-loadtest is read from /proc (a second table:
#    µs per operation and share of a core of each), since the two share the box's cores.
# Each measurement is repeated REPS times; the table shows medians. Every run's line, with the
# load average before it, goes to docs/bench/features-runs.txt; the table between the
# `features:begin` and `features:end` markers of docs/BENCHMARKS.md is rewritten.
#
# Parameters (environment): REPS=3 WARMUP_S=2 MEASURE_S=10 RESTART_EVENTS=10000000
#   RESTART_ENTITIES=1000000 SKIP_BUILD=0 KEEP_WORK=0 SECTIONS="reads ingest restart" (the
#   sections to run) RESULTS_FROM=FILE (results of sections run before, `key value` lines as
#   this script keeps them, for a table of all three) VX_PORT=17100 REDIS_PORT=16379
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
source bench/lib.sh

REPS=${REPS:-3}
WARMUP_S=${WARMUP_S:-2}
MEASURE_S=${MEASURE_S:-10}
RESTART_EVENTS=${RESTART_EVENTS:-10000000}
RESTART_ENTITIES=${RESTART_ENTITIES:-1000000}
# The ports bench/compare.sh uses, not the defaults, so a server of one's own is left alone.
PORT=${VX_PORT:-17100}
REDIS_PORT=${REDIS_PORT:-16379}

need=()
command -v jq >/dev/null || need+=(jq)
command -v redis-server >/dev/null || need+=(redis-server)
if ((${#need[@]})); then
  log "installing ${need[*]}"
  as_root apt-get update -qq && as_root apt-get install -y -qq "${need[@]}" >/dev/null
fi
refuse_if_listening "$PORT" "$REDIS_PORT" "${RESP_PORT:-16380}"
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  cargo build --release -q -p veltrix -p vx-loadtest
fi
VX=$ROOT/target/release/veltrix
LT=$ROOT/target/release/vx-loadtest
W=$ROOT/loadtest/workloads

bench_init features
[[ -n ${RESULTS_FROM:-} ]] && cat "$RESULTS_FROM" >>"$RESULTS"
SECTIONS=${SECTIONS:-reads ingest restart resp}
RESP_PORT=${RESP_PORT:-16380}
echo "# bench/features.sh $(date -u +%FT%TZ) REPS=$REPS MEASURE_S=$MEASURE_S" >>"$RUNS"
# lt NAME WORKLOAD [--set …]: one vx-loadtest run; echoes the report path.
lt() {
  local name=$1 wl=$2; shift 2
  local out=$WORK/$name-$RANDOM.json
  "$LT" run "$W/$wl" --set "warmup_s=$WARMUP_S" --set "measure_s=$MEASURE_S" -q --json "$out" "$@" >/dev/null
  echo "$out"
}
start_veltrix() { # data_dir [args…]
  local dir=$1; shift
  "$VX" serve --data-dir "$dir" --listen "127.0.0.1:$PORT" "$@" >>"$WORK/veltrix.log" 2>&1 &
  PID=$!
  wait_ready
}
metric() { curl -s "localhost:$PORT/metrics" | awk -v m="$1" '$1==m {print $2}'; }

decl3_yaml "$WORK/decl3.yaml"

# ---- 1. reads ---------------------------------------------------------------------------------
CLOSED=(--set read_pct=100 --set write_pct=0 --set delete_pct=0 --set query_pct=0)
# read_reps KEY SCENARIO ENDPOINT: REPS rounds of the three read measurements against the
# running server, KEY prefixing the results (the first round preloads the keys).
read_reps() {
  local key=$1 sc=$2 ep=(--set "endpoints=$3") rep pre l j
  for rep in $(seq 1 "$REPS"); do
    pre=(); [[ $rep == 1 ]] || pre=(--set preload_keys=0)
    l=$(load1); j=$(lt "$key-get" "$sc-get.toml" "${ep[@]}" "${pre[@]}")
    record "${key}_get20k_p50" "$(jqr .operations.get.latency_ms.p50 "$j")" "rep=$rep p99=$(jqr .operations.get.latency_ms.p99 "$j") p999=$(jqr .operations.get.latency_ms.p999 "$j") load1_before=$l"
    record "${key}_get20k_p99" "$(jqr .operations.get.latency_ms.p99 "$j")"
    record "${key}_get20k_p999" "$(jqr .operations.get.latency_ms.p999 "$j")"
    l=$(load1); j=$(lt "$key-getc" "$sc-70-25-5.toml" "${ep[@]}" --set preload_keys=0 "${CLOSED[@]}")
    record "${key}_get_ops" "$(jqr .operations.get.ops_per_s "$j")" "rep=$rep closed loop p99=$(jqr .operations.get.latency_ms.p99 "$j") load1_before=$l"
    l=$(load1); j=$(lt "$key-query" "$sc-query.toml" "${ep[@]}" --set preload_keys=0)
    record "${key}_query_values" "$(jqr .operations.query.values_per_s "$j")" "rep=$rep batch of 100 p99=$(jqr .operations.query.latency_ms.p99 "$j") load1_before=$l"
  done
}
if want reads; then
  log "reads: Veltrix (preloading 1M entities)"
  start_veltrix "$WORK/reads"
  read_reps vx features "http://127.0.0.1:$PORT"
  stop
  log "reads: Redis"
  mkdir -p "$WORK/redis"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$WORK/redis" --save '' \
    --appendonly no --logfile "$WORK/redis/log" &
  PID=$!
  sleep 0.5
  read_reps redis kv "resp://127.0.0.1:$REDIS_PORT"
  stop
fi
redis_ver=$(redis-server --version | sed -E 's/.*v=([^ ]+).*/\1/')

# ---- 2. ingest with and without features ------------------------------------------------------
want ingest && for rep in $(seq 1 "$REPS"); do
  for mode in off builtins decl3; do
    args=(); set_=()
    [[ $mode == decl3 ]] && args=(--config "$WORK/decl3.yaml")
    [[ $mode == off ]] && set_=(--set entities=false)
    rm -rf "$WORK/ingest"
    start_veltrix "$WORK/ingest" "${args[@]}"
    l=$(load1); j=$(lt "ingest-$mode" ingest.toml --set "endpoints=http://127.0.0.1:$PORT" "${set_[@]}")
    record "ingest_$mode" "$(jqr .operations.ingest.events_per_s "$j")" "rep=$rep features=$mode p99=$(jqr .operations.ingest.latency_ms.p99 "$j") load1_before=$l"
    stop
  done
done

# ---- 3. restart -------------------------------------------------------------------------------
events=0 entities=0 log_bytes=0 snap_bytes=0
if want restart; then
log "restart: $RESTART_EVENTS events over $RESTART_ENTITIES entities"
D=$WORK/restart
rm -rf "$D"
start_veltrix "$WORK/empty"
empty_kb=$(rss_anon_kb "$PID")
stop
start_veltrix "$D" --config "$WORK/decl3.yaml"
# Closed loop until the events are in: 4 connections of 1000-event requests.
"$LT" run "$W/ingest.toml" --set "endpoints=http://127.0.0.1:$PORT" --set warmup_s=0 \
  --set measure_s=600 --set "key_space=$RESTART_ENTITIES" \
  --set distribution=uniform -q --json "$WORK/fill.json" >/dev/null &
FILL=$!
while kill -0 "$FILL" 2>/dev/null; do
  n=$(curl -s "localhost:$PORT/metrics" | awk '$1=="vx_stored_events_total" {print $2}')
  [[ ${n%.*} -ge $RESTART_EVENTS ]] && break
  sleep 0.2
done
kill -9 "$FILL" 2>/dev/null || true
wait "$FILL" 2>/dev/null || true
entities=$(metric vx_feature_entities)
events=$(metric vx_stored_events_total)
stop
log_bytes=$(du -sb "$D/log" | cut -f1)
for rep in $(seq 1 "$REPS"); do
  l=$(load1)
  start_veltrix "$D" --config "$WORK/decl3.yaml"
  record restart_snapshot_s "$(metric vx_bootstrap_duration_seconds)" "rep=$rep from snapshot events=$events entities=$entities load1_before=$l"
  kb=$(rss_anon_kb "$PID")
  record rss_per_entity_b "$(( (kb - empty_kb) * 1024 / ${entities%.*} ))" "rep=$rep RssAnon=${kb}kB empty=${empty_kb}kB"
  snap_bytes=$(du -sb "$D/snapshots" | cut -f1)
  stop
done
for rep in $(seq 1 "$REPS"); do
  rm -rf "$D/snapshots"
  l=$(load1)
  start_veltrix "$D" --config "$WORK/decl3.yaml"
  record restart_log_s "$(metric vx_bootstrap_duration_seconds)" "rep=$rep rebuilt from the log load1_before=$l"
  stop
done
fi

# ---- 4. the Redis protocol ----------------------------------------------------------------------
# resp_round KEY ENDPOINT REP: GET-only and the mix at depth 1 and 16 against the running server
# (the first round preloads the keys); ops/s of all operations.
# lt_cpu NAME WORKLOAD [--set …]: `lt` for a run that preloads nothing, and the CPU that the
# server ($PID, all its threads) and vx-loadtest used in the middle of the measured window
# (from /proc, in clock ticks), written to the report's path with `.cpu` added: server ticks,
# vx-loadtest ticks, seconds sampled.
lt_cpu() {
  local name=$1 wl=$2; shift 2
  local out=$WORK/$name-$RANDOM.json lp a b secs=$((MEASURE_S - 2))
  "$LT" run "$W/$wl" --set "warmup_s=$WARMUP_S" --set "measure_s=$MEASURE_S" -q --json "$out" "$@" >/dev/null &
  lp=$!
  sleep $((WARMUP_S + 1))
  a="$(cpu_ticks "$PID") $(cpu_ticks "$lp")"
  sleep "$secs"
  b="$(cpu_ticks "$PID") $(cpu_ticks "$lp")"
  wait "$lp"
  echo "$a $b $secs" | awk '{print $3 - $1, $4 - $2, $5}' >"$out.cpu"
  echo "$out"
}
# cpu_record KEY REPORT OPS: each side's share of a core and CPU µs per operation, from lt_cpu.
cpu_record() {
  local key=$1 ops=$3 srv lt secs hz
  hz=$(getconf CLK_TCK)
  read -r srv lt secs <"$2.cpu"
  record "${key}_srv_pct" "$(awk -v t="$srv" -v s="$secs" -v h="$hz" 'BEGIN {printf "%.0f", 100 * t / h / s}')"
  record "${key}_lt_pct" "$(awk -v t="$lt" -v s="$secs" -v h="$hz" 'BEGIN {printf "%.0f", 100 * t / h / s}')"
  record "${key}_srv_us" "$(awk -v t="$srv" -v s="$secs" -v h="$hz" -v o="$ops" 'BEGIN {printf "%.2f", 1e6 * t / h / s / o}')"
  record "${key}_lt_us" "$(awk -v t="$lt" -v s="$secs" -v h="$hz" -v o="$ops" 'BEGIN {printf "%.2f", 1e6 * t / h / s / o}')"
}
resp_round() {
  local key=$1 ep=(--set "endpoints=$2" --set kv_type=hash) rep=$3 pre=() l j d ops
  [[ $rep == 1 ]] || pre=(--set preload_keys=0)
  for d in 1 16; do
    l=$(load1)
    # The CPU split needs the measured window's place in time: not known after a preload.
    if [[ ${#pre[@]} == 0 ]]; then
      j=$(lt "$key-rget$d" kv-70-25-5.toml "${ep[@]}" --set "pipeline_depth=$d" "${CLOSED[@]}")
    else
      j=$(lt_cpu "$key-rget$d" kv-70-25-5.toml "${ep[@]}" "${pre[@]}" --set "pipeline_depth=$d" "${CLOSED[@]}")
      cpu_record "${key}_resp_get_d$d" "$j" "$(jqr .operations.get.ops_per_s "$j")"
    fi
    pre=(--set preload_keys=0)
    record "${key}_resp_get_d$d" "$(jqr .operations.get.ops_per_s "$j")" "rep=$rep GET only depth=$d p50=$(jqr .operations.get.latency_ms.p50 "$j") p99=$(jqr .operations.get.latency_ms.p99 "$j") errors=$(jqr '[.operations[].errors] | add' "$j") load1_before=$l"
    l=$(load1); j=$(lt "$key-rmix$d" kv-70-25-5.toml "${ep[@]}" --set preload_keys=0 --set "pipeline_depth=$d")
    ops=$(jqr '[.operations[].ops_per_s] | add' "$j")
    record "${key}_resp_mix_d$d" "$ops" "rep=$rep 70/25/5 depth=$d get_p99=$(jqr .operations.get.latency_ms.p99 "$j") set_p99=$(jqr .operations.set.latency_ms.p99 "$j") errors=$(jqr '[.operations[].errors] | add' "$j") load1_before=$l"
  done
}
if want resp; then
  mkdir -p "$WORK/redis-aof"
  for rep in $(seq 1 "$REPS"); do
    log "resp: rep $rep: Veltrix"
    start_veltrix "$WORK/resp" --resp-listen "127.0.0.1:$RESP_PORT" --fsync always
    resp_round vxresp "resp://127.0.0.1:$RESP_PORT" "$rep"
    stop
    log "resp: rep $rep: Redis (appendfsync everysec)"
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$WORK/redis-aof" --save '' \
      --appendonly yes --appendfsync everysec --logfile "$WORK/redis-aof/log" &
    PID=$!
    sleep 1
    resp_round redisaof "resp://127.0.0.1:$REDIS_PORT" "$rep"
    stop
  done
fi

# ---- the table --------------------------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%+.0f %%", (a / b - 1) * 100; else print "n/a" }'; }
k() { awk -v v="$1" 'BEGIN { printf "%.0f", v }'; }
vx_get=$(med vx_get_ops); rd_get=$(med redis_get_ops)
vx_q=$(med vx_query_values); rd_q=$(med redis_query_values)
off=$(med ingest_off); bi=$(med ingest_builtins); d3=$(med ingest_decl3)
table=$(cat <<EOF
Measured by \`bench/features.sh\` on $(date -u +%F): $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $(uname -r); Veltrix $(git rev-parse --short HEAD) (\`fsync: always\`), Redis $redis_ver (no persistence). Medians of $REPS runs of ${MEASURE_S} s (warm-up ${WARMUP_S} s); every run with its load average is in \`docs/bench/features-runs.txt\`. vx-loadtest shares the two cores with the server it measures. Keys: 1,000,000 entities of 16 bytes with one 128-byte value, Zipfian α 0.99, 50 connections, one request in flight each; the Veltrix and Redis workloads differ only in scenario and endpoint.

| measurement | Veltrix (HTTP/1.1) | Redis 7 (RESP) | Veltrix ÷ Redis |
| --- | --- | --- | --- |
| GET at 20,000/s offered, open loop: p50 / p99 / p99.9 ms | $(med vx_get20k_p50) / $(med vx_get20k_p99) / $(med vx_get20k_p999) | $(med redis_get20k_p50) / $(med redis_get20k_p99) / $(med redis_get20k_p999) | |
| GET throughput, closed loop (ops/s) | $(k "$vx_get") | $(k "$rd_get") | $(ratio "$vx_get" "$rd_get")× |
| batch reads of 100 keys (values/s): \`POST /v1/features/query\` / \`MGET\` | $(k "$vx_q") | $(k "$rd_q") | $(ratio "$vx_q" "$rd_q")× |

| ingest (ingest.toml: 1000-event NDJSON requests, 4 connections, fsync always) | events/s | vs off |
| --- | --- | --- |
| feature store off (events without an entity) | $(k "$off") | |
| built-in features (an entity per event, 100,000 entities) | $(k "$bi") | $(pct "$bi" "$off") |
| built-ins + 3 windowed aggregates (count 5m, count 1h, distinct streams 1d) | $(k "$d3") | $(pct "$d3" "$off") |

| restart with $(k "$events") events over $(k "$entities") entities (built-ins + the 3 aggregates; log $((log_bytes / 1048576)) MiB, snapshot $((snap_bytes / 1048576)) MiB) | seconds to ready |
| --- | --- |
| from the shutdown snapshot | $(awk -v v="$(med restart_snapshot_s)" 'BEGIN { printf "%.2f", v }') |
| rebuilt from the log (snapshots removed) | $(awk -v v="$(med restart_log_s)" 'BEGIN { printf "%.2f", v }') |

Anonymous memory per entity (RssAnon after the restart from the snapshot, minus an empty server's, ÷ entities): $(med rss_per_entity_b) bytes.

EOF
)
resp_table=$(cat <<EOF
Measured by \`bench/features.sh\` (SECTIONS=resp) on $(date -u +%F): $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(uname -r); Veltrix $(git rev-parse --short HEAD), Redis $redis_ver. Medians of $REPS runs of ${MEASURE_S} s (warm-up ${WARMUP_S} s), the two systems alternating per rep; every run with its load average is in \`docs/bench/features-runs.txt\`. vx-loadtest shares the two cores with the server it measures.

The Redis protocol (\`kv-70-25-5.toml\` with \`kv_type=hash\`, 1,000,000 keys, Zipfian α 0.99, 50 connections, closed loop; Veltrix's RESP listener at \`fsync: always\`, Redis with \`appendonly yes\`, \`appendfsync everysec\`; operations/s of all operations):

| RESP, closed loop | Veltrix (RESP) | Redis 7 (AOF everysec) | Veltrix ÷ Redis |
| --- | --- | --- | --- |
| HGET only, depth 1 | $(k "$(med vxresp_resp_get_d1)") | $(k "$(med redisaof_resp_get_d1)") | $(ratio "$(med vxresp_resp_get_d1)" "$(med redisaof_resp_get_d1)")× |
| HGET only, pipeline depth 16 | $(k "$(med vxresp_resp_get_d16)") | $(k "$(med redisaof_resp_get_d16)") | $(ratio "$(med vxresp_resp_get_d16)" "$(med redisaof_resp_get_d16)")× |
| 70/25/5 HGET/HSET/DEL, depth 1 | $(k "$(med vxresp_resp_mix_d1)") | $(k "$(med redisaof_resp_mix_d1)") | $(ratio "$(med vxresp_resp_mix_d1)" "$(med redisaof_resp_mix_d1)")× |
| 70/25/5 HGET/HSET/DEL, pipeline depth 16 | $(k "$(med vxresp_resp_mix_d16)") | $(k "$(med redisaof_resp_mix_d16)") | $(ratio "$(med vxresp_resp_mix_d16)" "$(med redisaof_resp_mix_d16)")× |

Where the two cores went during HGET only (from \`/proc\` over the middle $((MEASURE_S - 2)) s of each measured window, medians of the runs without a preload): CPU µs per operation, and in brackets the share of one core, of the server and of vx-loadtest beside it. Redis runs its commands on one thread; vx-loadtest's cost per operation is the same against either server, so the core it takes is the core a server does not get.

| HGET only | Veltrix server | vx-loadtest (Veltrix) | Redis server | vx-loadtest (Redis) |
| --- | --- | --- | --- | --- |
$(for d in 1 16; do
  printf '| depth %s |' "$d"
  for side in vxresp_resp_get_d${d}_srv vxresp_resp_get_d${d}_lt redisaof_resp_get_d${d}_srv redisaof_resp_get_d${d}_lt; do
    printf ' %s µs (%s%%) |' "$(med "${side}_us")" "$(med "${side}_pct")"
  done
  echo
done)
EOF
)
# put_table MARKER TITLE TABLE: replace the block between the marker comments of BENCHMARKS.md.
put_table() {
  python3 - "$ROOT/docs/BENCHMARKS.md" "$1" "$2" "$3" <<'PY'
import sys
path, marker, title, table = sys.argv[1:5]
s = open(path).read()
b, e = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
if b in s and e in s:
    s = s[: s.index(b) + len(b)] + "\n" + table + "\n" + s[s.index(e):]
else:
    s = s.rstrip("\n") + f"\n\n## {title}\n\n" + b + "\n" + table + "\n" + e + "\n"
open(path, "w").write(s)
PY
}
if want reads || want ingest || want restart; then
  put_table features "Feature store" "$table"
  echo "$table"
fi
if want resp; then
  put_table features-resp "Feature store over the Redis protocol" "$resp_table"
  echo "$resp_table"
fi
