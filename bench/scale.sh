#!/usr/bin/env bash
# The feature store at scale on one node (issue 20 item 3), in one command:
#
#   bench/scale.sh            # N=100000000 entities; about 15 minutes and ~8 GiB of RAM here
#
# One server (`--fsync interval`, storage.max_feature_bytes=20GiB, a snapshot every
# SNAP_INTERVAL), entities named as vx-loadtest's features keys (`key:` and 12 digits), every
# event a counter of 1 (the built-ins and one counter per entity), 1000-event NDJSON requests
# from 4 connections:
# 1. fill 100,000 entities (a sequential pass), then ingest over them (uniform, 10 s, REPS times):
#    the rate at 100k;
# 2. fill N entities (sequential), timed; RssAnon growth over the empty server and
#    vx_feature_bytes per entity;
# 3. ingest over the N entities (uniform, 10 s, REPS times): the rate at N, and its ratio to 1.;
# 4. GET /v1/features/{entity} at 20,000/s offered, open loop, Zipfian over the N entities
#    (features-get.toml), REPS times: p50/p99/p99.9;
# 5. until the next periodic snapshot is written, RssAnon sampled every 0.2 s: the snapshot's
#    extra memory (peak over the RssAnon before it) and its size, and GET latency in 5-second
#    reps while it is written;
# 6. restart from the shutdown snapshot: time to ready (vx_bootstrap_duration_seconds) and
#    RssAnon; then with the snapshots removed, rebuilt from the log: time to ready.
# Every figure goes to stdout with the load average before it; docs/bench/scale-runs.txt keeps
# them.
#
# Parameters (environment): N=100000000 REPS=3 SNAP_INTERVAL=4m PORT=17400
#   DATA=(a new directory under /work or $TMPDIR; removed at the end unless KEEP=1)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh
N=${N:-100000000}
REPS=${REPS:-3}
SNAP_INTERVAL=${SNAP_INTERVAL:-4m}
PORT=${PORT:-17400}
VX=$ROOT/target/release/veltrix
LT=$ROOT/target/release/vx-loadtest
W=$ROOT/loadtest/workloads
command -v jq >/dev/null || { as_root apt-get update -qq; as_root apt-get install -y -qq jq >/dev/null; }
DATA=${DATA:-$(mktemp -d -p "${TMPDIR:-/tmp}")}
mkdir -p "$DATA"
OUT=$ROOT/docs/bench/scale-runs.txt
trap 'stop; stop_pid "${FILL:-}"; [[ ${KEEP:-0} == 1 ]] || rm -rf "$DATA"' EXIT
cat >"$DATA.yaml" <<YAML
storage:
  max_feature_bytes: 20GiB
  snapshot_interval: $SNAP_INTERVAL
YAML
COMMON=(--set "endpoints=http://127.0.0.1:$PORT" --set entity_names=keys --set counter=true
  --set key_size_b=16 --set value_size_b=1)

say() { echo "$*" | tee -a "$OUT"; }
metric() { curl -s "localhost:$PORT/metrics" | awk -v m="$1" '$1==m {print $2}'; }
imetric() { curl -s "localhost:$PORT/metrics" | awk -v m="$1" '$1==m {printf "%.0f\n", $2}'; }
rss_kb() { rss_anon_kb "$PID"; }
start() {
  "$VX" serve --data-dir "$DATA/d" --listen "127.0.0.1:$PORT" --fsync interval --config "$DATA.yaml" \
    >>"$DATA/log" 2>&1 &
  PID=$!
  until curl -sf "localhost:$PORT/readyz" >/dev/null; do
    kill -0 "$PID" || { tail "$DATA/log"; exit 1; }
    sleep 0.2
  done
}
# fill TARGET: sequential entities 0..TARGET until the tables hold all but 0.01% of them (a
# request refused with 429 is not retried: its entities come round again only after a pass).
fill() {
  "$LT" run "$W/ingest.toml" "${COMMON[@]}" --set distribution=sequential --set "key_space=$1" \
    --set warmup_s=0 --set measure_s=3600 -q --json "$DATA/fill.json" >/dev/null &
  FILL=$!
  until [[ $(imetric vx_feature_entities) -ge $(($1 - $1 / 10000)) ]]; do sleep 0.5; done
  kill "$FILL"; wait "$FILL" 2>/dev/null || true
}
# rate KEYS: ingest over KEYS existing entities, uniform, REPS times; prints the median.
rate() {
  local r=() l j
  for rep in $(seq 1 "$REPS"); do
    l=$(load1)
    "$LT" run "$W/ingest.toml" "${COMMON[@]}" --set "key_space=$1" --set warmup_s=2 \
      --set measure_s=10 -q --json "$DATA/r.json" >/dev/null
    j=$(jq .operations.ingest.events_per_s "$DATA/r.json")
    say "ingest over $1 entities: rep=$rep events_per_s=$j p99_ms=$(jq .operations.ingest.latency_ms.p99 "$DATA/r.json") load1_before=$l" >&2
    r+=("$j")
  done
  printf '%s\n' "${r[@]}" | median
}

say "# bench/scale.sh N=$N REPS=$REPS $(date -u +%FT%TZ) $(git rev-parse --short HEAD) $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB"
start
empty=$(rss_kb)
fill 100000
r100k=$(rate 100000)
t0=$(date +%s.%N)
l=$(load1)
fill "$N"
t1=$(date +%s.%N)
grown=$(( $(rss_kb) - empty ))
counted=$(metric vx_feature_bytes)
ents=$(imetric vx_feature_entities)
say "fill to $ents entities: $(awk -v a="$t0" -v b="$t1" -v n="$ents" 'BEGIN {printf "%.0f s, %.0f entities/s", b - a, n / (b - a)}') load1_before=$l"
say "memory at $ents entities: RssAnon growth $(awk -v g="$grown" -v n="$ents" 'BEGIN {printf "%.1f B/entity (%.2f GiB)", g * 1024 / n, g / 1048576}'), vx_feature_bytes $(awk -v c="$counted" -v n="$ents" -v g="$grown" 'BEGIN {printf "%.1f B/entity, counted/growth %.2f", c / n, c / (g * 1024)}')"
rN=$(rate "$N")
say "ingest rate: at 100k entities $r100k events/s, at $N $rN events/s, ratio $(awk -v a="$rN" -v b="$r100k" 'BEGIN {printf "%.2f", a / b}') (medians of $REPS)"
for rep in $(seq 1 "$REPS"); do
  l=$(load1)
  "$LT" run "$W/features-get.toml" --set "endpoints=http://127.0.0.1:$PORT" --set "key_space=$N" \
    --set preload_keys=0 -q --json "$DATA/g.json" >/dev/null
  say "GET at 20000/s offered, Zipfian over $N: rep=$rep achieved=$(jq .operations.get.ops_per_s "$DATA/g.json") p50/p99/p999_ms=$(jq -r '.operations.get.latency_ms | "\(.p50)/\(.p99)/\(.p999)"' "$DATA/g.json") errors=$(jq '.operations.get.errors // 0' "$DATA/g.json") load1_before=$l"
done
# 5. The next periodic snapshot, with GETs going on: 5-second reps back to back (20,000/s
# offered, Zipfian), each line saying whether the snapshot finished during it (it takes longer
# than a rep, so the rep before that one saw its start).
before_snap=$(imetric vx_snapshots_written_total)
(
  while [[ $(imetric vx_snapshots_written_total) == "$before_snap" ]]; do
    l=$(load1)
    "$LT" run "$W/features-get.toml" --set "endpoints=http://127.0.0.1:$PORT" --set "key_space=$N" \
      --set preload_keys=0 --set warmup_s=0 --set measure_s=5 -q --json "$DATA/gs.json" >/dev/null
    done_=$([[ $(imetric vx_snapshots_written_total) == "$before_snap" ]] && echo no || echo yes)
    say "GET while waiting for the snapshot (5 s): snapshot finished during it=$done_ p50/p99/p999_ms=$(jq -r '.operations.get.latency_ms | "\(.p50)/\(.p99)/\(.p999)"' "$DATA/gs.json") errors=$(jq '.operations.get.errors // 0' "$DATA/gs.json") load1_before=$l"
  done
) &
GETS=$!
base=$(rss_kb); peak=$base; s0=""
while [[ $(imetric vx_snapshots_written_total) == "$before_snap" ]]; do
  r=$(rss_kb)
  (( r > peak )) && peak=$r
  (( r > base + 20480 )) && [[ -z $s0 ]] && s0=$(date +%s.%N)
  sleep 0.2
done
s1=$(date +%s.%N)
wait "$GETS" || true
say "periodic snapshot: $(imetric vx_snapshot_bytes) bytes, written in about $(awk -v a="${s0:-$s1}" -v b="$s1" 'BEGIN {printf "%.0f", b - a}') s; RssAnon before $((base / 1024)) MiB, peak +$(( (peak - base) / 1024 )) MiB while writing"
# The periodic snapshot's file goes, so that the disk holds one snapshot of N entities at a time
# (about 34 bytes each), not two: the shutdown snapshot is the one the restart loads.
rm -f "$DATA"/d/snapshots/*
stop
l=$(load1)
start
say "restart from the snapshot: ready in $(metric vx_bootstrap_duration_seconds) s (load1_before=$l), RssAnon $(( ($(rss_kb) - empty) / 1024 )) MiB over empty, entities $(imetric vx_feature_entities)"
kill -9 "$PID"; wait "$PID" 2>/dev/null || true
rm -rf "$DATA/d/snapshots"
l=$(load1)
start
say "restart rebuilt from the log (snapshots removed): ready in $(metric vx_bootstrap_duration_seconds) s (load1_before=$l), entities $(imetric vx_feature_entities)"
stop
