"""Crash consistency from Python: a child psyncs whole generations in a loop and is killed with
SIGKILL at random moments; every read afterwards shows exactly one whole generation."""

import os
import random
import signal
import subprocess
import sys
import time

import numpy as np

from conftest import KEY

WORDS = 16 * 512  # 16 pages of u64
KILLS = int(os.environ.get("PMO_PY_KILLS", "6"))

LOOP = """
import sys, numpy as np, pmo
pool = pmo.Pool(sys.argv[1])
obj = pool.attach("gen", sys.argv[2], mode="w", wait=30.0)
a = obj.ndarray(np.uint64, %d)
g = int(a[0])
print("ready", flush=True)
while True:
    g += 1
    a[:] = g
    obj.psync()
""" % WORDS


def test_sigkill_in_psync_loop_leaves_one_whole_generation(pool):
    rng = random.Random(12)
    for scheme in ("secure", "none"):
        name = "gen"
        pool.create(name, WORDS * 8, KEY, scheme=scheme)
        seen = []
        for _ in range(KILLS):
            p = subprocess.Popen([sys.executable, "-c", LOOP, pool.path, KEY],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
            time.sleep(rng.uniform(0.02, 0.3))
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=30)
            with pool.attach(name, KEY, wait=30.0) as ro:
                a = ro.ndarray(np.uint64, WORDS)
                gens = np.unique(a)
                assert len(gens) == 1, f"{scheme}: torn generation: {gens[:8]}"
                seen.append(int(gens[0]))
                del a
        # Generations only move forward, and the loop did commit some.
        assert seen == sorted(seen) and seen[-1] > 0, seen
        pool.check()
        pool.destroy(name, KEY)
