"""diagnose's own CPU during an attach, per part, as % of one core (CPU time, not wall time: other
work on the host disturbs it far less).

Targets: ``threads40`` (tests/workloads/mixed_threads.py: 40 threads, a TCP echo server with 4
connected clients, 10 threads in short json bursts, sleepers) and ``demo`` (the demo's healthy
scenario under its own load, agent included, as ``diagnose demo --scenario healthy``). Each round
runs a real attach in a fresh interpreter (diagnose.pipeline.attach, every collector, default
options, the analysis imported in the background as the CLI does) and reads, when the capture ends:

- every thread of this process from /proc/self/task/<tid>/stat, by Python thread name
  (``diagnose-process``, ``diagnose-pyspy``, the capture loop in ``MainThread``...);
- the process collector's parts and the py-spy collector's window scan by ``time.thread_time``
  around their methods (``_threads``, ``_read_tcp``, ``_read_system``, ``_scan_window``);
- the child processes (the py-spy windows and its probe) by getrusage(RUSAGE_CHILDREN);
- the bundle manifest's ``cost`` (what the report states) and the verdict of its analysis.

It also times py-spy's restart: the CPU of one ``py-spy record`` of 1 s against one of 5 s on the
40-thread target (fixed cost per window = what a window costs beyond its seconds of sampling).

    python benchmarks/own_cpu.py --seconds 20 --rounds 3 [--targets threads40 demo] [--json out.json]
    python benchmarks/own_cpu.py --compare before.json after.json   # two runs (two checkouts) side by side

Prints the host's load (loadavg and busy share of its CPUs) beside each round. Needs py-spy; the
demo target needs the demo extra (torch, aiohttp).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "tests" / "workloads" / "mixed_threads.py"
PARTS: dict[str, float] = defaultdict(float)  # part -> thread CPU s (time.thread_time)
ENDED: dict[str, float] = defaultdict(float)  # collector thread name -> its CPU s when its loop ended
TICK = 1.0


def _timed(cls: type, attr: str, key: str) -> None:
    """Count the thread CPU of ``cls.attr`` under ``key`` (absent methods are skipped)."""
    orig = cls.__dict__.get(attr)
    if orig is None or getattr(orig, "_timed", False):
        return

    def wrapper(self: Any, *a: Any, **k: Any) -> Any:
        t = time.thread_time()
        try:
            return orig(self, *a, **k)
        finally:
            PARTS[key] += time.thread_time() - t

    wrapper._timed = True  # type: ignore[attr-defined]
    setattr(cls, attr, wrapper)


def _until_end(cls: type, attr: str) -> None:
    """Record the thread CPU of ``cls.attr`` (a collector's thread loop) when it returns: a thread
    that has ended can no longer be read from /proc."""
    orig = cls.__dict__[attr]

    def wrapper(self: Any) -> None:
        try:
            orig(self)
        finally:
            ENDED[threading.current_thread().name] += time.thread_time()

    setattr(cls, attr, wrapper)


def instrument() -> None:
    from diagnose.bundle.writer import JsonlStream
    from diagnose.collectors.base import ThreadedCollector
    from diagnose.collectors.process import ProcessCollector
    from diagnose.collectors.pyspy import PySpyCollector

    for attr in ("tick", "_threads", "_read_tcp", "_read_system"):
        _timed(ProcessCollector, attr, f"process.{attr}")
    for attr in ("_scan_window", "_record_window"):
        _timed(PySpyCollector, attr, f"pyspy.{attr}")
    _timed(JsonlStream, "write", "bundle.JsonlStream.write (all streams)")
    _until_end(ThreadedCollector, "_loop")
    _until_end(PySpyCollector, "_loop")
    import diagnose.pipeline as pipeline

    imports = pipeline._import_analysis

    def timed_imports() -> None:  # a short thread: often over before the monitor's first look
        try:
            imports()
        finally:
            ENDED["analysis-imports"] += time.thread_time()

    pipeline._import_analysis = timed_imports


def _task_cpu() -> dict[int, float]:
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/stat", "rb") as fh:
                f = fh.read().rsplit(b")", 1)[1].split()
            out[int(t)] = (int(f[11]) + int(f[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
    return out


class Monitor(threading.Thread):
    """Thread CPU of this process by Python thread name, read every TICK s (a thread that ends
    keeps its last reading)."""

    def __init__(self) -> None:
        super().__init__(name="bench-monitor", daemon=True)
        self.stop = threading.Event()
        self.base = _task_cpu()
        self.last: dict[int, float] = {}
        self.names: dict[int, str] = {}

    def run(self) -> None:
        while not self.stop.wait(TICK):
            self._read()

    def _read(self) -> None:
        for t in threading.enumerate():
            if t.native_id:
                self.names.setdefault(t.native_id, t.name)
        self.last.update(_task_cpu())

    def by_name(self) -> dict[str, float]:
        self._read()
        out: dict[str, float] = defaultdict(float)
        for tid, cpu in self.last.items():
            name = self.names.get(tid, "other")
            if name in ENDED:
                continue  # counted exactly when its loop ended
            out[name.split(" ")[0]] += cpu - self.base.get(tid, 0.0)
        return out | dict(ENDED)


def _children_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@contextlib.contextmanager
def threads40_target() -> Iterator[int]:
    p = subprocess.Popen([sys.executable, str(WORKLOAD), "600"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        if not p.stdout.readline().startswith("READY"):
            raise SystemExit("the 40-thread workload did not start")
        time.sleep(1.0)
        yield p.pid
    finally:
        p.kill()
        p.wait()


@contextlib.contextmanager
def demo_target() -> Iterator[int]:
    from diagnose.demo.runner import running_demo

    with running_demo("healthy") as run:
        yield run.pid


TARGETS: dict[str, Callable[[], contextlib.AbstractContextManager[int]]] = {
    "threads40": threads40_target, "demo": demo_target}


class _SnapshotView:
    """Runs the capture as the plain attach does and reads the meters the moment it ends (before
    the analysis, which is not the capture's cost)."""

    def __init__(self, mon: Monitor) -> None:
        self.mon, self.snap = mon, {}

    def run(self, capture: Any, stop: threading.Event, finish: Any) -> tuple[Any, None]:
        t0, kids0 = time.monotonic(), _children_s()
        result = capture.run(stop)
        self.snap = {"wall_s": time.monotonic() - t0, "children_s": _children_s() - kids0,
                     "threads": self.mon.by_name(), "parts": dict(PARTS), "budget": capture.budget.to_json()}
        self.mon.stop.set()
        return result, None


def one_round(target: str, seconds: float, out_dir: Path) -> dict[str, Any]:
    """One capture of ``target`` through diagnose.pipeline.attach (its analysis-import thread
    included), in this fresh interpreter."""
    from diagnose.collectors import CaptureOptions
    from diagnose.pipeline import AttachRequest, attach

    instrument()
    with TARGETS[target]() as pid:
        psutil.cpu_percent(None)
        load0 = os.getloadavg()[0]
        mon = Monitor()
        mon.start()
        view = _SnapshotView(mon)
        done = attach(AttachRequest(pid, CaptureOptions(duration_s=seconds), out_dir, ("own_cpu",)), view)
        host_busy = psutil.cpu_percent(None)
        load1 = os.getloadavg()[0]
        nthreads = psutil.Process(pid).num_threads()
    snap, bundle = view.snap, done.capture.bundle_path
    wall = snap["wall_s"]
    manifest = json.loads((bundle / "manifest.json").read_text())
    findings = json.loads((bundle / "findings.json").read_text())
    pct = {f"thread {k}": 100 * v / wall for k, v in snap["threads"].items() if v > 0}
    pct["children (py-spy windows + probe)"] = 100 * snap["children_s"] / wall
    pct |= {f"  part {k}": 100 * v / wall for k, v in snap["parts"].items()}
    threads = {k: v for k, v in snap["threads"].items() if k != "bench-monitor"}
    collectors = sum(v for k, v in threads.items() if k.startswith("diagnose-"))
    pct["TOTAL collector threads + children"] = 100 * (collectors + snap["children_s"]) / wall
    pct["TOTAL process + children"] = 100 * (sum(threads.values()) + snap["children_s"]) / wall
    cost = manifest.get("cost") or {}
    cost_wall = max(cost.get("wall_s", wall), 1e-9)
    pct["manifest cost (diagnose_cpu_s + children_cpu_s)"] = 100 * (
        cost.get("diagnose_cpu_s", 0) + cost.get("children_cpu_s", 0)) / cost_wall
    pct["manifest cost less this benchmark's monitor thread"] = pct["manifest cost (diagnose_cpu_s + children_cpu_s)"] \
        - 100 * snap["threads"].get("bench-monitor", 0.0) / cost_wall
    v, dq = findings["verdict"], findings.get("data_quality") or {}
    return {"target": target, "threads": nthreads, "wall_s": round(wall, 2), "pct": pct,
            "host": {"loadavg1_start": load0, "loadavg1_end": load1, "busy_pct": host_busy,
                     "cpus": os.cpu_count()},
            "budget": snap["budget"], "cost": cost,
            "verdict": {"quadrant": v.get("quadrant"), "layer": v.get("layer"), "headline": v.get("headline"),
                        "confidence": v.get("confidence")},
            "pyspy": dq.get("pyspy"), "process": dq.get("process"), "bundle": str(bundle)}


def run_round(target: str, seconds: float, out_dir: Path) -> dict[str, Any]:
    """``one_round`` in a child interpreter (fresh imports, as a real attach; its py-spy windows
    are its own children)."""
    res = subprocess.run([sys.executable, __file__, "--one-round", target, "--seconds", str(seconds),
                          "--out", str(out_dir)], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"round of {target} failed: {res.stderr[-2000:]}")
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def restart_cost(rounds: int) -> dict[str, float]:
    """CPU s of one py-spy record of 1 s and of 5 s on the 40-thread target, at the rate the budget
    plans for 40 threads, nice 19 as the collector runs it; the fixed cost per window."""
    from diagnose.capture.budget import OverheadBudget
    from diagnose.collectors.pyspy import find_pyspy

    binary = find_pyspy()
    if binary is None:
        return {}
    cpu: dict[int, list[float]] = {1: [], 5: []}
    with threads40_target() as pid, tempfile.TemporaryDirectory() as tmp:
        rate = OverheadBudget.plan(10.0, 100, 10.0, psutil.Process(pid).num_threads()).rates.pyspy_hz
        for _ in range(rounds):
            for d in (1, 5):
                k0 = _children_s()
                subprocess.run(["nice", "-n", "19", binary, "record", "--pid", str(pid), "--rate", str(rate),
                                "--duration", str(d), "--idle", "--threads", "--nonblocking", "--format",
                                "chrometrace", "-o", f"{tmp}/w.json"], capture_output=True, check=False)
                cpu[d].append(_children_s() - k0)
    c1, c5 = statistics.median(cpu[1]), statistics.median(cpu[5])
    return {"rate_hz": rate, "cpu_s_1s_window": round(c1, 3), "cpu_s_5s_window": round(c5, 3),
            "per_s_of_sampling": round((c5 - c1) / 4, 3), "fixed_per_window_s": round(c1 - (c5 - c1) / 4, 3)}


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} ({min(values):.2f}-{max(values):.2f})"


def report(rounds: list[dict[str, Any]]) -> None:
    for target in dict.fromkeys(r["target"] for r in rounds):
        mine = [r for r in rounds if r["target"] == target]
        print(f"\n== {target}: {mine[0]['threads']} threads, {len(mine)} round(s), % of one core, median (min-max)")
        keys = sorted({k for r in mine for k in r["pct"]}, key=lambda k: (k.startswith(("TOTAL", "manifest")), k))
        for k in keys:
            print(f"  {k:58s} {_fmt([r['pct'].get(k, 0.0) for r in mine])}")
        for r in mine:
            h, b, v = r["host"], r["budget"] or {}, r["verdict"]
            dq = r["pyspy"] or {}
            print(f"  round: host loadavg {h['loadavg1_start']:.2f}->{h['loadavg1_end']:.2f}, busy "
                  f"{h['busy_pct']:.0f}% of {h['cpus']} CPUs; rates final {b.get('final')}; verdict "
                  f"{v['quadrant']}/{v['layer']}; confidence {v['confidence']}; py-spy {dq.get('samples')} samples, "
                  f"{dq.get('windows')} windows, {dq.get('achieved_hz_per_thread')} Hz per thread, gap max "
                  f"{dq.get('gap_between_windows_ms_max')} ms; {r['bundle']}")


def compare(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Two ``--json`` files side by side: each part's median, and per target whether the analysis
    said the same (quadrant/layer of every round) and what its sampling became."""
    for target in dict.fromkeys(r["target"] for r in before["rounds"]):
        b = [r for r in before["rounds"] if r["target"] == target]
        a = [r for r in after["rounds"] if r["target"] == target]
        if not a:
            continue
        print(f"\n== {target}: % of one core, median before -> after ({len(b)} / {len(a)} rounds)")
        for k in sorted({k for r in b + a for k in r["pct"]}, key=lambda k: (k.startswith(("TOTAL", "manifest")), k)):
            med = [statistics.median([r["pct"].get(k, 0.0) for r in rs]) for rs in (b, a)]
            print(f"  {k:58s} {med[0]:6.2f} -> {med[1]:6.2f}")
        for name, rs in (("before", b), ("after", a)):
            verdicts = sorted({f"{r['verdict']['quadrant']}/{r['verdict']['layer']}" for r in rs})
            conf = [r["verdict"]["confidence"] for r in rs]
            hz = [(r["pyspy"] or {}).get("achieved_hz_per_thread") for r in rs]
            gaps = [(r["pyspy"] or {}).get("gap_between_windows_ms_max") for r in rs]
            proc = [(r["process"] or {}).get("gaps_statement") for r in rs]
            print(f"  {name:6s} verdicts {verdicts}, confidence {conf}, py-spy Hz per thread {hz}, window gap max ms "
                  f"{gaps}, process gaps {proc}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    ap.add_argument("--out", type=Path, default=None, help="where the bundles go (default: a temporary directory)")
    ap.add_argument("--json", type=Path, default=None, help="also write every round's figures here")
    ap.add_argument("--no-restart", action="store_true", help="skip the py-spy restart measurement")
    ap.add_argument("--one-round", choices=list(TARGETS), help=argparse.SUPPRESS)
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE_JSON", "AFTER_JSON"),
                    help="print two --json runs side by side (nothing is captured)")
    args = ap.parse_args()
    if args.compare:
        compare(*(json.loads(p.read_text()) for p in args.compare))
        return
    os.umask(0o077)
    out = args.out or Path(tempfile.mkdtemp(prefix="dg-owncpu-"))
    if args.one_round:
        print(json.dumps(one_round(args.one_round, args.seconds, out)))
        return
    rounds = [run_round(t, args.seconds, out) for _ in range(args.rounds) for t in args.targets]
    report(rounds)
    restart = {} if args.no_restart else restart_cost(3)
    if restart:
        print(f"\n== py-spy restart (40 threads, {restart['rate_hz']} Hz, nice 19): 1 s window "
              f"{restart['cpu_s_1s_window']} CPU s, 5 s window {restart['cpu_s_5s_window']} CPU s: "
              f"{restart['fixed_per_window_s']} s fixed per window + {restart['per_s_of_sampling']} s per s sampled")
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds, "restart": restart}, indent=1))


if __name__ == "__main__":
    main()
