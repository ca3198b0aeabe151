#!/usr/bin/env bash
# Live follow fan-out (docs/API.md §5), in one command:
#
#   bench/fanout.sh             # REPS=3 by default; about 10 minutes on the 2-core box
#
# 1. The match shape and larger: N SSE followers of one stream (N in FOLLOWERS) while 45
#    producers write it at 80 events/s each (3,600 128-byte events/s, one per request, fsync
#    always), loadtest/workloads/fanout-match.toml. Per run, on a fresh server: delivery
#    latency (producer's ack → follower's receipt) p50/p99/p99.9, the ingest ack p99, whether
#    every follower got every event in order, the server's CPU (user+sys over the run's wall
#    time, in cores) and its anonymous memory (RssAnon) sampled in the measured window, less
#    an idle server's, per follower.
# 2. Paged replay under that load: 256-event pages from random positions of 16 streams of
#    100,000 events (replay-pages.toml) at each rate of PAGE_RATES pages/s open loop, once
#    alone and once while the 720-follower match runs: page p50/p99.
# The load generator runs on the same 2 cores as the server, so its own work (reading every
# follower's socket: 720 × 3,600 = 2.6M deliveries/s) is in the figures too.
# Each measurement is repeated REPS times; the table shows medians. Every run's line, with the
# load average before it, goes to docs/bench/fanout-runs.txt; the table between the
# `fanout:begin` and `fanout:end` markers of docs/BENCHMARKS.md is rewritten.
#
# Parameters (environment): REPS=3 MEASURE_S=15 FOLLOWERS="720 1000 5000" PAGE_RATES="1000 5000"
#   SKIP_BUILD=0 KEEP_WORK=0 SECTIONS="fanout pages" VX_PORT=17200
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
source bench/lib.sh

REPS=${REPS:-3}
MEASURE_S=${MEASURE_S:-15}
FOLLOWERS=${FOLLOWERS:-720 1000 5000}
PAGE_RATES=${PAGE_RATES:-1000 5000}
PORT=${VX_PORT:-17200}
command -v jq >/dev/null || { as_root apt-get update -qq && as_root apt-get install -y -qq jq >/dev/null; }
refuse_if_listening "$PORT"
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  cargo build --release -q -p veltrix -p vx-loadtest
fi
VX=$ROOT/target/release/veltrix
LT=$ROOT/target/release/vx-loadtest
W=$ROOT/loadtest/workloads
TCK=$(getconf CLK_TCK)

bench_init fanout
SECTIONS=${SECTIONS:-fanout pages}
echo "# bench/fanout.sh $(date -u +%FT%TZ) REPS=$REPS MEASURE_S=$MEASURE_S FOLLOWERS=\"$FOLLOWERS\"" >>"$RUNS"
start_veltrix() { # data_dir
  "$VX" serve --data-dir "$1" --listen "127.0.0.1:$PORT" >>"$WORK/veltrix.log" 2>&1 &
  PID=$!
  wait_ready
}
EP=(--set "endpoints=http://127.0.0.1:$PORT")

# fanout_run N OUT: one match run with N followers; echoes "cores rss_kb" of the server.
fanout_run() {
  local n=$1 out=$2 t0 w0 t1 w1 rss
  t0=$(cpu_ticks "$PID"); w0=$(date +%s.%N)
  "$LT" run "$W/fanout-match.toml" "${EP[@]}" --set "followers=$n" --set "measure_s=$MEASURE_S" \
    -q --json "$out" >/dev/null 2>>"$WORK/lt.err" &
  local lt=$!
  # Anonymous memory in the middle of the measured window (followers connect, 3 s warm-up).
  sleep $((MEASURE_S / 2 + 5))
  rss=$(rss_anon_kb "$PID")
  wait "$lt" || log "vx-loadtest exited $? (3: the ordering check failed)"
  t1=$(cpu_ticks "$PID"); w1=$(date +%s.%N)
  echo "$(awk -v t="$((t1 - t0))" -v w0="$w0" -v w1="$w1" -v k="$TCK" 'BEGIN {printf "%.2f", t / k / (w1 - w0)}') $rss"
}

if want fanout; then
  start_veltrix "$WORK/empty"
  empty_kb=$(rss_anon_kb "$PID")
  stop
  for n in $FOLLOWERS; do
    for rep in $(seq 1 "$REPS"); do
      rm -rf "$WORK/d"
      start_veltrix "$WORK/d"
      l=$(load1)
      j=$WORK/fanout-$n-$rep.json
      read -r cores rss < <(fanout_run "$n" "$j")
      passed=$(jqr .fanout.passed "$j")
      record "f${n}_p50" "$(jqr .operations.deliver.latency_ms.p50 "$j")" "rep=$rep followers=$n p99=$(jqr .operations.deliver.latency_ms.p99 "$j") p999=$(jqr .operations.deliver.latency_ms.p999 "$j") ingest_p99=$(jqr .operations.ingest.latency_ms.p99 "$j") delivered_per_s=$(jqr .operations.deliver.ops_per_s "$j") passed=$passed cores=$cores rss_kb=$rss load1_before=$l"
      record "f${n}_p99" "$(jqr .operations.deliver.latency_ms.p99 "$j")"
      record "f${n}_p999" "$(jqr .operations.deliver.latency_ms.p999 "$j")"
      record "f${n}_ingest_p99" "$(jqr .operations.ingest.latency_ms.p99 "$j")"
      record "f${n}_cores" "$cores"
      record "f${n}_bytes_per_follower" "$(( (rss - empty_kb) * 1024 / n ))"
      record "f${n}_rss" "$rss"
      [[ $passed == true ]] && record "f${n}_passed" 1 || record "f${n}_passed" 0
      stop
    done
  done
fi

if want pages; then
  D=$WORK/pages
  rm -rf "$D"
  start_veltrix "$D"
  log "pages: preloading 16 streams of 100,000 events"
  "$LT" run "$W/replay-pages.toml" "${EP[@]}" --set warmup_s=0 --set measure_s=1 -q >/dev/null
  for rate in $PAGE_RATES; do
  PAGES=(--set "rate=$rate" --set connections=16 --set warmup_s=2 --set "measure_s=$MEASURE_S" --set preload_events=0)
  for rep in $(seq 1 "$REPS"); do
    l=$(load1)
    j=$WORK/pages-alone-$rate-$rep.json
    "$LT" run "$W/replay-pages.toml" "${EP[@]}" "${PAGES[@]}" -q --json "$j" >/dev/null
    record "pages${rate}_alone_p50" "$(jqr .operations.page.latency_ms.p50 "$j")" "rep=$rep rate=$rate p99=$(jqr .operations.page.latency_ms.p99 "$j") pages_per_s=$(jqr .operations.page.ops_per_s "$j") load1_before=$l"
    record "pages${rate}_alone_p99" "$(jqr .operations.page.latency_ms.p99 "$j")"
    l=$(load1)
    f=$WORK/pages-fanout-$rate-$rep.json
    "$LT" run "$W/fanout-match.toml" "${EP[@]}" --set "measure_s=$((MEASURE_S + 8))" \
      --set "stream_prefix=match$rate-$rep-" -q --json "$f" >/dev/null 2>>"$WORK/lt.err" &
    lt=$!
    sleep 6 # the followers are connected and the warm-up is over
    j=$WORK/pages-load-$rate-$rep.json
    "$LT" run "$W/replay-pages.toml" "${EP[@]}" "${PAGES[@]}" -q --json "$j" >/dev/null
    wait "$lt" || true
    record "pages${rate}_load_p50" "$(jqr .operations.page.latency_ms.p50 "$j")" "rep=$rep rate=$rate p99=$(jqr .operations.page.latency_ms.p99 "$j") pages_per_s=$(jqr .operations.page.ops_per_s "$j") with 720 followers: deliver_p99=$(jqr .operations.deliver.latency_ms.p99 "$f") passed=$(jqr .fanout.passed "$f") load1_before=$l"
    record "pages${rate}_load_p99" "$(jqr .operations.page.latency_ms.p99 "$j")"
  done
  done
  stop
fi

# ---- the table --------------------------------------------------------------------------------
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
{
  echo "<!-- fanout:begin (written by bench/fanout.sh; medians of $REPS) -->"
  echo "Machine: $(nproc) cores ($cpu), $(free -g | awk '/Mem:/ {print $2}') GiB, $(uname -r); $(date -u +%F)."
  echo "Server and load generator share the cores. \`bench/fanout.sh\`, REPS=$REPS, MEASURE_S=$MEASURE_S."
  echo
  if want fanout; then
    echo "| followers | delivery p50 | p99 | p99.9 | ingest ack p99 | all in order | server CPU | anon memory per follower |"
    echo "| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"
    for n in $FOLLOWERS; do
      ok=$(awk -v k="f${n}_passed" '$1==k {s+=$2; c++} END {print s "/" c}' "$RESULTS")
      echo "| $n | $(med "f${n}_p50") ms | $(med "f${n}_p99") ms | $(med "f${n}_p999") ms | $(med "f${n}_ingest_p99") ms | $ok runs | $(med "f${n}_cores") cores | $(med "f${n}_bytes_per_follower") B |"
    done
    # What one more follower costs: the slope between the fewest and the most followers.
    lo=$(echo $FOLLOWERS | tr ' ' '\n' | sort -n | head -1); hi=$(echo $FOLLOWERS | tr ' ' '\n' | sort -n | tail -1)
    if [[ $lo != "$hi" ]]; then
      rlo=$(awk -v k="f${lo}_rss" '$1==k {print $2}' "$RESULTS" | median)
      rhi=$(awk -v k="f${hi}_rss" '$1==k {print $2}' "$RESULTS" | median)
      echo
      echo "Anonymous memory per additional follower (from $lo to $hi followers, medians): $(awk -v a="$rlo" -v b="$rhi" -v n="$((hi - lo))" 'BEGIN {printf "%.0f", (b - a) * 1024 / n}') B."
    fi
    echo
  fi
  if want pages; then
    echo "| 256-event pages, open loop | alone p50 | alone p99 | with 720 followers p50 | p99 |"
    echo "| --- | ---: | ---: | ---: | ---: |"
    for rate in $PAGE_RATES; do
      echo "| $rate pages/s | $(med "pages${rate}_alone_p50") ms | $(med "pages${rate}_alone_p99") ms | $(med "pages${rate}_load_p50") ms | $(med "pages${rate}_load_p99") ms |"
    done
  fi
  echo "<!-- fanout:end -->"
} >"$WORK/table.md"
cat "$WORK/table.md"
B=$ROOT/docs/BENCHMARKS.md
if grep -q 'fanout:begin' "$B"; then
  awk -v f="$WORK/table.md" '
    /fanout:begin/ {while ((getline l < f) > 0) print l; skip=1; next}
    /fanout:end/ {skip=0; next}
    !skip {print}' "$B" >"$WORK/b.md" && cp "$WORK/b.md" "$B"
fi
