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
