"""Benchmark: CPU time of ``read_trace`` per shared torch trace, this checkout against another.

Each side runs in its own child process (``PYTHONPATH`` set to the checkout, imports not timed),
the sides alternate ``--runs`` times, and each run reads every file ``--rounds`` times; printed per
file: the median of the runs' medians of process CPU seconds (``time.process_time``, which other
load on the host disturbs far less than wall time), the range over runs, the ratio other/this,
and whether both read the same columns (a digest of every table, name and count). Not a test.

    python benchmarks/trace_read_cpu.py --against /work/main [--rounds 9 --runs 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data" / "torch-traces"
FILES = [*sorted(DATA.glob("*.json*")), REPO / "fixtures/torch/h200-train-step/trace.json.gz",
         REPO / "fixtures/flops/h200-cuda/trace.json.gz"]

CHILD = r"""
import hashlib, json, statistics, sys, time
import numpy as np
from diagnose.traces.reader import read_trace
out = {}
for f in json.loads(sys.argv[1]):
    try:
        t = read_trace(f)
    except Exception as exc:
        out[f] = {"error": str(exc)[:80]}
        continue
    cpu = []
    for _ in range(int(sys.argv[2])):
        c = time.process_time(); t = read_trace(f); cpu.append(time.process_time() - c)
    h = hashlib.sha256()
    for tab in (t.gpu, t.runtime, t.cpu, t.flows):
        for k in sorted(tab.columns):
            h.update(k.encode()); h.update(np.ascontiguousarray(tab[k]).tobytes())
    h.update(repr((t.names, t.thread_names, t.process_names, t.report, t.meta)).encode())
    out[f] = {"cpu_s": statistics.median(cpu), "digest": h.hexdigest()[:12]}
print(json.dumps(out))
"""


def run(checkout: Path, files: list[str], rounds: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(files), str(rounds)], env=env, check=True,
                          capture_output=True, text=True, cwd="/")
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, required=True, help="the other checkout (e.g. /work/main)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    files = [str(f) for f in FILES if f.exists()]
    this: list[dict] = []
    other: list[dict] = []
    for _ in range(args.runs):
        other.append(run(args.against, files, args.rounds))
        this.append(run(REPO, files, args.rounds))
    print(f"{'file':44} {'this ms (range)':>20} {'other ms (range)':>20} {'other/this':>10}  same")
    for f in files:
        a = [r[f].get("cpu_s") for r in this]
        b = [r[f].get("cpu_s") for r in other]
        if None in a or None in b:
            print(f"{Path(f).name[:44]:44} error: {this[0][f].get('error') or other[0][f].get('error')}")
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        same = this[0][f]["digest"] == other[0][f]["digest"]
        print(f"{Path(f).name[:44]:44} {ma * 1e3:7.1f} ({min(a) * 1e3:.1f}-{max(a) * 1e3:.1f}) "
              f"{mb * 1e3:7.1f} ({min(b) * 1e3:.1f}-{max(b) * 1e3:.1f}) {mb / ma:10.2f}  {same}")


if __name__ == "__main__":
    main()
