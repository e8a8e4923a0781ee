"""The cost of being observed, side by side: the demo's served torch model (aiohttp, OpenTelemetry
stage spans, batching model worker: `python -m diagnose.demo.server --scenario healthy`, started
under `diagnose run`, its agent idle until attached) under a fixed load, with and without
diagnose, conditions alternated every round (each round starting one condition later).

Conditions: none | attach (external collectors: py-spy, process; --skip agent) | attach + agent
(torch windows and spans) | agent spans only (--torch-window 0). Loads: open-loop Poisson arrivals
at --open-fraction of the capacity measured first (so latency is measured honestly, no coordinated
omission), and a closed-loop saturating load (--clients keep-alive clients). Pinned: the service
and the load on CPU 0, diagnose on the others (taskset); unpinned: everyone shares. Prints, per
load and pinning, the median (and min-max) of throughput, P50 and P99 against the no-attach
reference, diagnose's own CPU (its threads + py-spy, from each bundle's manifest ``cost``) and its
parts (py-spy windows / the parsing child / diagnose's own threads), the target's own CPU per request
served against the reference (utime + stime from /proc: the least disturbed by a busy host; with the
load average at the end), and the time to verdict (findings.json written minus the manifest's
``ended_ns``; the capture lasts the measurement plus 2 s, not 30 s).

    python benchmarks/overhead.py --seconds 10 --rounds 3

Needs the demo extra (torch, aiohttp) or the dev extra, and py-spy; Linux for taskset.
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from diagnose.demo.bodies import request_body
from diagnose.demo.openloop import run_open_loop

SCENARIO = "healthy"  # batched, below capacity at its own QPS: the closed loop then saturates it
CONDITIONS = {
    "none": None,
    "attach": ["--skip", "agent"],
    "attach+agent": [],
    "agent spans only": ["--torch-window", "0"],
}


def add_condition_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--condition", action="append", default=[], metavar="NAME=ARGS",
                    help="one more condition: attach with these arguments, e.g. 'rate 50=--rate 50' (repeatable)")


def add_conditions(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The --condition options into CONDITIONS (an experiment beside the standard ones)."""
    for extra in args.condition:
        name, sep, argv = extra.partition("=")
        if not sep or not name.strip():
            ap.error(f"--condition {extra!r}: expected NAME=ARGS")
        CONDITIONS[name.strip()] = argv.split()


def _taskset(cpus: str | None) -> list[str]:
    return ["taskset", "-c", cpus] if cpus and shutil.which("taskset") else []


@contextlib.contextmanager
def service(cpus: str | None) -> Iterator[tuple[int, str]]:
    runtime = tempfile.mkdtemp(prefix="dg-bench-")
    env = {**os.environ, "XDG_RUNTIME_DIR": runtime, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([*_taskset(cpus), sys.executable, "-m", "diagnose", "run", "--", sys.executable,
                             "-m", "diagnose.demo.server", "--scenario", SCENARIO, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                            start_new_session=True)
    try:
        line = ""
        while proc.stdout and not line.startswith("LISTENING"):
            line = proc.stdout.readline()
            if not line:
                raise SystemExit("the demo server did not start (is the demo extra installed?)")
        yield proc.pid, f"http://127.0.0.1:{line.split()[1]}/predict"
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(runtime, ignore_errors=True)


def closed_loop(url: str, seconds: float, clients: int, cpus: str | None) -> dict:
    out = subprocess.run([*_taskset(cpus), sys.executable, "-m", "diagnose.demo.loadgen", "--url",
                          url.rsplit("/", 1)[0], "--clients", str(clients), "--max-seconds", str(seconds),
                          "--scenario", SCENARIO],
                         capture_output=True, text=True, timeout=seconds + 60).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return {"qps": r["qps"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"]}


def open_loop(url: str, seconds: float, rate: float) -> dict:
    r = run_open_loop(url, rate, seconds, warmup_s=0.5, drain_s=2.0, body=request_body(SCENARIO), connections=32)
    return {"qps": r.achieved_qps, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms}


def target_cpu_s(pid: int) -> float:
    """utime + stime of the target process (s, /proc/<pid>/stat: all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def host_ticks() -> tuple[int, int]:
    """(steal, all) CPU ticks of the host since boot (/proc/stat's first line: user .. steal)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return fields[7], sum(fields)


def with_cpu(pid: int, measure, seconds: float) -> dict:
    """``measure()`` plus the target's CPU per request served (us): a busy host disturbs it far
    less than the throughput (benchmarks/agent_cpu_per_request.py has it per thread); and the share
    of the host's CPU time the hypervisor gave other guests meanwhile (steal, %: on a shared VM, 1%
    of steal came with 1,669 req/s and 11% with 1,294 in the same minute, 2026-12-04)."""
    cpu0, (steal0, all0) = target_cpu_s(pid), host_ticks()
    r = measure()
    steal1, all1 = host_ticks()
    return r | {"cpu_us_per_req": 1e6 * (target_cpu_s(pid) - cpu0) / max(1.0, r["qps"] * seconds),
                "steal_pct": 100 * (steal1 - steal0) / max(1, all1 - all0)}


def one_run(pid: int, cond: list[str] | None, measure, seconds: float, diag_cpus: str | None) -> dict:
    if cond is None:
        return with_cpu(pid, measure, seconds) | diag_cpu({}) | {"verdict_after_s": None}
    out = tempfile.mkdtemp(prefix="dg-bench-out-")
    attach = subprocess.Popen([*_taskset(diag_cpus), sys.executable, "-m", "diagnose", "attach", str(pid),
                               "--duration", str(seconds + 2), "--out", out, "--no-tui", *cond],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)  # the collectors are running by now
    r = with_cpu(pid, measure, seconds)
    attach.wait(120)
    manifests = glob.glob(f"{out}/*/manifest.json")
    manifest = json.loads(Path(manifests[0]).read_text()) if manifests else {}
    findings = Path(manifests[0]).with_name("findings.json") if manifests else None
    after_s = (findings.stat().st_mtime - manifest["ended_ns"] / 1e9
               if findings and findings.is_file() and manifest.get("ended_ns") else None)
    shutil.rmtree(out, ignore_errors=True)
    return r | diag_cpu(manifest.get("cost", {})) | {"verdict_after_s": after_s}


def diag_cpu(cost: dict) -> dict:
    """diagnose's CPU in % of one core over the capture, whole and by part, from the manifest's ``cost``:
    the py-spy windows (its children less the parsing child), the parsing child (``parse_ahead_cpu_s``)
    and diagnose's own threads (collectors, capture loop, analysis imports)."""
    wall = cost.get("wall_s") or 1.0
    own, children, ahead = (cost.get(k) or 0.0 for k in ("diagnose_cpu_s", "children_cpu_s", "parse_ahead_cpu_s"))
    return {"diag_cpu_pct": 100 * (own + children) / wall, "pyspy_pct": 100 * max(0.0, children - ahead) / wall,
            "ahead_pct": 100 * ahead / wall, "own_pct": 100 * own / wall}


def _fmt(ref: list[dict], runs: list[dict], key: str, max_steal: float = 100.0) -> str:
    """Median (min-max) of the condition / reference ratio over the rounds in which neither lost more
    than ``max_steal`` % of the host's CPU time to other guests."""
    ratios = [runs[i][key] / ref[i][key] for i in _kept(ref, runs, max_steal)
              if ref[i][key] and runs[i][key] is not None]
    if not ratios:
        return "-"
    return f"{statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f})"


def _kept(ref: list[dict], runs: list[dict], max_steal: float) -> list[int]:
    """The rounds in which neither the condition nor the reference lost more than ``max_steal`` %."""
    return [i for i, r in enumerate(runs) if max(r["steal_pct"], ref[i]["steal_pct"]) <= max_steal]


def bench(args, pinned: bool) -> list[str]:
    svc_cpus, diag_cpus = ("0", "1-" + str(os.cpu_count() - 1)) if pinned else (None, None)
    lines = []
    with service(svc_cpus) as (pid, url):
        time.sleep(1.0)
        capacity = closed_loop(url, 3.0, args.clients, svc_cpus)["qps"]
        loads = {"open-loop": lambda: open_loop(url, args.seconds, args.open_fraction * capacity),
                 "closed-loop": lambda: closed_loop(url, args.seconds, args.clients, svc_cpus)}
        for load, measure in loads.items():
            if args.load not in (None, load):
                continue
            results: dict[str, list[dict]] = {c: [] for c in CONDITIONS}
            names = list(CONDITIONS)
            for r in range(args.rounds):  # each round starts one condition later: no condition always follows another
                for name in names[r % len(names):] + names[:r % len(names)]:
                    results[name].append(one_run(pid, CONDITIONS[name], measure, args.seconds, diag_cpus))
            ref = results["none"]
            head = (f"{'pinned' if pinned else 'unpinned'}, {load}"
                    + (f" at {args.open_fraction * capacity:.0f} req/s ({args.open_fraction:.0%} of {capacity:.0f})"
                       if load == "open-loop" else f", {args.clients} clients") + f", {args.rounds} rounds")
            lines += [head, f"  {'condition':18s} {'throughput':>18s} {'P50':>18s} {'P99':>18s} {'diagnose CPU':>14s}"
                      f" {'py-spy/parse/own':>18s} {'target CPU/req':>18s} {'verdict after':>14s} {'rounds kept':>12s}"]
            for name, runs in results.items():
                m = args.max_steal
                cpu = {k: statistics.median(r[k] for r in runs) for k in ("diag_cpu_pct", "pyspy_pct", "ahead_pct",
                                                                            "own_pct")}
                parts = f"{cpu['pyspy_pct']:.1f}/{cpu['ahead_pct']:.1f}/{cpu['own_pct']:.1f} %"
                afters = [r["verdict_after_s"] for r in runs if r["verdict_after_s"] is not None]
                after = f"{statistics.median(afters):.2f} s" if afters else "-"
                kept = f"{len(_kept(ref, runs, m))}/{len(runs)}"
                lines.append(f"  {name:18s} {_fmt(ref, runs, 'qps', m):>18s} {_fmt(ref, runs, 'p50_ms', m):>18s} "
                             f"{_fmt(ref, runs, 'p99_ms', m):>18s} {cpu['diag_cpu_pct']:12.1f} % {parts:>18s} "
                             f"{_fmt(ref, runs, 'cpu_us_per_req', m):>18s} {after:>14s} {kept:>12s}")
            lines.append(f"  reference (none): {statistics.median(r['qps'] for r in ref):.1f} req/s, "
                         f"P50 {statistics.median(r['p50_ms'] for r in ref):.2f} ms, "
                         f"P99 {statistics.median(r['p99_ms'] for r in ref):.2f} ms, target CPU "
                         f"{statistics.median(r['cpu_us_per_req'] for r in ref):.0f} us/request; load average "
                         f"{os.getloadavg()[0]:.1f}; steal per round (% of the host's CPU, all conditions) "
                         f"{', '.join(format(r['steal_pct'], '.1f') for rs in results.values() for r in rs)}; "
                         f"rounds kept: steal <= {args.max_steal:g}% in the condition's and the reference's")
            print("\n".join(lines[-len(CONDITIONS) - 3:]), flush=True)
    return lines


def compile_bytecode() -> None:
    """diagnose's modules compiled to bytecode first, as an installed package has them: where
    PYTHONDONTWRITEBYTECODE is set (this VM), an editable install has none, and every diagnose process
    (attach, its parsing child) compiled ~230 modules from source, ~0.15 s of CPU each."""
    import compileall

    import diagnose
    import diagnose.collectors
    import diagnose.rules

    for package in (diagnose, diagnose.collectors, diagnose.rules):  # the last two live in their own folders
        compileall.compile_dir(Path(package.__file__).parent, quiet=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--open-fraction", type=float, default=0.6)
    ap.add_argument("--max-steal", type=float, default=5.0, metavar="PCT",
                    help="leave out of the ratios a round whose reference or condition lost more than this %% of "
                         "the host's CPU to other guests (/proc/stat steal; 100: keep every round)")
    ap.add_argument("--only", choices=["pinned", "unpinned"])
    ap.add_argument("--load", choices=["open-loop", "closed-loop"], help="one load only (default: both)")
    add_condition_option(ap)
    args = ap.parse_args()
    add_conditions(ap, args)
    compile_bytecode()
    print(f"ratios are condition / none, median (min-max) over rounds; diagnose CPU in % of one core; "
          f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}", flush=True)
    for pinned in (True, False):
        if args.only in (None, "pinned" if pinned else "unpinned"):
            bench(args, pinned)


if __name__ == "__main__":
    threading.excepthook = lambda a: None  # an open-loop worker's late error must not clutter the table
    main()
