#!/usr/bin/env bash
# Veltrix beside its peers, in one command:
#
#   bench/compare.sh            # REPS=3 by default; about 12 minutes on the 2-core box
#
# Builds release, then one system at a time (each started on loopback with its data in a
# temporary directory, stopped by its PID before the next starts):
#   1. Veltrix (`veltrix serve`, fsync always) driven by vx-loadtest with the workloads of
#      loadtest/workloads/: acked ingest over HTTP (ingest.toml) and frames
#      (ingest-frames.toml), ack latency at a fixed offered rate (ingest-latency.toml, and the
#      same rate as single-event frames), replay as whole-stream scans and as 256-event pages
#      (replay-pages.toml). A fresh data dir for every run.
#   2. NATS JetStream (Debian nats-server -js, file storage), via bench/peers/nats.sh
#      (`nats bench` async publish with acks; ordered-consumer replay).
#   3. Kafka 3.9 (KRaft, one broker, jars from Maven Central), via bench/peers/kafka.sh
#      (ProducerPerformance acks=all, unthrottled and throttled to the same event rate, with
#      linger.ms=5 and 0; ConsumerPerformance).
#   4. Redis 7 (Debian redis-server), driven by vx-loadtest with kv-70-25-5.toml, without
#      persistence and with AOF everysec, and GET-only: the reference for the feature store's
#      reads, and for Veltrix's smallest read (a 1-event page, also measured in step 1).
#   5. The feature store beside Redis: bench/features.sh (reads at a fixed rate and closed
#      loop, batch reads, ingest with features on and off, restart from a snapshot and from
#      the log), which rewrites its own table; FEATURES=0 skips it (it adds ~10 minutes).
# Each measurement is repeated REPS times; the table shows medians. Every run's line, with the
# load average before it, goes to docs/bench/compare-runs.txt. The table in docs/BENCHMARKS.md
# between the `compare:begin` and `compare:end` markers is rewritten, with the machine, the
# versions and the parameters; one run's plot is kept as docs/bench/ingest-latency.svg.
#
# The load generators share the machine's cores with the system they measure.
#
# Parameters (environment): REPS=3 WARMUP_S=3 MEASURE_S=10 LAT_RATE=20000 (events/s)
#   REPLAY_EVENTS=2000000 (events of the scanned stream; Kafka's RECORDS is set to match)
#   NATS_MSGS=500000 KEEP_WORK=0 (keep the temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh

REPS=${REPS:-3}
WARMUP_S=${WARMUP_S:-3}
MEASURE_S=${MEASURE_S:-10}
LAT_RATE=${LAT_RATE:-20000}
REPLAY_EVENTS=${REPLAY_EVENTS:-2000000}
NATS_MSGS=${NATS_MSGS:-500000}
VX_PORT=${VX_PORT:-17100}
VX_FRAMES_PORT=${VX_FRAMES_PORT:-17101}
REDIS_PORT=${REDIS_PORT:-16379}
DOC=docs/BENCHMARKS.md
RUNS=docs/bench/compare-runs.txt

log() { echo "# $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need=()
command -v jq >/dev/null || need+=(jq)
command -v redis-server >/dev/null || need+=(redis-server)
command -v nats-server >/dev/null || need+=(nats-server)
command -v mvn >/dev/null || need+=(maven)
command -v java >/dev/null || need+=(default-jre-headless)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  as_root apt-get update >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2
fi

WORK=$(mktemp -d /tmp/vx-compare.XXXXXX)
PID=""
stop() { stop_pid "$PID"; PID=""; }
cleanup() { stop; [[ ${KEEP_WORK:-0} == 1 ]] || rm -rf "$WORK"; }
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

refuse_if_listening "$VX_PORT" "$VX_FRAMES_PORT" "$REDIS_PORT"

log "building release"
cargo build --release -p veltrix -p vx-loadtest >&2
VX="$ROOT/target/release/veltrix"
LT="$ROOT/target/release/vx-loadtest"
W="$ROOT/loadtest/workloads"

mkdir -p docs/bench
: >"$RUNS"
RESULTS="$WORK/results" # key value, one line per repetition
: >"$RESULTS"
load1() { cut -d" " -f1 /proc/loadavg; }
record() { # key value [context…]
  echo "$1 $2" >>"$RESULTS"
  echo "$*" >>"$RUNS"
  log "$*"
}
med() { awk -v k="$1" '$1==k {print $2}' "$RESULTS" | median; }

# ---- Veltrix ---------------------------------------------------------------------------------
start_veltrix() {
  # The previous run's data (gigabytes after an ingest run) is removed and the page cache
  # written back first, so that its cleanup does not stall this run's fsyncs.
  rm -rf "$WORK/vx"; sync; mkdir -p "$WORK/vx"
  "$VX" serve --data-dir "$WORK/vx/data" --listen "127.0.0.1:$VX_PORT" \
    --frames-listen "127.0.0.1:$VX_FRAMES_PORT" --fsync always >"$WORK/vx/log" 2>&1 &
  PID=$!
  for _ in $(seq 1 300); do
    curl -fs "http://127.0.0.1:$VX_PORT/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  cat "$WORK/vx/log" >&2; echo "veltrix did not become ready" >&2; exit 1
}

# lt KEY WORKLOAD [--set …]: one vx-loadtest run; echoes the report path.
lt() {
  local key=$1 wl=$2; shift 2
  local json="$WORK/$key.json"
  "$LT" run "$W/$wl" -q --set "warmup_s=$WARMUP_S" --set "measure_s=$MEASURE_S" "$@" \
    --json "$json" >"$WORK/$key.txt"
  echo "$json"
}
jqr() { jq -r "$1" "$2"; }

HTTP="endpoints=\"http://127.0.0.1:$VX_PORT\""
FRAMES="endpoints=\"frames://127.0.0.1:$VX_FRAMES_PORT\""
LAT_REQ=$((LAT_RATE / 20))
for rep in $(seq 1 "$REPS"); do
  start_veltrix; l=$(load1)
  j=$(lt vx-http ingest.toml --set "$HTTP")
  record vx_http "$(jqr .operations.ingest.events_per_s "$j")" "rep=$rep veltrix ingest ndjson/http batch=1000 connections=4 events_per_s load1_before=$l"
  stop

  start_veltrix; l=$(load1)
  j=$(lt vx-frames ingest-frames.toml --set "$FRAMES")
  record vx_frames "$(jqr .operations.ingest.events_per_s "$j")" "rep=$rep veltrix ingest frames batch=1000 connections=4 depth=4 events_per_s load1_before=$l"
  stop

  start_veltrix; l=$(load1)
  j=$(lt vx-lat ingest-latency.toml --set "$HTTP" --set "rate=$LAT_REQ")
  [[ $rep == 1 ]] && "$LT" merge "$j" --plot docs/bench/ingest-latency.svg >/dev/null
  for p in p50 p99 p999; do record "vx_lat_$p" "$(jqr ".operations.ingest.latency_ms.$p" "$j")"; done
  record vx_lat_late "$(jqr .late_sends.late "$j")" "rep=$rep veltrix ack latency http batch=20 rate=${LAT_REQ}req/s fsync p50=$(jqr .operations.ingest.latency_ms.p50 "$j") p99=$(jqr .operations.ingest.latency_ms.p99 "$j") late_sends load1_before=$l"
  stop

  start_veltrix; l=$(load1)
  j=$(lt vx-lat1 ingest-latency.toml --set "$FRAMES" --set "rate=$LAT_RATE" --set batch=1 \
        --set connections=4 --set pipeline_depth=256)
  for p in p50 p99 p999; do record "vx_lat1_$p" "$(jqr ".operations.ingest.latency_ms.$p" "$j")"; done
  record vx_lat1_late "$(jqr .late_sends.late "$j")" "rep=$rep veltrix ack latency frames batch=1 rate=${LAT_RATE}/s fsync p50=$(jqr .operations.ingest.latency_ms.p50 "$j") p99=$(jqr .operations.ingest.latency_ms.p99 "$j") late_sends load1_before=$l"
  stop

  # Replay: one stream of REPLAY_EVENTS 128-byte events (written by the workload's preload,
  # before the clock starts), read whole; then 256-event pages.
  start_veltrix; l=$(load1)
  j=$(lt vx-scan replay-pages.toml --set "$HTTP" --set stream_prefix='"scan-"' --set streams=1 \
        --set "preload_events=$REPLAY_EVENTS" --set scan_pct=100 --set connections=1 --set warmup_s=0)
  record vx_scan "$(jqr .operations.scan.events_per_s "$j")" "rep=$rep veltrix replay whole-stream scan events=$(jqr .operations.scan.events "$j") events_per_s load1_before=$l"
  l=$(load1)
  j=$(lt vx-pages replay-pages.toml --set "$HTTP")
  record vx_pages "$(jqr .operations.page.events_per_s "$j")" "rep=$rep veltrix replay 256-event pages events_per_s p99=$(jqr .operations.page.latency_ms.p99 "$j") load1_before=$l"
  record vx_pages_p99 "$(jqr .operations.page.latency_ms.p99 "$j")"
  # The smallest read: one event per request, 50 connections (Redis's GET shape below).
  l=$(load1)
  j=$(lt vx-point replay-pages.toml --set "$HTTP" --set page_events=1 --set connections=50)
  record vx_point "$(jqr .operations.page.ops_per_s "$j")" "rep=$rep veltrix 1-event reads connections=50 ops_per_s p50=$(jqr .operations.page.latency_ms.p50 "$j") p99=$(jqr .operations.page.latency_ms.p99 "$j") load1_before=$l"
  record vx_point_p50 "$(jqr .operations.page.latency_ms.p50 "$j")"
  record vx_point_p99 "$(jqr .operations.page.latency_ms.p99 "$j")"
  stop
done

# ---- NATS JetStream --------------------------------------------------------------------------
rm -rf "$WORK/vx"; sync
log "NATS JetStream"
nats_out=$(REPS=$REPS MSGS_1=$NATS_MSGS MSGS_4=$((NATS_MSGS * 8 / 5)) MSG_SIZE=128 \
  WORKDIR="$WORK/nats" bash bench/peers/nats.sh)
echo "$nats_out" | grep '^nats-run' >>"$RUNS"
field() { sed -E "s/.* $1=([^ ]+).*/\1/"; }
nats_pub1=$(echo "$nats_out" | grep '^nats js_pub_async .*publishers=1 ' | field msgs_per_s)
nats_pub4=$(echo "$nats_out" | grep '^nats js_pub_async .*publishers=4 ' | field msgs_per_s)
nats_ord=$(echo "$nats_out" | grep '^nats js_replay_ordered .*after_publishers=4 ' | field msgs_per_s)
nats_ver=$(nats-server --version 2>&1 | head -1)

# ---- Kafka -----------------------------------------------------------------------------------
log "Kafka"
kafka_out=$(REPS=$REPS RECORDS=$REPLAY_EVENTS RECORD_SIZE=128 LAT_RATE=$LAT_RATE \
  LAT_RECORDS=$((LAT_RATE * MEASURE_S)) WORKDIR="$WORK/kafka" bash bench/peers/kafka.sh)
echo "$kafka_out" | grep '^kafka-run' >>"$RUNS"
k_prod=$(echo "$kafka_out" | grep '^kafka produce ' | field msgs_per_s)
k_cons=$(echo "$kafka_out" | grep '^kafka consume ' | field msgs_per_s)
k_fetch=$(echo "$kafka_out" | grep '^kafka consume ' | field fetch_msgs_per_s)
k_p50=$(echo "$kafka_out" | grep '^kafka produce_throttled ' | field p50_ms)
k_p99=$(echo "$kafka_out" | grep '^kafka produce_throttled ' | field p99_ms)
k_p999=$(echo "$kafka_out" | grep '^kafka produce_throttled ' | field p999_ms)
k0_p50=$(echo "$kafka_out" | grep '^kafka produce_throttled_nolinger ' | field p50_ms)
k0_p99=$(echo "$kafka_out" | grep '^kafka produce_throttled_nolinger ' | field p99_ms)
k0_p999=$(echo "$kafka_out" | grep '^kafka produce_throttled_nolinger ' | field p999_ms)
kafka_ver=${KAFKA_VERSION:-3.9.1}

# ---- Redis -----------------------------------------------------------------------------------
log "Redis"
RESP="endpoints=\"resp://127.0.0.1:$REDIS_PORT\""
for mode in none aof; do
  for rep in $(seq 1 "$REPS"); do
    rm -rf "$WORK/redis"; mkdir -p "$WORK/redis"
    persist=(--save "" --appendonly no)
    [[ $mode == aof ]] && persist=(--save "" --appendonly yes --appendfsync everysec)
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$WORK/redis" \
      --logfile "$WORK/redis/log" "${persist[@]}" &
    PID=$!
    for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT") 2>/dev/null && break; sleep 0.1; done
    l=$(load1)
    j=$(lt "redis-$mode" kv-70-25-5.toml --set "$RESP")
    total=$(jq -r '[.operations[].ops_per_s] | add' "$j")
    record "redis_${mode}_ops" "$total" "rep=$rep redis mode=$mode kv 70/25/5 zipf ops_per_s get_p50=$(jqr .operations.get.latency_ms.p50 "$j") get_p99=$(jqr .operations.get.latency_ms.p99 "$j") load1_before=$l"
    record "redis_${mode}_get_p50" "$(jqr .operations.get.latency_ms.p50 "$j")"
    record "redis_${mode}_get_p99" "$(jqr .operations.get.latency_ms.p99 "$j")"
    if [[ $mode == none ]]; then
      l=$(load1)
      j=$(lt redis-get kv-70-25-5.toml --set "$RESP" --set read_pct=100 --set write_pct=0 \
            --set delete_pct=0 --set preload_keys=0)
      record redis_get_ops "$(jqr .operations.get.ops_per_s "$j")" "rep=$rep redis mode=none GET only ops_per_s p50=$(jqr .operations.get.latency_ms.p50 "$j") p99=$(jqr .operations.get.latency_ms.p99 "$j") load1_before=$l"
      record redis_get_p50 "$(jqr .operations.get.latency_ms.p50 "$j")"
      record redis_get_p99 "$(jqr .operations.get.latency_ms.p99 "$j")"
    fi
    stop
  done
done
redis_ver=$(redis-server --version | sed -E 's/.*v=([^ ]+).*/\1/')

# ---- the table -------------------------------------------------------------------------------
fmt() { awk -v v="$1" 'BEGIN { if (v == "" || v == "nan") print "n/a"; else if (v >= 1e6) printf "%.2fM", v/1e6; else if (v >= 1e3) printf "%.0fk", v/1e3; else printf "%.3g", v }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b+0 == 0 || a == "nan" || b == "nan") print "n/a"; else printf "%.2f×", a/b }'; }
ms() { awk -v v="$1" 'BEGIN { if (v == "" || v == "nan") print "n/a"; else printf "%.2f", v }'; }
# ProducerPerformance reports whole milliseconds (0 means under 1 ms).
kms() { awk -v v="$1" 'BEGIN { if (v == "" || v == "nan") print "n/a"; else if (v+0 == 0) print "<1"; else printf "%g", v }'; }

vx_http=$(med vx_http); vx_frames=$(med vx_frames); vx_scan=$(med vx_scan); vx_pages=$(med vx_pages)
machine="$(nproc) vCPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r)"
table="$WORK/table.md"
{
  echo "<!-- compare:begin (written by bench/compare.sh; do not edit by hand) -->"
  echo "Measured $(date -u +%Y-%m-%d) on $machine; Veltrix $(git rev-parse --short HEAD), $nats_ver, Kafka $kafka_ver, Redis $redis_ver."
  echo "Medians of $REPS runs; each system ran alone, with the load generator on the same 2 cores."
  echo "Events and messages are 128 bytes. Veltrix runs \`--fsync always\` (every ack after fdatasync)."
  echo
  echo "| workload | system | median | Veltrix ÷ this |"
  echo "| --- | --- | --- | --- |"
  echo "| acked ingest | Veltrix, NDJSON over HTTP, 1000-event requests, 4 connections | $(fmt "$vx_http") events/s | 1.00× |"
  echo "| | Veltrix, frames, 1000-event batches, 4 connections × 4 in flight | $(fmt "$vx_frames") events/s | $(ratio "$vx_http" "$vx_frames") |"
  echo "| | NATS JetStream, file storage, async publish with acks, 1 publisher | $(fmt "$nats_pub1") msgs/s | $(ratio "$vx_http" "$nats_pub1") |"
  echo "| | NATS JetStream, same, 4 publishers | $(fmt "$nats_pub4") msgs/s | $(ratio "$vx_http" "$nats_pub4") |"
  echo "| | Kafka, 1 partition, ProducerPerformance acks=all linger.ms=5 | $(fmt "$k_prod") msgs/s | $(ratio "$vx_http" "$k_prod") |"
  echo "| ack latency at $(fmt "$LAT_RATE") events/s, open loop (p50 / p99 / p99.9 ms) | Veltrix, HTTP, 20-event requests at $LAT_REQ/s, fsync | $(ms "$(med vx_lat_p50)") / $(ms "$(med vx_lat_p99)") / $(ms "$(med vx_lat_p999)") | |"
  echo "| | Veltrix, frames, single-event batches at $LAT_RATE/s, fsync | $(ms "$(med vx_lat1_p50)") / $(ms "$(med vx_lat1_p99)") / $(ms "$(med vx_lat1_p999)") | |"
  echo "| | Kafka, producer throttled to $LAT_RATE records/s, acks=all linger.ms=5 (no fsync; whole ms) | $(kms "$k_p50") / $(kms "$k_p99") / $(kms "$k_p999") | |"
  echo "| | Kafka, same with linger.ms=0 | $(kms "$k0_p50") / $(kms "$k0_p99") / $(kms "$k0_p999") | |"
  echo "| replay | Veltrix, one stream of $(fmt "$REPLAY_EVENTS") events read whole (NDJSON over HTTP, 1 reader) | $(fmt "$vx_scan") events/s | 1.00× |"
  echo "| | Veltrix, 256-event pages from random positions, 4 readers (p99 $(ms "$(med vx_pages_p99)") ms) | $(fmt "$vx_pages") events/s | |"
  echo "| | Kafka, ConsumerPerformance of $(fmt "$REPLAY_EVENTS") records (fetch time only: $(fmt "$k_fetch")/s) | $(fmt "$k_cons") msgs/s | $(ratio "$vx_scan" "$k_cons") |"
  echo "| | NATS JetStream, ordered consumer of $(fmt $((NATS_MSGS * 8 / 5))) messages | $(fmt "$nats_ord") msgs/s | $(ratio "$vx_scan" "$nats_ord") |"
  echo "| kv 70% GET / 25% SET / 5% DEL, Zipfian 0.99, 1M keys, 50 connections (GET p50 / p99 ms) | Redis, no persistence | $(fmt "$(med redis_none_ops)") ops/s ($(ms "$(med redis_none_get_p50)") / $(ms "$(med redis_none_get_p99)")) | features: issue 8 |"
  echo "| | Redis, AOF everysec | $(fmt "$(med redis_aof_ops)") ops/s ($(ms "$(med redis_aof_get_p50)") / $(ms "$(med redis_aof_get_p99)")) | |"
  echo "| smallest read, 50 connections, closed loop (p50 / p99 ms) | Veltrix, 1-event page over HTTP (\`GET …/events?from=N&limit=1\`) | $(fmt "$(med vx_point)") reads/s ($(ms "$(med vx_point_p50)") / $(ms "$(med vx_point_p99)")) | 1.00× |"
  echo "| | Redis, GET of a 128-byte value (1M keys, Zipfian) | $(fmt "$(med redis_get_ops)") GETs/s ($(ms "$(med redis_get_p50)") / $(ms "$(med redis_get_p99)")) | $(ratio "$(med vx_point)" "$(med redis_get_ops)") |"
  echo
  echo "Parameters: REPS=$REPS WARMUP_S=$WARMUP_S MEASURE_S=$MEASURE_S LAT_RATE=$LAT_RATE REPLAY_EVENTS=$REPLAY_EVENTS NATS_MSGS=$NATS_MSGS; workloads in loadtest/workloads/; every run with its load average in docs/bench/compare-runs.txt."
  echo "<!-- compare:end -->"
} >"$table"

if grep -q '<!-- compare:begin' "$DOC"; then
  awk -v t="$table" '
    /<!-- compare:begin/ { while ((getline line < t) > 0) print line; skip = 1; next }
    /<!-- compare:end -->/ { skip = 0; next }
    !skip { print }' "$DOC" >"$WORK/doc" && cp "$WORK/doc" "$DOC"
else
  { echo; cat "$table"; } >>"$DOC"
fi
cat "$table"

# ---- the feature store beside Redis (its own table, between the features markers) ----------
if [[ ${FEATURES:-1} == 1 ]]; then
  stop
  SKIP_BUILD=1 REPS=$REPS bench/features.sh >/dev/null
fi
