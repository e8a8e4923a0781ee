"""What each discrete event of a capture costs a served demo, seen in its throughput: requests
completed per BIN_MS bin (a closed loop of keep-alive clients in this process, each completion
stamped in Unix ns), averaged over every event of a kind, aligned on the event's time from the
bundle's indexes, against the capture's mean rate. Far finer than benchmarks/overhead.py's ratios
(whose rounds spread +-5%): one 20 s capture holds ~8 torch windows and 4 py-spy window boundaries.

    python benchmarks/event_cost.py [--seconds 20] [--rounds 2] [-- ATTACH ARGS...]

Events: the agent's torch windows (TORCH index: ``start_ns``, ``stopping_ns``, ``end_ns`` after the
profiler's stop) and py-spy's window boundaries (PYSPY index: ``spawn_ns``, ``exit_ns``). Prints,
per event, the requests lost in [-BEFORE_MS, +AFTER_MS] (the rate's shortfall summed over the
bins), that loss as a share of the capture's throughput, and the mean rate in 10 ms steps.
Same service as benchmarks/overhead.py (the demo under `diagnose run`, its agent idle until attached).
"""
from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from overhead import compile_bytecode, service

from diagnose.bundle.streams import PYSPY, TORCH
from diagnose.demo.loadgen import bodies_for

BIN_MS = 5
BEFORE_MS, AFTER_MS = 50, 200
EVENTS = ((TORCH.name, ("start_ns", "stopping_ns", "end_ns")), (PYSPY.name, ("spawn_ns", "exit_ns")))


def closed_loop(port: int, clients: int, done: list[int], stop: threading.Event) -> list[threading.Thread]:
    """``clients`` threads each sending one request at a time; every completion's Unix ns into ``done``."""
    bodies = bodies_for(8, "healthy")

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        while not stop.is_set():
            conn.request("POST", "/predict", random.choice(bodies), {"Content-Type": "application/json"})
            conn.getresponse().read()
            done.append(time.time_ns())

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    return threads


def one_capture(pid: int, port: int, seconds: float, clients: int, attach_args: list[str]) -> tuple[list[int], Path]:
    """Completions during one attach of ``seconds`` (and 2 s either side), and its bundle."""
    done: list[int] = []
    stop = threading.Event()
    closed_loop(port, clients, done, stop)
    time.sleep(2.0)
    out = Path(tempfile.mkdtemp(prefix="dg-event-cost-"))
    subprocess.run([sys.executable, "-m", "diagnose", "attach", str(pid), "--duration", str(seconds), "--out",
                    str(out), "--no-tui", *attach_args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False, timeout=seconds + 120)
    time.sleep(2.0)
    stop.set()
    bundles = sorted(out.glob("diagnose-*"))
    if not bundles:
        raise SystemExit(f"the attach wrote no bundle under {out}")
    return done, bundles[0]


def profile(done: list[int], bundle: Path, stream: str, key: str) -> tuple[list[float], int, float, float] | None:
    """(rates per bin relative to the capture's mean, events, the capture's mean req/s, its seconds)."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    t0, t1 = manifest["started_ns"], manifest["ended_ns"]
    bin_ns = BIN_MS * 1_000_000
    bins: dict[int, int] = {}
    for t in done:
        bins[t // bin_ns] = bins.get(t // bin_ns, 0) + 1
    inside = [bins.get(b, 0) for b in range(t0 // bin_ns + 20, t1 // bin_ns - 20)]  # 100 ms in from each end
    index = bundle / stream
    times = [r[key] for r in map(json.loads, index.read_text().splitlines()) if isinstance(r.get(key), int)] \
        if index.is_file() else []
    if not times or not inside or not statistics.mean(inside):
        return None
    mean = statistics.mean(inside)
    rows = [[bins.get(t // bin_ns + k, 0) / mean for k in range(-BEFORE_MS // BIN_MS, AFTER_MS // BIN_MS)]
            for t in times]
    return [statistics.mean(col) for col in zip(*rows)], len(times), mean * 1000 / BIN_MS, (t1 - t0) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("attach_args", nargs="*", help="after --: more arguments for diagnose attach")
    args = ap.parse_args()
    compile_bytecode()
    runs = []
    with service(None) as (pid, url):
        port = int(url.split(":")[2].split("/")[0])
        time.sleep(1.0)
        for _ in range(args.rounds):
            runs.append(one_capture(pid, port, args.seconds, args.clients, args.attach_args))
    print(f"throughput around each event, relative to the capture's mean, {BIN_MS} ms bins; "
          f"{args.rounds} x {args.seconds:g} s captures, {args.clients} clients")
    for stream, keys in EVENTS:
        for key in keys:
            found = [p for p in (profile(done, bundle, stream, key) for done, bundle in runs) if p]
            if not found:
                print(f"  {stream} {key}: no events")
                continue
            n = sum(p[1] for p in found)
            curve = [sum(p[0][i] * p[1] for p in found) / n for i in range(len(found[0][0]))]
            rate = statistics.mean(p[2] for p in found)
            lost = sum(1 - c for c in curve) * rate * BIN_MS / 1000
            per_s = n / sum(p[3] for p in found)
            print(f"  {stream} {key:12s} {n:3d} events, {per_s:.2f}/s: {lost:6.1f} requests lost each "
                  f"({100 * lost * per_s / rate:.2f}% of the throughput, at {rate:.0f} req/s)")
            steps = [statistics.mean(curve[i:i + 2]) for i in range(0, len(curve), 2)]
            print(f"    -{BEFORE_MS} ms .. +{AFTER_MS} ms by 10 ms:", " ".join(f"{s:.2f}" for s in steps))


if __name__ == "__main__":
    main()
