#!/usr/bin/env bash
# Where the time goes: CPU seconds per server thread (tokio workers, the log writer, …) and for
# wrk, during one ingest run, read from /proc. Also the server's peak RSS.
#   bench/threads.sh [always|interval]      # DURATION=15s CONNS=8 BATCH=1000
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-interval}
DURATION=${DURATION:-15s}
CONNS=${CONNS:-8}
PORT=${PORT:-17198}
export BATCH=${BATCH:-1000} STREAMS=${STREAMS:-100}
dir=$(mktemp -d /tmp/vxthreads.XXXX)
target/release/veltrix serve --listen "127.0.0.1:$PORT" --data-dir "$dir/data" --fsync "$MODE" >"$dir/log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 1 200); do curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break; sleep 0.05; done
tick=$(getconf CLK_TCK)
snap() { for t in /proc/$PID/task/*; do echo "$(cat "$t/comm" | tr ' ' '_') $(awk '{print $14+$15}' "$t/stat")"; done | sort; }
before=$(snap)
/usr/bin/time -f "wrk cpu_s=%U+%S" wrk -t2 -c"$CONNS" -d"$DURATION" -s bench/ingest.lua "http://127.0.0.1:$PORT" 2>&1 | grep -E "Requests/sec|wrk cpu|Non-2xx"
after=$(snap)
join <(echo "$before") <(echo "$after") | awk -v t="$tick" '{d=($3-$2)/t; if (d>0.05) s[$1]+=d} END {for (k in s) printf "thread %-16s cpu_s=%.2f\n", k, s[k]}' | sort -k3 -t= -rn
grep -E "VmHWM|VmRSS" /proc/$PID/status
