"""Target throughput with vs without `diagnose attach`: the cost of being observed.

Starts the demo service, drives it with the demo load generator for --seconds without diagnose,
then again while `diagnose attach` captures it, alternating --rounds times, and prints QPS and P99
ratios (attached / baseline). Run on an otherwise idle machine:

    python benchmarks/attach_overhead.py --seconds 15 --rounds 2

Note: on a small machine the load generator, the service, py-spy and diagnose share the cores;
the ratio then includes CPU competition, not only py-spy's sampling (which never pauses the target).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

from diagnose.demo.runner import running_demo


def load(url: str, seconds: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "diagnose.demo.loadgen", "--url", url, "--max-seconds", str(seconds)],
        stdout=subprocess.PIPE, text=True)


def stats(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=120)
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rate", type=int, default=100, help="py-spy rate (Hz)")
    args = ap.parse_args()
    base, attached = [], []
    with running_demo(clients=1) as svc, tempfile.TemporaryDirectory() as out:
        svc.stats()  # stop the runner's own load generator: this script drives the load
        for _ in range(args.rounds):
            base.append(stats(load(svc.url, args.seconds)))
            gen = load(svc.url, args.seconds)
            subprocess.run([sys.executable, "-m", "diagnose", "attach", str(svc.pid), "--duration",
                            str(args.seconds), "--rate", str(args.rate), "--out", out, "--no-tui"],
                           check=True, capture_output=True)
            attached.append(stats(gen))
    for name, runs in (("baseline", base), ("attached", attached)):
        print(f"{name:9s} " + "  ".join(f"qps={r['qps']:.1f} p50={r['p50_ms']:.2f}ms p99={r['p99_ms']:.2f}ms"
                                        for r in runs))
    qps = statistics.mean(r["qps"] for r in attached) / statistics.mean(r["qps"] for r in base)
    p99 = statistics.mean(r["p99_ms"] for r in attached) / statistics.mean(r["p99_ms"] for r in base)
    print(f"throughput ratio attached/baseline: {qps:.3f}   P99 ratio attached/baseline: {p99:.3f}")


if __name__ == "__main__":
    main()
