"""Benchmark: multi-rank analysis throughput and memory, local pool vs Dask LocalCluster vs HTA.

Builds N synthetic rank traces (copies of a real trace from ../shared/data/torch-traces, each with
its own ``distributedInfo.rank``; one rank's collectives and steps moved 20 ms late) in a temporary
directory, then times on the same files, each in a fresh child process:

* ``pool``: ``diagnose analyze DIR --workers W --format json`` (import, per-rank analyses in a local
  process pool of W workers, job analysis, findings);
* ``dask``: the same with ``--scheduler`` on a ``distributed.LocalCluster`` of W worker processes
  (1 thread each) started by this script beforehand (start-up not timed);
* ``hta``: Holistic Trace Analysis 0.5.0 (``pip install '.[bench]'`` into a separate venv, passed
  with ``--hta-python``): ``TraceAnalysis(trace_dir=DIR)`` (parses every rank, in its own
  process pool) + temporal breakdown + comm/comp overlap. HTA has no straggler analysis.

Reports ranks/minute (N / wall time x 60) and peak RSS, sampled every 50 ms with psutil: the sum
over the child's process tree (plus the Dask workers for ``dask``) and the largest single process.
Ratios are HTA/diagnose for time and diagnose/HTA for memory. Not a test: the figures depend on
the machine and its load.

    python benchmarks/multirank.py --ranks 8 64 --workers 2 [--hta-python /tmp/htavenv/bin/python]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("DIAGNOSE_SHARED_DATA") or REPO.parent / "shared" / "data") / "torch-traces"
SEED = "nccl_data.json.gz"
STRAGGLER, LAG_US = 5, 20_000.0
HTA_SCRIPT = """
import sys, time, warnings, logging
warnings.filterwarnings("ignore"); logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
ta.get_temporal_breakdown(visualize=False)
ta.get_comm_comp_overlap(visualize=False)
print(time.perf_counter() - t0)
"""


def make_ranks(seed: Path, out: Path, n: int) -> list[Path]:
    """``n`` gzipped copies of ``seed``, rank r in each; rank STRAGGLER's collective kernels and
    ProfilerSteps start LAG_US later, the others' collectives last LAG_US longer."""
    doc = json.loads(gzip.decompress(seed.read_bytes()))
    paths = []
    for r in range(n):
        evs = []
        for e in doc["traceEvents"]:
            coll = e.get("cat") == "kernel" and "Collective name" in (e.get("args") or {})
            step = str(e.get("name", "")).startswith("ProfilerStep#")
            if coll or (step and r == STRAGGLER):
                e = dict(e)
                if r == STRAGGLER:
                    e["ts"] += LAG_US
                else:
                    e["dur"] += LAG_US
            evs.append(e)
        body = {**doc, "distributedInfo": {**doc.get("distributedInfo", {}), "rank": r, "world_size": n},
                "traceEvents": evs}
        p = out / f"rank-{r}.pt.trace.json.gz"
        p.write_bytes(gzip.compress(json.dumps(body).encode(), 3))
        paths.append(p)
    return paths


class PeakRss:
    """Peak RSS of a process tree (and extra processes), sampled every 50 ms: sum and largest."""

    def __init__(self, root: psutil.Process, extra: list[psutil.Process]):
        self.root, self.extra = root, extra
        self.sum_peak = self.max_peak = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            procs = list(self.extra)
            try:
                procs += [self.root, *self.root.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
            rss = []
            for p in procs:
                try:
                    rss.append(p.memory_info().rss)
                except psutil.Error:
                    continue
            if rss:
                self.sum_peak, self.max_peak = max(self.sum_peak, sum(rss)), max(self.max_peak, max(rss))
            self.stop.wait(0.05)

    def __enter__(self) -> PeakRss:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def timed(cmd: list[str], extra: list[psutil.Process] | None = None) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with PeakRss(psutil.Process(proc.pid), extra or []) as peak:
        out, err = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed ({proc.returncode}): {err.decode()[-400:]}")
    return {"wall_s": wall, "rss_sum": peak.sum_peak, "rss_max": peak.max_peak, "stdout": out}


def diagnose_cmd(d: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "diagnose", "analyze", str(d), "--out", str(out), "--format", "json", *extra]


def check_straggler(stdout: bytes) -> str:
    ranks = json.loads(stdout)["details"]["ranks"]
    return ",".join(str(r) for r in ranks["verdict"]["ranks"]) or "-"


def run_pool(d: Path, out: Path, workers: int) -> dict:
    r = timed(diagnose_cmd(d, out, "--workers", str(workers)))
    return {**r, "found": check_straggler(r["stdout"])}


def run_dask(d: Path, out: Path, workers: int) -> dict | None:
    try:
        from distributed import LocalCluster
    except ImportError:
        print("distributed not installed: no dask row (pip install 'diagnose[dask]')")
        return None
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        procs = list(psutil.Process().children(recursive=True))
        r = timed(diagnose_cmd(d, out, "--scheduler", c.scheduler_address), procs)
    return {**r, "found": check_straggler(r["stdout"])}


def run_hta(d: Path, hta_python: str) -> dict:
    return {**timed([hta_python, "-c", HTA_SCRIPT, str(d)]), "found": "n/a"}


def bench(n: int, workers: int, hta_python: str | None, engines: set[str]) -> list[tuple[str, int, dict]]:
    rows: list[tuple[str, int, dict]] = []
    with tempfile.TemporaryDirectory() as tmp:
        d, out = Path(tmp) / "ranks", Path(tmp) / "out"
        d.mkdir()
        out.mkdir()
        make_ranks(DATA / SEED, d, n)
        if "pool" in engines:
            rows.append(("diagnose pool", n, run_pool(d, out, workers)))
        if "dask" in engines and (r := run_dask(d, out, workers)) is not None:
            rows.append(("diagnose dask", n, r))
        if hta_python and "hta" in engines:
            rows.append(("HTA 0.5.0", n, run_hta(d, hta_python)))
    return rows


def table(rows: list[tuple[str, int, dict]]) -> str:
    head = f"{'engine':<14} {'ranks':>5} {'wall s':>7} {'ranks/min':>9} {'peak RSS sum MB':>15} " \
           f"{'largest proc MB':>15} {'straggler':>9} {'HTA/us time':>11} {'us/HTA mem':>10}"
    lines = [head, "-" * len(head)]
    hta = {n: r for name, n, r in rows if name.startswith("HTA")}
    for name, n, r in rows:
        h = hta.get(n)
        t_ratio = f"{h['wall_s'] / r['wall_s']:.2f}" if h and not name.startswith("HTA") else "-"
        m_ratio = f"{r['rss_sum'] / h['rss_sum']:.2f}" if h and not name.startswith("HTA") else "-"
        rate = n / r["wall_s"] * 60
        lines.append(f"{name:<14} {n:>5} {r['wall_s']:>7.1f} {rate:>9.0f} {r['rss_sum'] / 2**20:>15.0f} "
                     f"{r['rss_max'] / 2**20:>15.0f} {r['found']:>9} {t_ratio:>11} {m_ratio:>10}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[8])
    ap.add_argument("--workers", type=int, default=2, help="local pool size and Dask worker processes")
    ap.add_argument("--hta-python", help="python of a venv with holistictraceanalysis==0.5.0 (the bench extra)")
    ap.add_argument("--no-hta-above", type=int, default=1 << 30, help="skip HTA for more ranks than this")
    ap.add_argument("--engines", nargs="+", default=["pool", "dask", "hta"], choices=["pool", "dask", "hta"])
    args = ap.parse_args()
    if not (DATA / SEED).is_file():
        raise SystemExit(f"seed trace {DATA / SEED} not found (set DIAGNOSE_SHARED_DATA)")
    rows = []
    for n in args.ranks:
        rows += bench(n, args.workers, args.hta_python if n <= args.no_hta_above else None, set(args.engines))
        print(table(rows), flush=True)
        print()


if __name__ == "__main__":
    main()
