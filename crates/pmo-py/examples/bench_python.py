#!/usr/bin/env python3
"""What pmo costs from Python, next to numpy.memmap on the same medium. Prints CSV
(medians over REPEATS):

    python3 bench_python.py [DIR] [REPEATS]     # DIR default /dev/shm

- view_us: a zero-copy float64 array over a 1 MiB and a 64 MiB PMO (constant: no copy);
- attach_detach_us: a read-write attach then detach of the 64 MiB PMO (scheme secure);
- psync_1page_us: change one float64, psync (atomic, encrypted), for schemes secure and none;
- memmap_flush_1page_us: the same change in a numpy.memmap of a file in DIR, then flush()
  (msync: neither atomic nor encrypted; on tmpfs such as /dev/shm it has nothing to write
  back, so this is the floor of a Python-level update, not a durable commit).
"""

import os
import statistics
import sys
import time

import numpy as np

import pmo

KEY = "bench"


def us(f, repeats):
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        samples.append((time.perf_counter() - t) * 1e6)
    return statistics.median(samples)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "/dev/shm"
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    path = os.path.join(d, f"pmo-bench-python-{os.getpid()}.pool")
    mm_path = os.path.join(d, f"pmo-bench-python-{os.getpid()}.memmap")
    rows = []
    try:
        pool = pmo.Pool.init(path, 512 << 20, kdf_mem_kib=64, kdf_iters=1, sparse=True)
        for size in (1 << 20, 64 << 20):
            pool.create(f"v{size}", size, KEY)
            with pool.attach(f"v{size}", KEY, mode="w") as obj:
                n = size // 8

                def view():
                    a = obj.ndarray(np.float64, n)
                    del a

                rows.append(("view_us", "secure", size, us(view, repeats)))
        name = f"v{64 << 20}"
        attach = us(lambda: pool.attach(name, KEY, mode="w").detach(), max(repeats // 10, 5))
        rows.append(("attach_detach_us", "secure", 64 << 20, attach))
        for scheme in ("secure", "none"):
            pool.create(f"p-{scheme}", 1 << 20, KEY, scheme=scheme)
            with pool.attach(f"p-{scheme}", KEY, mode="w") as obj:
                a = obj.ndarray(np.float64, (1 << 20) // 8)
                i = [0]

                def step():
                    i[0] += 1
                    a[1000] = i[0]
                    obj.psync()

                rows.append(("psync_1page_us", scheme, 1 << 20, us(step, repeats)))
                del a
        m = np.memmap(mm_path, dtype=np.float64, mode="w+", shape=((1 << 20) // 8,))
        j = [0]

        def mstep():
            j[0] += 1
            m[1000] = j[0]
            m.flush()

        rows.append(("memmap_flush_1page_us", "-", 1 << 20, us(mstep, repeats)))
        del m
    finally:
        for p in (path, mm_path):
            if os.path.exists(p):
                os.unlink(p)
    print("metric,scheme,pmo_bytes,median_us,repeats")
    for metric, scheme, size, v in rows:
        print(f"{metric},{scheme},{size},{v:.2f},{repeats}")


if __name__ == "__main__":
    main()
