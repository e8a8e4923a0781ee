"""The live dashboard as text, from a real capture: attaches to tests/workloads/stages_service.py
(OTLP spans with preprocess / model / postprocess stages, received by diagnose's OTLP receiver),
runs the live view in Textual's headless driver at --size for --seconds, prints the screen's text
and stops the capture. Not a test; this made the README's screenshot:

    python benchmarks/tui_dashboard_text.py --seconds 65 --size 120x40
"""
from __future__ import annotations

import argparse
import asyncio
import os
import socket
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

WORKLOAD = Path(__file__).resolve().parent.parent / "tests" / "workloads" / "stages_service.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def dashboard_text(proc: subprocess.Popen[str], port: int, seconds: float,
                         size: tuple[int, int], out: Path) -> str:
    options = CaptureOptions(duration_s=seconds + 30, otlp_listen=f"127.0.0.1:{port}")
    session = LiveSession(Capture(resolve_target(proc.pid), options, out), StopFlag())
    app = make_app(session=session, export_dir=out)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(2.0)  # the receiver listens: let the service start sending
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        await pilot.pause(seconds)
        # the screen as drawn, one line per terminal row (Textual's compositor, as in its screenshots)
        text = "\n".join(strip.text.rstrip() for strip in app.screen._compositor.render_strips())
        session.request_stop()
        while not session.done.is_set():
            await pilot.pause(0.3)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=65.0)
    ap.add_argument("--size", default="120x40", help="COLSxROWS")
    args = ap.parse_args()
    cols, rows = (int(v) for v in args.size.split("x"))
    port = free_port()
    env = dict(os.environ, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"http://127.0.0.1:{port}/v1/traces")
    proc = subprocess.Popen([sys.executable, str(WORKLOAD), str(args.seconds + 40)], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # READY
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.monotonic()
            text = asyncio.run(dashboard_text(proc, port, args.seconds, (cols, rows), Path(tmp)))
    finally:
        proc.kill()
        proc.wait()
    print(text)
    print(f"({time.monotonic() - t0:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
