#!/usr/bin/env bash
# Server CPU per 1-event read of two Veltrix builds, interleaved (issue 32's A/B of a change on
# the read path):
#
#   bench/read-cpu.sh A_BIN B_BIN            # REPS=5 MODE=http (or resp: `XRANGE s N-0 N-0`)
#   PAGE=256 CONNECTIONS=4 bench/read-cpu.sh A_BIN B_BIN    # pages of 256 events instead
#
# One data dir is filled once (vx-loadtest's preparation of replay-pages.toml: 16 streams of
# 100,000 128-byte events) and copied for each build; both servers (`--fsync always`) run for
# the whole sitting. After one warm-up run each, REPS times: a closed-loop run of reads from
# random positions (PAGE events each, CONNECTIONS connections, MEASURE_S seconds) on A, then
# on B. Each run's line gives the reads answered per second, the server's CPU per read
# (user+system from /proc/<pid>/stat over the run, divided by the reads answered) and its user
# part; the medians come last. A difference smaller than the spread between the runs of one
# build is not one (docs/BENCHMARKS.md). FILL=each fills a data dir with each build instead
# (the same workload and seed), for a change to what the log or its index holds. Runs go to docs/bench/read-cpu-runs.txt. Ports PORT
# (A) and PORT+10 (B), RESP on the next port of each.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh

A_BIN=${1:?usage: bench/read-cpu.sh A_BIN B_BIN}
B_BIN=${2:?usage: bench/read-cpu.sh A_BIN B_BIN}
REPS=${REPS:-5}
MODE=${MODE:-http}
MEASURE_S=${MEASURE_S:-5}
PORT=${PORT:-17500}
PAGE=${PAGE:-1}
CONNECTIONS=${CONNECTIONS:-50}
[[ $MODE == http || $MODE == resp ]] || { echo "MODE is http or resp" >&2; exit 2; }

cargo build --release -q -p vx-loadtest
LT=$ROOT/target/release/vx-loadtest
W=$ROOT/loadtest/workloads
bench_init read-cpu
refuse_if_listening "$PORT" $((PORT + 1)) $((PORT + 10)) $((PORT + 11))

# serve BIN DIR HTTP_PORT: start a server; its PID in SERVED.
serve() {
  "$1" serve --data-dir "$2" --listen "127.0.0.1:$3" --resp-listen "127.0.0.1:$(($3 + 1))" \
    --fsync always >"$2.log" 2>&1 &
  SERVED=$!
  PID=$SERVED PORT=$3 wait_ready
}

# read_run PORT: one closed-loop run of PAGE-event reads; the report in $WORK/run.json.
read_run() {
  local ep="http://127.0.0.1:$1"
  [[ $MODE == resp ]] && ep="resp://127.0.0.1:$(($1 + 1))"
  "$LT" run "$W/replay-pages.toml" -q --set "endpoints=\"$ep\"" --set "page_events=$PAGE" \
    --set "connections=$CONNECTIONS" --set warmup_s=0 --set "measure_s=$MEASURE_S" \
    --json "$WORK/run.json" >/dev/null
}

# fill BIN DIR: the data of one sitting, written by BIN.
fill() {
  serve "$1" "$2" "$PORT"
  read_run "$PORT"
  stop_pid "$SERVED"
}
if [[ ${FILL:-once} == each ]]; then
  fill "$A_BIN" "$WORK/a"
  fill "$B_BIN" "$WORK/b"
else
  fill "$A_BIN" "$WORK/fill"
  cp -r "$WORK/fill" "$WORK/a"
  cp -r "$WORK/fill" "$WORK/b"
fi
serve "$A_BIN" "$WORK/a" "$PORT"; PID_A=$SERVED
serve "$B_BIN" "$WORK/b" $((PORT + 10)); PID_B=$SERVED
trap 'stop_pid "$PID_A"; stop_pid "$PID_B"; cleanup' EXIT

# measure NAME PID PORT: one run against one server, recorded.
measure() {
  local t0 u0 t1 u1 ops
  t0=$(cpu_ticks "$2"); u0=$(awk '{print $14}' "/proc/$2/stat")
  read_run "$3"
  t1=$(cpu_ticks "$2"); u1=$(awk '{print $14}' "/proc/$2/stat")
  ops=$(jqr .operations.page.ops_per_s "$WORK/run.json")
  local hz; hz=$(getconf CLK_TCK)
  local per user
  per=$(awk -v t=$((t1 - t0)) -v o="$ops" -v s="$MEASURE_S" -v hz="$hz" 'BEGIN{printf "%.1f", t*1e6/hz/(o*s)}')
  user=$(awk -v t=$((u1 - u0)) -v o="$ops" -v s="$MEASURE_S" -v hz="$hz" 'BEGIN{printf "%.1f", t*1e6/hz/(o*s)}')
  record "${1}_us" "$per" "reads/s=$ops user_us=$user mode=$MODE page=$PAGE load1_before=$(cut -d' ' -f1 /proc/loadavg)"
}

measure warm_a "$PID_A" "$PORT"
measure warm_b "$PID_B" $((PORT + 10))
for _ in $(seq 1 "$REPS"); do
  measure a "$PID_A" "$PORT"
  measure b "$PID_B" $((PORT + 10))
done
echo "server CPU per $MODE read of $PAGE event(s), medians of $REPS: A $(med a_us) µs, B $(med b_us) µs"
