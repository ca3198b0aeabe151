#!/usr/bin/env bash
# Cluster mode on one broker and three nodes on loopback, beside Kafka's own producer against
# the same broker, in one command:
#
#   bench/cluster.sh            # REPS=3; about 12 minutes on the 2-core box
#
# Per repetition, on a fresh single-node Kafka 3.9 broker (KRaft, jars from Maven Central via
# scripts/kafka-jars), everything on the same two cores:
#   1. Kafka's ProducerPerformance, acks=all, 128-byte records, to a topic of SHARDS partitions:
#      the broker's own acked ingest rate, the ceiling of anything that produces to it.
#   2. Veltrix, one node (`--cluster kafka`), vx-loadtest's ingest.toml (1000-event NDJSON
#      requests, 4 connections, ids): acked events/s.
#   3. Veltrix, three nodes, the same load spread over all three, over HTTP and then over
#      the binary frames listeners (ingest-frames.toml); then ack latency at
#      LAT_RATE events/s in 20-event requests (ingest-latency.toml) over all three; then a
#      whole-stream replay of REPLAY_EVENTS events read through a node that does not own it.
#   4. Node loss: three nodes, an open-loop load with ids through all three (LOSS_RATE events/s
#      for LOSS_S seconds), one node killed with kill -9 a third of the way in. Afterwards
#      every stream is replayed from both surviving nodes: every acknowledged event must be
#      there exactly once (the script fails otherwise), and the time the survivors took to
#      serve the dead node's shards is read from their logs: kill to the last shard served
#      (the failover, with the default cluster.session_timeout and broker settings), and the
#      slowest shard's assignment to served.
# Every run's line, with the load average before it, goes to docs/bench/cluster-runs.txt; the
# medians are printed as a table.
#
# Parameters (environment): REPS=3 WARMUP_S=3 MEASURE_S=10 SHARDS=16 LAT_RATE=20000
#   KAFKA_RECORDS=2000000 REPLAY_EVENTS=1000000 LOSS_RATE=20000 LOSS_S=24 PORT=17300
#   ONLY="ingest loss" (a subset: ingest = steps 1-3, loss = step 4)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh

REPS=${REPS:-3}
WARMUP_S=${WARMUP_S:-3}
MEASURE_S=${MEASURE_S:-10}
SHARDS=${SHARDS:-16}
LAT_RATE=${LAT_RATE:-20000}
KAFKA_RECORDS=${KAFKA_RECORDS:-2000000}
REPLAY_EVENTS=${REPLAY_EVENTS:-1000000}
LOSS_RATE=${LOSS_RATE:-20000}
LOSS_S=${LOSS_S:-24}
PORT=${PORT:-17300}
ONLY=" ${ONLY:-ingest loss} "
KPORT=$((PORT + 90))
CPORT=$((PORT + 91))

command -v jq >/dev/null || { as_root apt-get update >&2; as_root apt-get install -y jq >&2; }
log "building release"
cargo build --release -p veltrix -p vx-loadtest >&2
VX=$ROOT/target/release/veltrix
LT=$ROOT/target/release/vx-loadtest
W=$ROOT/loadtest/workloads
LIBS=$(scripts/kafka-jars)
bench_init cluster
refuse_if_listening "$KPORT" "$CPORT" "$((PORT + 1))" "$((PORT + 2))" "$((PORT + 3))" \
  "$((PORT + 11))" "$((PORT + 12))" "$((PORT + 13))"

BROKER_PID=""
NODE_PIDS=()
J=(java -Djava.awt.headless=true -cp "$LIBS/*")
stop_nodes() {
  local p
  for p in "${NODE_PIDS[@]}"; do stop_pid "$p"; done
  NODE_PIDS=()
}
stop_all() { stop_nodes; stop_pid "$BROKER_PID"; BROKER_PID=""; cleanup; }
trap stop_all EXIT

# start_broker: a fresh broker with the broker defaults a failover must cope with (a dead
# node's transactions are fenced by the new owners: docs/CLUSTER.md, "Failure modes").
start_broker() {
  rm -rf "$WORK/kafka"; mkdir -p "$WORK/kafka"
  cat >"$WORK/kafka/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CPORT
listeners=PLAINTEXT://127.0.0.1:$KPORT,CONTROLLER://127.0.0.1:$CPORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KPORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$WORK/kafka/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
  cat >"$WORK/kafka/log4j.properties" <<'L4J'
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
L4J
  "${J[@]}" kafka.tools.StorageTool format -t vxBenchClusterId000001 -c "$WORK/kafka/server.properties" >/dev/null
  "${J[@]}" -Dlog4j.configuration="file:$WORK/kafka/log4j.properties" -Xms1g -Xmx1g kafka.Kafka "$WORK/kafka/server.properties" >"$WORK/kafka/log" 2>&1 &
  BROKER_PID=$!
  for _ in $(seq 1 120); do
    (exec 3<>"/dev/tcp/127.0.0.1/$KPORT") 2>/dev/null && grep -q "Kafka Server started" "$WORK/kafka/log" && return 0
    sleep 0.5
  done
  tail -20 "$WORK/kafka/log" >&2; echo "broker did not come up" >&2; exit 1
}

# start_nodes N TOPIC: N nodes on PORT+1…, fresh data dirs, all ready.
start_nodes() {
  local n=$1 topic=$2 i
  for i in $(seq 1 "$n"); do
    rm -rf "$WORK/n$i"
    "$VX" serve --listen "127.0.0.1:$((PORT + i))" \
      --frames-listen "127.0.0.1:$((PORT + 10 + i))" \
      --data-dir "$WORK/n$i" --shards "$SHARDS" --cluster kafka \
      --kafka-brokers "127.0.0.1:$KPORT" --kafka-topic "$topic" --node-id "n$i" \
      --advertise "http://127.0.0.1:$((PORT + i))" >"$WORK/n$i.log" 2>&1 &
    NODE_PIDS+=($!)
  done
  for i in $(seq 1 "$n"); do
    for _ in $(seq 1 600); do
      curl -fs "localhost:$((PORT + i))/readyz" >/dev/null && break
      sleep 0.1
    done
    curl -fs "localhost:$((PORT + i))/readyz" >/dev/null || { tail -20 "$WORK/n$i.log" >&2; exit 1; }
  done
}
endpoints() {
  local n=$1 i out=""
  for i in $(seq 1 "$n"); do out="$out\"http://127.0.0.1:$((PORT + i))\","; done
  echo "endpoints=[${out%,}]"
}
frames_endpoints() {
  local n=$1 i out=""
  for i in $(seq 1 "$n"); do out="$out\"frames://127.0.0.1:$((PORT + 10 + i))\","; done
  echo "endpoints=[${out%,}]"
}
# lt KEY WORKLOAD [--set …]: one vx-loadtest run; echoes the report path.
lt() {
  local key=$1 wl=$2; shift 2
  "$LT" run "$W/$wl" -q --set "warmup_s=$WARMUP_S" --set "measure_s=$MEASURE_S" "$@" \
    --json "$WORK/$key.json" >"$WORK/$key.txt"
  echo "$WORK/$key.json"
}

# replay_ids NODE STREAM: every id of STREAM as node NODE replays it, 100,000 events a page
# (retrying a 503 while a shard moves).
replay_ids() {
  local i=$1 s=$2 from=1 code n
  while true; do
    for _ in $(seq 1 60); do
      code=$(curl -s -D "$WORK/head" -o "$WORK/replay" -w '%{http_code}' \
        "localhost:$((PORT + i))/v1/streams/$s/events?from=$from&limit=100000")
      [[ $code == 200 ]] && break
      sleep 1
    done
    [[ $code == 200 ]] || { echo "replay of $s from n$i: HTTP $code" >&2; exit 1; }
    jq -r .id "$WORK/replay"
    n=$(wc -l <"$WORK/replay")
    [[ $n -lt 100000 ]] && return 0
    from=$(tr -d '\r' <"$WORK/head" | awk -F': ' 'tolower($1)=="x-vx-next-seq" {print $2}')
  done
}

LAT_REQ=$((LAT_RATE / 20))
for rep in $(seq 1 "$REPS"); do
  start_broker
  if [[ $ONLY == *" ingest "* ]]; then

  # 1. Kafka's own producer.
  "${J[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$KPORT" --create \
    --topic "perf-$rep" --partitions "$SHARDS" --replication-factor 1 >/dev/null
  l=$(load1)
  out=$("${J[@]}" org.apache.kafka.tools.ProducerPerformance --topic "perf-$rep" \
    --num-records "$KAFKA_RECORDS" --record-size 128 --throughput -1 \
    --producer-props bootstrap.servers="127.0.0.1:$KPORT" acks=all linger.ms=5 batch.size=65536 2>&1 |
    grep 'records sent' | tail -1)
  kps=$(sed -E 's/.* ([0-9.]+) records\/sec.*/\1/' <<<"$out")
  record kafka_produce "$kps" "rep=$rep kafka ProducerPerformance acks=all 128B partitions=$SHARDS msgs_per_s load1_before=$l"

  # 2. One node.
  start_nodes 1 "one-$rep"; l=$(load1)
  j=$(lt one ingest.toml --set "$(endpoints 1)" --set ids=true)
  record vx1_ingest "$(jqr .operations.ingest.events_per_s "$j")" "rep=$rep veltrix cluster 1 node ingest batch=1000 connections=4 ids events_per_s load1_before=$l"
  stop_nodes

  # 3. Three nodes: ingest, ack latency, cross-node replay.
  start_nodes 3 "three-$rep"; l=$(load1)
  j=$(lt three ingest.toml --set "$(endpoints 3)" --set ids=true --set connections=6)
  record vx3_ingest "$(jqr .operations.ingest.events_per_s "$j")" "rep=$rep veltrix cluster 3 nodes ingest batch=1000 connections=6 ids events_per_s load1_before=$l"
  l=$(load1)
  j=$(lt frames ingest-frames.toml --set "$(frames_endpoints 3)" --set ids=true --set connections=6)
  record vx3_frames "$(jqr .operations.ingest.events_per_s "$j")" "rep=$rep veltrix cluster 3 nodes ingest over frames batch=1000 connections=6 ids events_per_s load1_before=$l"
  # Acknowledged is in Kafka; applied is when the owners have it: how long they trail.
  drain_start=$(date +%s.%N)
  for _ in $(seq 1 1200); do
    lag=0
    for i in 1 2 3; do
      n=$(curl -fs "localhost:$((PORT + i))/metrics" | awk '/^vx_cluster_consumer_lag/ {s += $2} END {print s + 0}')
      lag=$((lag + ${n%.*}))
    done
    [[ $lag == 0 ]] && break
    sleep 0.1
  done
  drain=$(awk -v a="$drain_start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  record vx3_applied "$(awk -v e="$(jqr .operations.ingest.events "$j")" -v m="$MEASURE_S" -v d="$drain" 'BEGIN {printf "%.0f", e / (m + d)}')" "rep=$rep veltrix cluster 3 nodes: events of the measured window over (window + time until every owner applied them: ${drain}s) events_per_s"
  l=$(load1)
  j=$(lt lat ingest-latency.toml --set "$(endpoints 3)" --set "rate=$LAT_REQ")
  for p in p50 p99; do record "vx3_lat_$p" "$(jqr ".operations.ingest.latency_ms.$p" "$j")"; done
  record vx3_lat_late "$(jqr .late_sends.late "$j")" "rep=$rep veltrix cluster 3 nodes ack latency batch=20 rate=${LAT_REQ}req/s p50=$(jqr .operations.ingest.latency_ms.p50 "$j") p99=$(jqr .operations.ingest.latency_ms.p99 "$j") load1_before=$l"
  # Fill one stream through node 1, then read it whole through a node that does not own it.
  "$LT" run "$W/ingest.toml" -q --set "$(endpoints 1)" --set streams=1 --set stream_prefix='"scan-"' \
    --set warmup_s=0 --set "measure_s=$((REPLAY_EVENTS / 500000 + 2))" \
    --json "$WORK/fill.json" >/dev/null
  filled=$(jqr .operations.ingest.events "$WORK/fill.json")
  # Until its owner has applied every acknowledged event.
  for _ in $(seq 1 600); do
    have=$(curl -fs "localhost:$((PORT + 1))/v1/streams/scan-0" | jq -r '.events // 0')
    [[ ${have:-0} -ge $filled ]] && break
    sleep 0.2
  done
  owner=$(curl -fsi "localhost:$((PORT + 1))/v1/streams/scan-0" | tr -d '\r' | awk -F': ' 'tolower($1)=="x-vx-node" {print $2}')
  via=1; [[ $owner == n1 ]] && via=2
  l=$(load1)
  j=$(lt scan replay-pages.toml --set "endpoints=[\"http://127.0.0.1:$((PORT + via))\"]" \
        --set stream_prefix='"scan-"' --set streams=1 --set scan_pct=100 --set connections=1 --set warmup_s=0)
  record vx3_scan "$(jqr .operations.scan.events_per_s "$j")" "rep=$rep veltrix cluster replay whole stream via n$via owner=$owner events=$(jqr .operations.scan.events "$j") events_per_s load1_before=$l"
  stop_nodes
  fi

  # 4. Node loss under load.
  if [[ $ONLY == *" loss "* ]]; then
  start_nodes 3 "loss-$rep"; l=$(load1)
  "$LT" run "$W/ingest.toml" -q --set "$(endpoints 3)" --set ids=true --set batch=100 \
    --set "rate=$((LOSS_RATE / 100))" --set connections=12 --set warmup_s=0 --set "measure_s=$LOSS_S" \
    --json "$WORK/loss.json" >"$WORK/loss.txt" &
  loader=$!
  sleep $((LOSS_S / 3))
  killed_at=$(date +%s.%N)
  kill -9 "${NODE_PIDS[2]}"; wait "${NODE_PIDS[2]}" 2>/dev/null || true
  wait "$loader"
  acked=$(jqr .operations.ingest.events "$WORK/loss.json")
  failed=$(jqr '.operations.ingest.errors + .operations.ingest.refused' "$WORK/loss.json")
  # Every stream from each survivor, once everything is applied there.
  streams=$(curl -fs "localhost:$((PORT + 1))/v1/streams?limit=10000" | jq -r '.streams[].stream')
  for i in 1 2; do
    : >"$WORK/ids-$i"
    for s in $streams; do
      replay_ids "$i" "$s" >>"$WORK/ids-$i"
    done
    total=$(wc -l <"$WORK/ids-$i")
    dups=$(sort "$WORK/ids-$i" | uniq -d | wc -l)
    if [[ $dups != 0 || $total -lt $acked ]]; then
      echo "node loss: n$i replays $total events ($dups duplicated ids) for $acked acknowledged" >&2
      exit 1
    fi
    record "loss_checked_n$i" "$total" "rep=$rep node loss: n$i replays $total events, 0 duplicated, $acked acknowledged ($failed failed requests while the node was down)"
  done
  # The survivors' "served here" lines after the kill: how long the dead node's shards took.
  move=$(for i in 1 2; do
    awk -v t="$killed_at" '/partition caught up: served here/ {
        split($1, d, /[-T:.Z]/); s = mktime(d[1] " " d[2] " " d[3] " " d[4] " " d[5] " " d[6]) + ("0." d[7]);
        if (s >= t) { for (k = 1; k <= NF; k++) if ($k ~ /^took_ms=/) { sub("took_ms=", "", $k); print $k } } }' "$WORK/n$i.log"
  done | sort -n | tail -1)
  record loss_move_ms "${move:-nan}" "rep=$rep node loss: slowest shard move after the kill (assignment to served), ms"
  # Kill to the last shard served again: the failover a client sees.
  last=$(for i in 1 2; do
    awk -v t="$killed_at" '/partition caught up: served here/ {
        split($1, d, /[-T:.Z]/); s = mktime(d[1] " " d[2] " " d[3] " " d[4] " " d[5] " " d[6]) + ("0." d[7]);
        if (s >= t) printf "%.3f\n", s }' "$WORK/n$i.log"
  done | sort -n | tail -1)
  record loss_failover_s "$(awk -v a="$killed_at" -v b="${last:-nan}" 'BEGIN {printf "%.1f", b - a}')" "rep=$rep node loss: kill -9 to the last of the dead node's shards served again, s (defaults: cluster.session_timeout 6s, broker defaults)"
  stop_nodes
  fi
  stop_pid "$BROKER_PID"; BROKER_PID=""
done

printf '\n| measure | median |\n| --- | --- |\n'
for k in kafka_produce vx1_ingest vx3_ingest vx3_frames vx3_applied vx3_lat_p50 vx3_lat_p99 vx3_scan loss_move_ms loss_failover_s; do
  printf '| %s | %s |\n' "$k" "$(med "$k")"
done
if [[ $ONLY == *" ingest "* ]]; then
  awk -v v="$(med vx3_ingest)" -v k="$(med kafka_produce)" 'BEGIN {printf "\nthree nodes / Kafka producer: %.2f\n", v / k}'
fi
