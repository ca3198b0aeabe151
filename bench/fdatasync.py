#!/usr/bin/env python3
"""The disk's own fdatasync latency, as the log writer sees it: append N small records to a
file in DIR, each followed by fdatasync, and print p50/p90/p99/p99.9 in microseconds.

    bench/fdatasync.py DIR [N]
"""
import os
import sys
import time

d = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
path = os.path.join(d, "fdatasync-probe.bin")
fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o644)
took = []
off = 0
rec = b"x" * 128
for _ in range(n):
    t = time.perf_counter()
    os.pwrite(fd, rec, off)
    os.fdatasync(fd)
    took.append(time.perf_counter() - t)
    off += len(rec)
os.close(fd)
os.remove(path)
took.sort()
q = lambda p: round(took[min(len(took) - 1, int(len(took) * p))] * 1e6)
print(f"fdatasync n={n} p50_us={q(0.5)} p90_us={q(0.9)} p99_us={q(0.99)} p999_us={q(0.999)} max_us={round(took[-1] * 1e6)}")
