# Helpers the bench scripts share (sourced, not run): the median of a column, stopping a server
# by its PID, refusing to start on a busy port.

# Median of the numbers on stdin, one per line ("nan" when there are none).
median() {
  sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else printf "%.15g\n", (a[NR/2]+a[NR/2+1])/2}'
}

# stop_pid PID: SIGTERM, up to 30 s to exit, then SIGKILL; reaps it. No-op for "" or a dead PID.
stop_pid() {
  local pid=$1
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
}

# refuse_if_listening PORT…: exit 1 if anything listens on one of them on 127.0.0.1.
refuse_if_listening() {
  local p
  for p in "$@"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "something already listens on 127.0.0.1:$p; refusing to start" >&2
      exit 1
    fi
  done
}

# ---- helpers of the scripts that keep results (features.sh, fanout.sh) ------------------------
# They use the caller's globals: RESULTS (this run's `key value` lines), RUNS (the committed log
# of every run), PORT and PID (the server under test).

log() { echo "# $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
load1() { cut -d' ' -f1 /proc/loadavg; }
# cpu_ticks PID: the user and system CPU time of a process and all its threads, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# record KEY VALUE [context…]: keep the value, and log it with its context.
record() {
  local k=$1 v=$2; shift 2
  echo "$k $v" >>"$RESULTS"
  echo "$k $v $*" | tee -a "$RUNS" >&2
}
# med KEY: the median of the values recorded under KEY.
med() { awk -v k="$1" '$1==k {print $2}' "$RESULTS" | median; }
jqr() { jq -r "$1" "$2"; }
# wait_ready: until the server on PORT answers /readyz (30 s at most, or it exited).
wait_ready() {
  for _ in $(seq 1 600); do
    curl -sf "localhost:$PORT/readyz" >/dev/null && return 0
    kill -0 "$PID" 2>/dev/null || { log "veltrix exited"; return 1; }
    sleep 0.05
  done
  log "veltrix not ready in 30 s"; return 1
}
rss_anon_kb() { awk '/^RssAnon:/ {print $2}' "/proc/$1/status"; }

# bench_init NAME: a work dir removed at exit (KEEP_WORK=1 keeps it) with the server stopped,
# RESULTS in it, RUNS = docs/bench/NAME-runs.txt. SECTIONS selects what `want` runs.
PID=""
stop() { stop_pid "$PID"; PID=""; }
cleanup() { stop; [[ ${KEEP_WORK:-0} == 1 ]] || rm -rf "$WORK"; }
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
bench_init() {
  WORK=$(mktemp -d "/tmp/vx-$1.XXXXXX")
  trap cleanup EXIT
  RESULTS=$WORK/results.txt
  RUNS=$ROOT/docs/bench/$1-runs.txt
  mkdir -p "$(dirname "$RUNS")"
  : >"$RESULTS"
}

# decl3_yaml FILE: the config of the three windowed aggregates the feature benchmarks declare
# over vx-loadtest's events (type `lt`): count 5m, count 1h, distinct streams 1d.
decl3_yaml() {
  cat >"$1" <<'YAML'
storage:
  # Declared aggregates count at their largest (docs/FEATURES.md): 1M entities with these
  # three need about 3.5 GiB of budget, more than the 1 GiB default.
  max_feature_bytes: 8GiB
features:
  - {name: n_5m, from: lt, agg: count, window: 5m}
  - {name: n_1h, from: lt, agg: count, window: 1h}
  - {name: streams_1d, from: lt, agg: distinct, of: stream, window: 1d}
YAML
}
