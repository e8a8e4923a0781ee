"""A parent that sleeps while three forked workers busy in numpy matmuls (for --subprocesses).

The workers are forked (not spawned), so each one's main thread keeps the parent's pthread id:
py-spy --subprocesses writes their samples into one B/E stream per tid. Bounded: the workers and
the parent exit after 120 s.
"""
import multiprocessing
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core per worker, no BLAS thread pool
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402 - after the thread-count variables, which numpy reads at import

WORKERS = 3
LIFETIME_S = 120.0


def matmul_loop() -> None:
    a = np.random.default_rng(0).random((160, 160))
    deadline = time.monotonic() + LIFETIME_S
    while time.monotonic() < deadline:
        a = a @ a.T / 160.0


if __name__ == "__main__":
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=matmul_loop, daemon=True) for _ in range(WORKERS)]
    for w in workers:
        w.start()
    print("READY", " ".join(str(w.pid) for w in workers), flush=True)
    deadline = time.monotonic() + LIFETIME_S
    while time.monotonic() < deadline and any(w.is_alive() for w in workers):
        time.sleep(0.2)  # the parent waits for nothing: py-spy sees it idle
