"""Benchmark: diagnose's kernel-timeline analysis vs Holistic Trace Analysis on the same traces.

For each shared torch trace (../shared/data/torch-traces) and a synthetic trace of at least 1 GB
(built by repeating a real one with shifted timestamps and ids), run in separate child processes:

* diagnose: streaming read (traces/reader.py) + every analyzer (traces/report.py) + signals;
* HTA 0.5.0 (``pip install '.[bench]'`` into a separate venv, passed with ``--hta-python``):
  ``TraceAnalysis`` load + temporal breakdown + idle-time breakdown + kernel breakdown.

Prints wall and CPU time (load + analysis, imports excluded on both sides; medians of --repeat
fresh processes for the small traces) and peak RSS (the child's ru_maxrss, interpreter and
imports included), with the ratios HTA/diagnose (time) and diagnose/HTA (memory). "MB" is the
file's size on disk (the shared traces are gzipped). Not a test: numbers depend on the machine.

    python benchmarks/bench_vs_hta.py --hta-python /tmp/benchvenv/bin/python [--synthetic-gb 1.0]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data" / "torch-traces"
GPU_TRACES = ("rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "nccl_data.json.gz",
              "benchmark_result_493459_1694039959_trace.json.gz", "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
SEED_TRACE = "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


def _rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_diagnose(path: str) -> dict:
    sys.path.insert(0, str(REPO))
    import numpy.ma  # noqa: F401  numpy imports it lazily on first percentile; imports are not timed

    from diagnose.signals.kernel_timeline import trace_signals
    from diagnose.signals.timeline import device_peak
    from diagnose.traces.reader import read_trace
    from diagnose.traces.report import analyze_trace

    base = _rss_bytes()
    t0, c0 = time.perf_counter(), _cpu_s()
    report = analyze_trace(read_trace(path), device_peak)
    trace_signals([report], "")
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    tb = report.temporal_hta
    return {"wall_s": wall, "cpu_s": cpu, "rss_peak_bytes": _rss_bytes(), "rss_after_imports_bytes": base,
            "events": report.read.events,
            "idle_pct": tb.pct(tb.idle_ns) if tb else None, "compute_pct": tb.pct(tb.compute_ns) if tb else None,
            "non_compute_pct": tb.pct(tb.non_compute_ns) if tb else None}


def run_hta(path: str) -> dict:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as d:
        os.symlink(os.path.abspath(path), os.path.join(d, os.path.basename(path)))
        base = _rss_bytes()
        t0, c0 = time.perf_counter(), _cpu_s()
        ta = TraceAnalysis(trace_dir=d)
        tb = ta.get_temporal_breakdown(visualize=False)
        ta.get_idle_time_breakdown(visualize=False)
        ta.get_gpu_kernel_breakdown(visualize=False)
        wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    row = tb.iloc[0]
    return {"wall_s": wall, "cpu_s": cpu, "rss_peak_bytes": _rss_bytes(), "rss_after_imports_bytes": base,
            "idle_pct": float(row["idle_time_pctg"]), "compute_pct": float(row["compute_time_pctg"]),
            "non_compute_pct": float(row["non_compute_time_pctg"])}


def make_synthetic(seed: Path, out: Path, min_bytes: int) -> Path:
    """Repeat ``seed``'s events with shifted ts and ids until the JSON file holds >= min_bytes."""
    import gzip

    import orjson

    doc = orjson.loads(gzip.open(seed).read())
    events = doc.pop("traceEvents")
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    period = (max(ts) - min(ts)) * 1.001 + 1000.0
    id_step = 10 ** (len(str(max(int(e.get("args", {}).get("correlation", 0) or 0) for e in events))) + 1)
    head = orjson.dumps(doc)[:-1] + b', "traceEvents": [\n'
    written = 0
    with open(out, "wb") as fh:
        fh.write(head)
        k = 0
        while written < min_bytes:
            chunk = b",\n".join(orjson.dumps(_shift(e, k, period, id_step)) for e in events)
            fh.write((b",\n" if k else b"") + chunk)
            written += len(chunk)
            k += 1
        fh.write(b"\n]}\n")
    return out


def _shift(e: dict, k: int, period: float, id_step: int) -> dict:
    if not k:
        return e
    e = dict(e)
    if isinstance(e.get("ts"), (int, float)):
        e["ts"] = e["ts"] + k * period
    if "id" in e and isinstance(e["id"], int):
        e["id"] += k * id_step
    args = e.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key in ("correlation", "External id"):
            if isinstance(args.get(key), int):
                args[key] += k * id_step
        e["args"] = args
    name = e.get("name")
    if isinstance(name, str) and name.startswith("ProfilerStep#"):
        e["name"] = f"ProfilerStep#{int(name[13:]) + 1000 * k}"
    return e


def _child(kind: str, path: Path, python: str) -> dict:
    cmd = [python, __file__, "--run", kind, str(path)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        return {"error": (res.stderr or res.stdout).strip().splitlines()[-1:] or [f"exit {res.returncode}"]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def _median_of(kind: str, path: Path, python: str, repeat: int) -> dict:
    """Median wall and CPU time over ``repeat`` fresh processes; the largest peak RSS."""
    runs = [_child(kind, path, python) for _ in range(repeat)]
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    med = lambda k: sorted(r[k] for r in ok)[len(ok) // 2]  # noqa: E731
    return {**ok[0], "wall_s": med("wall_s"), "cpu_s": med("cpu_s"),
            "rss_peak_bytes": max(r["rss_peak_bytes"] for r in ok), "runs": len(ok)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python", help="python of a venv with holistictraceanalysis==0.5.0")
    ap.add_argument("--synthetic-gb", type=float, default=1.0, help="size of the synthetic trace (0: skip)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "diagnose-bench")
    ap.add_argument("--repeat", type=int, default=5, help="runs per small trace (medians); 1 for the synthetic one")
    ap.add_argument("--run", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        print(json.dumps((run_diagnose if args.run[0] == "diagnose" else run_hta)(args.run[1])))
        return 0
    if not DATA.is_dir():
        print(f"shared traces not found at {DATA}", file=sys.stderr)
        return 2
    files = [DATA / f for f in GPU_TRACES]
    if args.synthetic_gb > 0:
        args.workdir.mkdir(parents=True, exist_ok=True)
        target = args.workdir / f"synthetic-{args.synthetic_gb:g}gb.json"
        if not target.is_file() or target.stat().st_size < args.synthetic_gb * 1e9:
            make_synthetic(DATA / SEED_TRACE, target, int(args.synthetic_gb * 1e9))
        files.append(target)
    print(f"{'trace':<40} {'MB':>7} {'diag s':>7} {'HTA s':>8} {'wall x':>7} {'CPU x':>6} "
          f"{'diag MB':>8} {'HTA MB':>7} {'mem':>5}  temporal idle/compute/non (diag | HTA)")
    for f in files:
        n = 1 if f.stat().st_size > 1e8 else args.repeat
        d = _median_of("diagnose", f, sys.executable, n)
        h = (_median_of("hta", f, args.hta_python, n) if args.hta_python
             else {"error": ["--hta-python not given"]})
        _print_row(f, d, h)
    return 0


def _print_row(f: Path, d: dict, h: dict) -> None:
    mb = f.stat().st_size / 1e6
    name = f.name[:40]
    if "error" in d:
        print(f"{name:<40} diagnose failed: {d['error']}")
        return
    tri = lambda r: "/".join(f"{r[k]:.2f}" if r.get(k) is not None else "-" for k in  # noqa: E731
                             ("idle_pct", "compute_pct", "non_compute_pct"))
    if "error" in h:
        print(f"{name:<40} {mb:7.1f} {d['wall_s']:7.2f} {'-':>8} {'-':>7} {'-':>6} "
              f"{d['rss_peak_bytes'] / 1e6:8.0f} {'-':>7} {'-':>5}  {tri(d)} | HTA failed: {h['error']}")
        return
    print(f"{name:<40} {mb:7.1f} {d['wall_s']:7.2f} {h['wall_s']:8.2f} {h['wall_s'] / d['wall_s']:6.1f}x "
          f"{h['cpu_s'] / d['cpu_s']:5.1f}x {d['rss_peak_bytes'] / 1e6:8.0f} {h['rss_peak_bytes'] / 1e6:7.0f} "
          f"{d['rss_peak_bytes'] / h['rss_peak_bytes']:5.2f}  {tri(d)} | {tri(h)}")


if __name__ == "__main__":
    sys.exit(main())
