#!/usr/bin/env bash
# How Veltrix uses the cores it is given (issue 30): acked NDJSON ingest (fsync always, 1000
# events a request over HTTP, `ingest.toml`) with the server pinned to 1, 2, 4 and 8 cores
# (taskset) and vx-loadtest pinned to the cores left, for the feature store off (no entity on
# the events), the built-ins (100,000 entities), the built-ins with three windowed aggregates,
# and the built-ins over 10M entities (mostly new: a uniform draw over 10M). Per run: events/s,
# its ratio to "off" at the same cores, and the CPU of each kind of server thread (the log
# writer, the apply threads summed and the busiest, tokio's workers, the rest) read from /proc
# over the measured window, as a table (docs/BENCHMARKS.md "Cores").
#
#   bench/cores.sh                        # what fits this machine
#   CORES="1 2" MODES="off builtins" REPS=3 MEASURE_S=10 bench/cores.sh
#   BIN=.dev/bin/veltrix LT=.dev/bin/vx-loadtest WL=.dev/wl bench/cores.sh   # on the device
#                                         # (../shared/bench/device/README.md: .dev/ carried;
#                                         # the table is also written to $OUT/cores.md)
#
# It runs what fits: a server on N cores needs N + 1 cores (one at least for the load
# generator); the rest is skipped and said so. `features.apply_threads` is the default (half
# the cores the server may use, at least 1) unless APPLY_THREADS is set. Connections: 4 per
# server core (at least 4). Every run's line goes to docs/bench/cores-runs.txt with the load
# average before it; the table gives medians over REPS.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh

CORES=${CORES:-"1 2 4 8"}
MODES=${MODES:-"off builtins decl3 10M"}
REPS=${REPS:-3}
WARMUP_S=${WARMUP_S:-3}
MEASURE_S=${MEASURE_S:-10}
PORT=${PORT:-17300}
BIN=${BIN:-target/release/veltrix}
LT=${LT:-target/release/vx-loadtest}
WL=${WL:-loadtest/workloads}
command -v taskset >/dev/null || { as_root apt-get update >&2; as_root apt-get install -y util-linux >&2; }
if [[ ! -x $BIN || ! -x $LT ]]; then
  log "building release"
  cargo build --release -p veltrix -p vx-loadtest >&2
fi

# json_ev FILE: the events/s of a vx-loadtest report (python3: the device has no jq).
json_ev() {
  python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["operations"]["ingest"]["events_per_s"]))' "$1"
}

bench_init cores
refuse_if_listening "$PORT"
decl3_yaml "$WORK/decl3.yaml"
TOTAL=$(nproc)
TICK=$(getconf CLK_TCK)

# threads PID: "<tid> <kind> <ticks>" per thread, kinds: writer, apply, tokio (its workers and
# blocking pool), other (the main thread, the snapshot thread). Joined on the tid, two readings
# give "<tid> <kind> <ticks> <kind> <ticks>".
threads() {
  for t in /proc/"$1"/task/*; do
    local comm kind
    comm=$(tr ' ' '_' <"$t/comm")
    case $comm in
      vx-log-writer) kind=writer ;;
      vx-apply-*) kind=apply ;;
      tokio-rt-worker|tokio-runtime-w*) kind=tokio ;;
      *) kind=other ;;
    esac
    echo "${t##*/} $kind $(awk '{print $14+$15}' "$t/stat")"
  done | sort
}

# run CORES MODE REP: one measured run; records its figures.
run() {
  local n=$1 mode=$2 rep=$3
  local server="0-$((n - 1))" load="$n-$((TOTAL - 1))"
  local conns=$((4 * n)); ((conns < 4)) && conns=4
  local sargs=() largs=(--set "endpoints=\"http://127.0.0.1:$PORT\"" --set "connections=$conns"
    --set "warmup_s=$WARMUP_S" --set "measure_s=$MEASURE_S")
  [[ -n ${APPLY_THREADS:-} ]] && sargs+=(--apply-threads "$APPLY_THREADS")
  case $mode in
    off) largs+=(--set entities=false) ;;
    builtins) ;;
    decl3) sargs+=(--config "$WORK/decl3.yaml") ;;
    10M) largs+=(--set key_space=10000000 --set 'distribution="uniform"') ;;
  esac
  rm -rf "$WORK/data"; sync
  local la; la=$(load1)
  taskset -c "$server" "$BIN" serve --data-dir "$WORK/data" --listen "127.0.0.1:$PORT" \
    --fsync always "${sargs[@]}" >"$WORK/log" 2>&1 &
  PID=$!
  wait_ready || { cat "$WORK/log" >&2; exit 1; }
  local apply; apply=$(curl -s "localhost:$PORT/metrics" | awk '/^vx_feature_apply_threads / {print $2+0}')
  taskset -c "$load" "$LT" run "$WL/ingest.toml" -q --json "$WORK/run.json" "${largs[@]}" \
    >"$WORK/lt.log" 2>&1 &
  local lp=$!
  # The measured window: from the end of the warm-up to a second before the end.
  sleep $((WARMUP_S + 1))
  local a l1; a=$(threads "$PID"); l1=$(cpu_ticks "$lp")
  local span=$((MEASURE_S - 2))
  sleep "$span"
  local b l2; b=$(threads "$PID"); l2=$(cpu_ticks "$lp")
  wait "$lp" || { cat "$WORK/lt.log" >&2; exit 1; }
  stop
  local ev; ev=$(json_ev "$WORK/run.json")
  # Per kind: cores (ticks / tick rate / seconds), and the busiest thread of the kind.
  local cpu
  cpu=$(join <(echo "$a") <(echo "$b") | awk -v t="$TICK" -v s="$span" '
    { d = ($5 - $3) / t / s; c[$2] += d; if (d > m[$2]) m[$2] = d }
    END { printf "writer=%.2f apply=%.2f apply_max=%.2f tokio=%.2f tokio_max=%.2f other=%.2f",
          c["writer"], c["apply"], m["apply"], c["tokio"], m["tokio"], c["other"] }')
  local lg; lg=$(awk -v a="$l1" -v b="$l2" -v t="$TICK" -v s="$span" 'BEGIN {printf "%.2f", (b - a) / t / s}')
  record "$n.$mode.ev" "$ev" "cores=$n mode=$mode rep=$rep apply_threads=$apply load1=$la $cpu loadgen=$lg"
  for kv in $cpu "loadgen=$lg" "apply_threads=$apply"; do
    record "$n.$mode.${kv%%=*}" "${kv#*=}"
  done
}

echo "# cores.sh $(date -u +%FT%TZ) on $TOTAL cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), commit $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)')" | tee -a "$RUNS"
ran=()
for n in $CORES; do
  if ((n + 1 > TOTAL)); then
    echo "skipped: the server on $n cores needs $((n + 1)) cores (one for the load generator); this machine has $TOTAL" | tee -a "$RUNS"
    continue
  fi
  ran+=("$n")
  for rep in $(seq 1 "$REPS"); do
    for mode in $MODES; do
      run "$n" "$mode" "$rep"
    done
  done
done

table() {
  echo "| server cores | mode | apply threads | events/s (median of $REPS) | of off | log writer | apply threads (busiest) | tokio workers (busiest) | other | load generator |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  for n in "${ran[@]}"; do
    off=$(med "$n.off.ev")
    for mode in $MODES; do
      ev=$(med "$n.$mode.ev")
      ratio=$(awk -v a="$ev" -v b="$off" 'BEGIN { if (b > 0 && b != "nan") printf "%.2f", a / b; else print "-" }')
      printf "| %s | %s | %s | %.2fM | %s | %.2f | %.2f (%.2f) | %.2f (%.2f) | %.2f | %.2f |\n" \
        "$n" "$mode" "$(med "$n.$mode.apply_threads")" "$(awk -v e="$ev" 'BEGIN {print e / 1e6}')" "$ratio" \
        "$(med "$n.$mode.writer")" "$(med "$n.$mode.apply")" "$(med "$n.$mode.apply_max")" \
        "$(med "$n.$mode.tokio")" "$(med "$n.$mode.tokio_max")" "$(med "$n.$mode.other")" "$(med "$n.$mode.loadgen")"
    done
  done
}
echo
table
if [[ -n ${OUT:-} ]]; then table >"$OUT/cores.md"; fi
