"""What being observed costs the served demo in its own CPU: the target's CPU seconds per request
served (utime + stime of the target process, /proc/<pid>/task/*/stat, over the requests its
closed-loop clients completed), per thread, and each thread's wakeups (voluntary context switches)
per second, under the conditions of benchmarks/overhead.py, alternated every round.

CPU per request is far less disturbed by a busy host than throughput: a request served costs the
same CPU whether the host is quiet or not (cache effects aside), so the agent's cost shows as the
difference against "none" even when the wall-clock ratios are noise.

    python benchmarks/agent_cpu_per_request.py [--seconds 8] [--rounds 3] [--clients 8]

Prints per condition the median (min-max) CPU ms per request, the throughput, P99, and per thread
(by name; the application's unnamed threads grouped) CPU us per request and wakeups per second.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import CONDITIONS, add_condition_option, add_conditions, closed_loop, service  # noqa: E402

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def threads(pid: int) -> dict[int, tuple[str, float, int, int, float]]:
    """tid -> (name, CPU s, voluntary switches, involuntary switches, s runnable but waiting for a CPU
    (schedstat run_delay: a thread preempted while it holds the GIL stalls every other thread that long))
    of every thread of ``pid``."""
    out = {}
    for task in glob.glob(f"/proc/{pid}/task/*"):
        try:
            stat = Path(task, "stat").read_text()
            status = Path(task, "status").read_text()
            delay = int(Path(task, "schedstat").read_text().split()[1]) / 1e9
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        cpu = (int(fields[11]) + int(fields[12])) * TICK_S
        sw = {k: int(v) for k, v in (ln.split(":\t") for ln in status.splitlines()
                                     if ln.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")))}
        out[int(Path(task).name)] = (name, cpu, sw["voluntary_ctxt_switches"], sw["nonvoluntary_ctxt_switches"], delay)
    return out


def thread_names(pid: int) -> dict[int, str]:
    """tid -> Python thread name (py-spy dump, non-blocking: the target is not paused)."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    try:
        text = subprocess.run([py_spy, "dump", "--nonblocking", "--pid", str(pid)], capture_output=True,
                              text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {int(m[1]): m[2] for m in re.finditer(r'^Thread (\d+) \(\w+\): "(.*)"', text, re.M)}


def one(pid: int, url: str, cond: list[str] | None, seconds: float, clients: int) -> dict:
    out, attach = None, None
    if cond is not None:
        out = tempfile.mkdtemp(prefix="dg-cpu-out-")
        attach = subprocess.Popen([sys.executable, "-m", "diagnose", "attach", str(pid), "--duration",
                                   str(seconds + 2), "--out", out, "--no-tui", *cond],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.5)
    before, t0 = threads(pid), time.monotonic()
    r = closed_loop(url, seconds, clients, None)
    after, wall = threads(pid), time.monotonic() - t0
    names = thread_names(pid)
    counts = {}
    if attach is not None:
        attach.wait(120)
        for m in glob.glob(f"{out}/*/manifest.json"):
            cols = json.loads(Path(m).read_text()).get("collectors", [])
            for c in cols.values() if isinstance(cols, dict) else cols:
                if isinstance(c, dict) and c.get("name") == "agent":
                    counts = c.get("counts") or {}
        shutil.rmtree(out, ignore_errors=True)
    n = max(1, round(r["qps"] * seconds))
    per: dict[str, list[float]] = {}
    for tid, (name, cpu, vol, invol, delay) in after.items():
        b = before.get(tid, (name, 0.0, 0, 0, 0.0))
        key = names.get(tid) or ("MainThread" if tid == pid else f"unnamed ({name})")
        acc = per.setdefault(key, [0.0, 0.0, 0.0, 0.0])
        acc[0] += cpu - b[1]
        acc[1] += (vol - b[2]) / wall
        acc[2] += (invol - b[3]) / wall
        acc[3] += (delay - b[4]) / wall
    total = sum(v[0] for v in per.values())
    return {"qps": r["qps"], "p99_ms": r["p99_ms"], "cpu_ms_per_req": 1e3 * total / n,
            "threads": {k: (1e6 * v[0] / n, v[1], v[2], 1e3 * v[3]) for k, v in per.items()}, "counts": counts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--only", nargs="*", metavar="CONDITION", help=f"of {', '.join(CONDITIONS)} and any --condition")
    add_condition_option(ap)
    args = ap.parse_args()
    add_conditions(ap, args)
    args.only = args.only or list(CONDITIONS)
    if unknown := [c for c in args.only if c not in CONDITIONS]:
        ap.error(f"--only {', '.join(unknown)}: no such condition")
    print(f"target CPU per request (utime+stime of its threads, /proc), {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    results: dict[str, list[dict]] = {c: [] for c in args.only}
    with service(None) as (pid, url):
        time.sleep(1.0)
        closed_loop(url, 2.0, args.clients, None)  # warm up
        for _ in range(args.rounds):
            for name in args.only:
                results[name].append(one(pid, url, CONDITIONS[name], args.seconds, args.clients))
    for name, runs in results.items():
        cpu = [r["cpu_ms_per_req"] for r in runs]
        print(f"{name:18s} CPU/request {statistics.median(cpu):6.3f} ms ({min(cpu):.3f}-{max(cpu):.3f})  "
              f"{statistics.median(r['qps'] for r in runs):7.1f} req/s  "
              f"P99 {statistics.median(r['p99_ms'] for r in runs):6.2f} ms")
        for key in sorted({k for r in runs for k in r["threads"]}):
            vals = [r["threads"].get(key, (0.0, 0.0, 0.0, 0.0)) for r in runs]
            print(f"    {key:28s} {statistics.median(v[0] for v in vals):8.1f} us/req  "
                  f"{statistics.median(v[1] for v in vals):8.1f} wakeups/s  "
                  f"{statistics.median(v[2] for v in vals):7.1f} preempted/s  "
                  f"{statistics.median(v[3] for v in vals):6.1f} ms/s waiting for a CPU")
        c = runs[-1]["counts"]
        keys = ("spans_keep_fraction", "spans_cpu_pct", "torch_traces", "torch_hold_total_ms", "torch_hold_max_ms")
        if c:
            print("    last round's agent counts: " + ", ".join(f"{k}={c.get(k)}" for k in keys if k in c))


if __name__ == "__main__":
    main()
