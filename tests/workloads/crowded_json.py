"""A service-bound JSON loop on a host crowded by other processes: before it starts it forks
busy loops (3 per CPU) that stay in its session, so the scheduler's autogroup shares the CPUs
between them and the target as it would with a sidecar or a load generator started beside it.
The target itself is one thread; py-spy attaches to it alone (no --subprocesses). Bounded:
everything exits after --max-s seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import time

p = argparse.ArgumentParser()
p.add_argument("--per-cpu", type=int, default=3)
p.add_argument("--max-s", type=float, default=90.0)
args = p.parse_args()
DEADLINE = time.monotonic() + args.max_s
PAYLOAD = {"rows": [{"id": i, "name": f"item-{i}", "values": [i * 0.5] * 20} for i in range(2000)]}

for _ in range((os.cpu_count() or 1) * args.per_cpu):
    if os.fork() == 0:  # another process on the host: a busy loop, nothing of the target's
        x = 0
        while time.monotonic() < DEADLINE:
            x += 1
        os._exit(0)


def serialize_payloads() -> None:
    while time.monotonic() < DEADLINE:
        json.loads(json.dumps(PAYLOAD))


print("READY", flush=True)
serialize_payloads()
