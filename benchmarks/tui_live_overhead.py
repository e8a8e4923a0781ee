"""What the live TUI costs a capture: samples kept, diagnose's own CPU, analysis time per refresh.

Attaches to a JSON-serialising workload (tests/workloads/json_loop.py) --rounds times headless and
--rounds times with the live view (Textual's headless driver at 80x24: the same workers, messages
and rendering, minus the terminal writes), alternating, and prints the ratios live / headless of
the process collector's records (10 Hz stream), py-spy samples and this process's CPU seconds,
plus how often the partial-bundle analysis ran and how long it took. Not a test: numbers depend on
the machine; run it on an otherwise idle one:

    python benchmarks/tui_live_overhead.py --seconds 10 --rounds 3
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from diagnose.capture.session import Capture
from diagnose.capture.stop import StopFlag
from diagnose.capture.target import resolve_target
from diagnose.collectors import CaptureOptions
from diagnose.tui.app import make_app
from diagnose.tui.live.feed import LiveSession
from diagnose.tui.results.screen import ResultsScreen

WORKLOAD = Path(__file__).resolve().parent.parent / "tests" / "workloads" / "json_loop.py"


def counts(bundle: Path) -> dict[str, dict]:
    manifest = json.loads((bundle / "manifest.json").read_text())
    return {c["name"]: c.get("counts") or {} for c in manifest["collectors"]}


def headless(target, options, out: Path) -> dict:
    cpu0 = time.process_time()
    result = Capture(target, options, out).run(StopFlag())
    c = counts(result.bundle_path)
    return {"records": c["process"]["records"], "samples": c["pyspy"].get("samples", 0),
            "cpu_s": time.process_time() - cpu0}


async def live(target, options, out: Path) -> dict:
    cpu0 = time.process_time()
    session = LiveSession(Capture(target, options, out), StopFlag())
    app = make_app(session=session, export_dir=out)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        while not isinstance(app.screen, ResultsScreen):
            await pilot.pause(0.2)
    c = counts(session.result.bundle_path)
    st = app.feed.stats
    return {"records": c["process"]["records"], "samples": c["pyspy"].get("samples", 0),
            "cpu_s": time.process_time() - cpu0, "analyses": st.analyses,
            "analysis_ms_mean": 1000 * st.analysis_s_total / max(1, st.analyses),
            "analysis_ms_max": 1000 * st.analysis_s_max, "updates": screen.updates,
            "read": app.feed.cpu.records}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    proc = subprocess.Popen([sys.executable, str(WORKLOAD)], stdout=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()
        target = resolve_target(proc.pid)
        options = CaptureOptions(duration_s=args.seconds)
        plain, shown = [], []
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.rounds):
                plain.append(headless(target, options, Path(tmp) / f"plain{i}"))
                shown.append(asyncio.run(live(target, options, Path(tmp) / f"live{i}")))
    finally:
        proc.kill()
        proc.wait()
    for key in ("records", "samples", "cpu_s"):
        a, b = statistics.mean(r[key] for r in plain), statistics.mean(r[key] for r in shown)
        print(f"{key:>10}: headless {a:8.2f}  live {b:8.2f}  ratio live/headless {b / a:.3f}")
    print(f"live view: {statistics.mean(r['updates'] for r in shown) / args.seconds:.1f} redraws/s, "
          f"{statistics.mean(r['analyses'] for r in shown) / args.seconds:.2f} analyses/s, "
          f"analysis mean {statistics.mean(r['analysis_ms_mean'] for r in shown):.0f} ms, "
          f"max {max(r['analysis_ms_max'] for r in shown):.0f} ms; records read by the view / "
          f"written: {sum(r['read'] for r in shown)}/{sum(r['records'] for r in shown)}")


if __name__ == "__main__":
    main()
