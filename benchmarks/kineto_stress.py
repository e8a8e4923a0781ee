"""Does observing ever kill the target? Many torch profiler windows, many attaches, three targets.

Targets (tests/workloads/torch_small_ops.py under `diagnose run`, agent idle until attached):
  ops    a loop of small torch ops on the main thread (~300k ops/s): an op is in flight at nearly
         every instant a window stops, the race that crashed targets (agent/inproc/quiesce.py);
  churn  a threaded HTTP server running a torch MLP per request, a new connection (so a new server
         thread) per request: threads start and end inside every window;
  exits  the ops loop that exits by itself (sys.exit) in the middle of a capture, a new target per
         attach: the agent's atexit stop runs while a window records;
  direct windows back to back, without attach (the agent's TorchWindow start and stop on one
         thread, as its profiler thread runs them), in fresh processes where two threads loop on
         small ops and a third starts and ends threads that run ops: the most stops with ops in
         flight per second (before the quiet wait, 4 of 25 such processes of 30 windows died).

Each attach records up to 16 windows (window plan, agent/inproc/windowplan.py). Prints, per target,
attaches, windows recorded, windows that failed (with their reasons) and target deaths (killed by a
signal, an exit status other than 0, or hung: still running long past its end, its stacks dumped),
with the target's last stderr line for each death. Exit status 1 when any target died.

    python benchmarks/kineto_stress.py [--attaches 8] [--exits 6] [--duration 20] [--direct-procs 20]
                                       [--direct-parallel 4]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from diagnose.collectors.pyspy import find_pyspy

REPO = Path(__file__).resolve().parents[1]
WORKLOAD = REPO / "tests" / "workloads" / "torch_small_ops.py"


@dataclass
class Tally:
    attaches: int = 0
    windows: int = 0
    failed: list[str] = field(default_factory=list)
    deaths: list[str] = field(default_factory=list)


def start(*args: str) -> tuple[subprocess.Popen, deque[str]]:
    """The target under `diagnose run`, once READY; its last stderr lines keep coming into the deque
    (both pipes are drained all along: a full pipe would block the target's own writes)."""
    runtime = tempfile.mkdtemp(prefix="dg-stress-")  # short: Unix socket paths are limited to 107 bytes
    env = {**os.environ, "XDG_RUNTIME_DIR": runtime}
    proc = subprocess.Popen([sys.executable, "-m", "diagnose", "run", "--", sys.executable, str(WORKLOAD), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
                            start_new_session=True)
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise SystemExit(f"target did not start: {line!r} {proc.stderr.read()[-500:]}")
    err: deque[str] = deque(maxlen=20)
    for pipe, sink in ((proc.stdout, deque(maxlen=1)), (proc.stderr, err)):
        threading.Thread(target=sink.extend, args=(pipe,), daemon=True).start()
    return proc, err


def dump_stacks(pid: int) -> str:
    """Every thread's stack, native frames included, of a hung target (py-spy dump)."""
    py_spy = find_pyspy()
    if py_spy is None:
        return "(no py-spy to dump its stacks)"
    return subprocess.run([py_spy, "dump", "--native", "--pid", str(pid)], capture_output=True, text=True).stdout


def attach(pid: int, duration: float, out: Path, tally: Tally) -> None:
    res = subprocess.run([sys.executable, "-m", "diagnose", "attach", str(pid), "--duration", str(duration),
                          "--torch-window", "60", "--out", str(out), "--no-tui"],
                         capture_output=True, text=True, timeout=duration + 120, cwd=REPO)
    tally.attaches += 1
    bundles = sorted(out.glob("diagnose-*"), key=lambda p: p.stat().st_mtime)
    if res.returncode not in (0, 3) or not bundles:
        tally.failed.append(f"attach exit {res.returncode}: {res.stderr.strip()[-200:]}")
        return
    index = bundles[-1] / "torch.jsonl"
    for line in index.read_text().splitlines() if index.exists() else []:
        record = json.loads(line)
        if record.get("error"):
            tally.failed.append(record["error"][:200])
        else:
            tally.windows += 1


def ended(proc: subprocess.Popen, err: deque[str], tally: Tally, what: str) -> None:
    try:
        rc = proc.wait(60)
    except subprocess.TimeoutExpired:
        # `diagnose run` execs the command: its pid is the target's
        stacks = dump_stacks(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        tally.deaths.append(f"{what}: did not exit within 60 s (killed); its stacks:\n{stacks}")
        return
    time.sleep(0.2)  # the reader threads take the last lines
    lines = [ln.strip() for ln in err if ln.strip() and not ln.startswith("USDT:")]  # Kineto's start/stop lines
    if rc != 0:
        name = signal.Signals(-rc).name if rc < 0 else f"exit status {rc}"
        tally.deaths.append(f"{what}: {name}; stderr: {lines[-1][:200] if lines else ''}")


def long_lived(args: argparse.Namespace, out: Path, *target: str) -> Tally:
    tally = Tally()
    proc, err = start("--seconds", str(args.attaches * (args.duration + 60)), *target)
    for _ in range(args.attaches):
        if proc.poll() is not None:
            break
        attach(proc.pid, args.duration, out, tally)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)  # the workload prints its figures and exits 0
    ended(proc, err, tally, f"pid {proc.pid}")
    return tally


def exits(args: argparse.Namespace, out: Path) -> Tally:
    tally = Tally()
    for _ in range(args.exits):
        proc, err = start("--seconds", str(args.duration / 2))
        attach(proc.pid, args.duration, out, tally)
        ended(proc, err, tally, f"pid {proc.pid}")
    return tally


DIRECT = """
import sys, threading, time, pathlib
import torch
from diagnose.agent.inproc.torchwin import TorchWindow
stop = threading.Event()

def loop(n=None):
    x, i = torch.ones(2), 0
    while not stop.is_set() and (n is None or i < n):
        torch.neg(x)
        i += 1

def churn():
    while not stop.is_set():
        t = threading.Thread(target=loop, args=(2000,))
        t.start()
        t.join()

workers = [threading.Thread(target=f) for f in (loop, loop, churn)]
for t in workers:
    t.start()

def windows():
    for seq in range(1, int(sys.argv[1]) + 1):
        w = TorchWindow(pathlib.Path(sys.argv[2]), seq)
        w.start()
        time.sleep(0.01)
        r = w.stop()
        print("ERROR" if r["error"] else "OK", flush=True)

t = threading.Thread(target=windows, name="diagnose-agent-torch")
t.start()
t.join()
stop.set()
for t in workers:
    t.join()
"""


def direct(args: argparse.Namespace, out: Path) -> Tally:
    """``--direct-procs`` processes, ``--direct-parallel`` at a time: on 2 cores, 4 at once hung 3 of
    4 within 300 windows before quiesce.current_frames (python/cpython#106883), one at a time none."""
    tally = Tally()
    with ThreadPoolExecutor(max(1, args.direct_parallel)) as pool:
        for one in pool.map(lambda n: direct_process(n, args.direct_windows, out), range(args.direct_procs)):
            tally.attaches += 1
            tally.windows += one.windows
            tally.failed += one.failed
            tally.deaths += one.deaths
    return tally


def direct_process(n: int, windows: int, out: Path) -> Tally:
    """One process of back-to-back windows. A target still running 60 s + 2 s a window after its
    start is hung: its stacks are dumped (py-spy) and it is killed, counted as a death."""
    tally, work = Tally(), out / f"direct-{n}"
    work.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", DIRECT, str(windows), str(work)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        stdout, stderr = proc.communicate(timeout=60 + 2 * windows)
    except subprocess.TimeoutExpired:
        stacks = dump_stacks(proc.pid)
        proc.kill()
        stdout, _ = proc.communicate()
        tally.deaths.append(f"direct process {n}: hung after {stdout.count('OK')} windows (killed); "
                            f"its stacks:\n{stacks}")
        return tally
    tally.windows += stdout.count("OK")
    tally.failed += ["window error"] * stdout.count("ERROR")
    if proc.returncode != 0:
        lines = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("USDT:")]
        name = signal.Signals(-proc.returncode).name if proc.returncode < 0 else f"exit status {proc.returncode}"
        tally.deaths.append(f"direct process {n}: {name} after {stdout.count('OK')} windows; "
                            f"stderr: {lines[-1][:200] if lines else ''}")
    return tally


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--attaches", type=int, default=8, help="attaches to each long-lived target")
    p.add_argument("--exits", type=int, default=6, help="targets that exit mid-capture, one attach each")
    p.add_argument("--duration", type=float, default=20.0, help="capture seconds per attach")
    p.add_argument("--direct-procs", type=int, default=20, help="processes of back-to-back windows")
    p.add_argument("--direct-windows", type=int, default=30, help="windows per direct process")
    p.add_argument("--direct-parallel", type=int, default=4, help="direct processes at a time")
    p.add_argument("--only", choices=["ops", "churn", "exits", "direct"], help="run one target only")
    args = p.parse_args()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dg-stress-out-") as tmp:
        out = Path(tmp)
        runs = {"ops": lambda: long_lived(args, out), "churn": lambda: long_lived(args, out, "--serve", "--churn"),
                "exits": lambda: exits(args, out), "direct": lambda: direct(args, out)}
        results = {name: run() for name, run in runs.items() if args.only in (None, name)}
    print(f"{'target':8} {'attaches':>8} {'windows':>8} {'failed':>7} {'deaths':>7}")
    for name, t in results.items():
        print(f"{name:8} {t.attaches:8d} {t.windows:8d} {len(t.failed):7d} {len(t.deaths):7d}")
    total = Tally(sum(t.attaches for t in results.values()), sum(t.windows for t in results.values()),
                  [f for t in results.values() for f in t.failed], [d for t in results.values() for d in t.deaths])
    print(f"{'all':8} {total.attaches:8d} {total.windows:8d} {len(total.failed):7d} {len(total.deaths):7d}"
          f"   ({time.monotonic() - t0:.0f} s)")
    for line in total.failed[:10]:
        print(f"  failed window: {line}")
    for line in total.deaths:
        print(f"  DEATH {line}")
    sys.exit(1 if total.deaths else 0)


if __name__ == "__main__":
    main()
