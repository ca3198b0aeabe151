#!/usr/bin/env python3
"""Memory of the feature tables as a new user meets it (issue 20), beside Redis 7 in the same run.

    bench/feature-memory.py [N] [REPS]        # N=1000000 entities, REPS=3; needs redis-server
    bench/feature-memory.py N REPS --decl3    # three windowed aggregates, 10 events per entity

For Veltrix (target/release/veltrix, `--fsync interval`, default budget unless
VX_STORAGE_MAX_FEATURE_BYTES is set): one counter event per new entity (`player-N`, type
`damage`), 1000 per NDJSON request, one connection; at N/8, N/2 and N entities the RssAnon growth
over the empty server and `vx_feature_bytes`. For Redis (no persistence): the same N keys with the
same three fields (`HSET player-N damage 3 events 1 last_ts TS`) through `redis-cli --pipe`, its
RssAnon growth. Bytes per entity are growth ÷ entities. Veltrix's "empty" is taken after 20
requests of the same shape without entities, so ingest's own working set (buffers, channels:
about 10 MB, what the budget does not count) is not charged to the tables. Medians of REPS runs;
every run printed.

With --decl3 (issue 20's second case, no Redis side): the server declares count 5m, count 1h and
distinct 1d over `damage` events, and every entity gets 10 of them, 1 s apart, with one of five
weapons in `data` (the distinct counts weapons).
"""

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
DECL3 = "--decl3" in sys.argv
N = int(ARGS[0]) if len(ARGS) > 0 else 1_000_000
REPS = int(ARGS[1]) if len(ARGS) > 1 else 3
DECL3_YAML = """features:
  - {name: n_5m, from: damage, agg: count, window: 5m}
  - {name: n_1h, from: damage, agg: count, window: 1h}
  - {name: weapons_1d, from: damage, agg: distinct, of: data, window: 1d}
storage:
  max_feature_bytes: 64GiB
"""
PORT = 17999
REDIS_PORT = 16399


def rss_anon(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon")


def get(path):
    return urllib.request.urlopen(f"http://127.0.0.1:{PORT}{path}", timeout=30).read().decode()


def veltrix_run():
    d = tempfile.mkdtemp()
    extra = []
    if DECL3:
        with open(f"{d}.yaml", "w") as f:
            f.write(DECL3_YAML)
        extra = ["--config", f"{d}.yaml"]
    p = subprocess.Popen(
        [f"{ROOT}/target/release/veltrix", "serve", "--listen", f"127.0.0.1:{PORT}", "--data-dir", d,
         "--fsync", "interval"] + extra,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                get("/readyz")
                break
            except Exception:
                time.sleep(0.1)
        warm = "".join(json.dumps({"stream": "m", "type": "damage", "kind": "counter", "value": 3}) + "\n"
                       for _ in range(1000)).encode()
        for _ in range(20):
            urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{PORT}/v1/events", data=warm,
                headers={"content-type": "application/x-ndjson"}), timeout=60).read()
        empty = rss_anon(p.pid)
        out, sent = {}, 0
        marks = {N // 8, N // 2, N}
        while sent < N:
            if DECL3:
                # 100 entities, 10 events each, 1 s apart, one of five weapons each.
                t0 = 1_764_100_000_000
                body = "".join(json.dumps({"stream": "m", "type": "damage", "kind": "counter", "value": 3,
                                           "entity": f"player-{sent + i}", "ts": t0 + k * 1000,
                                           "data": {"w": (i + k) % 5}}) + "\n"
                               for k in range(10) for i in range(100))
                step = 100
            else:
                body = "".join(json.dumps({"stream": "m", "type": "damage", "kind": "counter", "value": 3,
                                           "entity": f"player-{sent + i}"}) + "\n" for i in range(1000))
                step = 1000
            req = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/events", data=body.encode(),
                                         headers={"content-type": "application/x-ndjson"})
            try:
                urllib.request.urlopen(req, timeout=60).read()
            except urllib.error.HTTPError as e:
                out["refused_at"] = sent
                print(f"  refused at {sent} entities: {e.code}")
                break
            sent += step
            if sent in marks:
                grown = rss_anon(p.pid) - empty
                counted = float(re.search(r"^vx_feature_bytes (\S+)", get("/metrics"), re.M).group(1))
                out[sent] = (grown / sent, counted / sent, counted / grown)
                print(f"  {sent} entities: {grown / sent:.0f} B/entity RssAnon growth, "
                      f"{counted / sent:.0f} B/entity counted, counted/growth {counted / grown:.2f}")
        out["final_growth_mib"] = (rss_anon(p.pid) - empty) / 2**20
        return out
    finally:
        p.terminate()
        p.wait()


def redis_run():
    d = tempfile.mkdtemp()
    p = subprocess.Popen(["redis-server", "--port", str(REDIS_PORT), "--save", "", "--appendonly", "no",
                          "--dir", d], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        empty = rss_anon(p.pid)
        cmds = bytearray()
        for i in range(N):
            args = [b"HSET", b"player-%d" % i, b"damage", b"3", b"events", b"1", b"last_ts", b"1764100000000"]
            cmds += b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
        subprocess.run(["redis-cli", "-p", str(REDIS_PORT), "--pipe"], input=bytes(cmds),
                       stdout=subprocess.DEVNULL, check=True)
        per = (rss_anon(p.pid) - empty) / N
        print(f"  redis {N} keys: {per:.0f} B/key RssAnon growth")
        return per
    finally:
        p.terminate()
        p.wait()


def main():
    print(f"# bench/feature-memory.py N={N} REPS={REPS}{' --decl3' if DECL3 else ''} "
          f"load1={os.getloadavg()[0]:.2f}")
    vx, rd = [], []
    for rep in range(REPS):
        print(f"rep {rep + 1}: veltrix")
        vx.append(veltrix_run())
        if not DECL3:
            print(f"rep {rep + 1}: redis")
            rd.append(redis_run())
    if DECL3 and all(N in r for r in vx):
        per = statistics.median(r[N][0] for r in vx)
        counted = statistics.median(r[N][1] for r in vx)
        print(f"median at {N} (three windowed aggregates, 10 events each): Veltrix {per:.0f} B/entity "
              f"(counted {counted:.0f})")
    elif all(N in r for r in vx):
        per = statistics.median(r[N][0] for r in vx)
        counted = statistics.median(r[N][1] for r in vx)
        print(f"median at {N}: Veltrix {per:.0f} B/entity (counted {counted:.0f}), "
              f"Redis {statistics.median(rd):.0f} B/key, Veltrix/Redis {per / statistics.median(rd):.2f}")
    else:
        print(f"median final growth: {statistics.median(r['final_growth_mib'] for r in vx):.1f} MiB")


if __name__ == "__main__":
    main()
