"""What a torch profiler window costs the whole target while it is on: CPU time
(``time.thread_time``, load-insensitive) per step of small-op torch loops with the agent's profiler
window on (diagnose/agent/inproc/torchwin.py TorchWindow, the agent's own settings: record_shapes,
with_flops, all threads) and off, rounds alternated. The duty-cycle budget of the window plan
(windowplan.DUTY_SHARE) is chosen from it: throughput lost ~ share x (slowdown - 1) for a target whose
CPU is in ops like these.

    python benchmarks/torch_window_cost.py [--rounds 5] [--steps 2000]

Loops: ``tiny`` (relu(x @ w + b), 4x64: three ops a step, the profiler's worst case), ``demo`` (the
demo's healthy model, Mlp(256, 256, 10) on 8 rows: the ops of one batched request), ``wide``
(a 256x1024 @ 1024x1024 matmul: an op long enough that a per-op cost vanishes).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from diagnose.agent.inproc.torchwin import TorchWindow, count_events
from diagnose.demo.model import Mlp


def loops() -> dict[str, object]:
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 64), torch.randn(64, 64), torch.randn(64)
    mlp, rows = Mlp(256, 256, 10).eval(), torch.randn(8, 256)
    big_a, big_b = torch.randn(256, 1024), torch.randn(1024, 1024)

    def tiny() -> None:
        torch.relu(x @ w + b)

    def demo() -> None:
        with torch.no_grad():
            mlp(rows)

    def wide() -> None:
        big_a @ big_b

    return {"tiny": tiny, "demo": demo, "wide": wide}


def cpu_per_step_us(step, steps: int) -> float:
    t0 = time.thread_time()
    for _ in range(steps):
        step()
    return (time.thread_time() - t0) / steps * 1e6


def profiled(step, steps: int, out: Path, seq: int) -> tuple[float, int]:
    """CPU per step (us) inside a real agent window, and the events it recorded."""
    window = TorchWindow(out, seq)
    window.start()
    try:
        us = cpu_per_step_us(step, steps)
    finally:
        record = window.stop()
    if record["error"]:
        raise SystemExit(f"the window failed: {record['error']}")
    return us, count_events(out / record["file"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=2000, help="steps per loop and round (wide: a tenth)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread; CPU per step (thread_time), median of {args.rounds} rounds")
    print(f"  {'loop':6s} {'off (us)':>10s} {'on (us)':>10s} {'slowdown':>9s} {'per event (us)':>15s} "
          f"{'events/step':>12s}  lost at 5% / 10% duty")
    with tempfile.TemporaryDirectory() as tmp:
        seq = 0
        for name, step in loops().items():
            steps = args.steps // 10 if name == "wide" else args.steps
            cpu_per_step_us(step, steps // 4)  # warm-up
            off, on, events = [], [], []
            for _ in range(args.rounds):
                off.append(cpu_per_step_us(step, steps))
                seq += 1
                us, n = profiled(step, steps, Path(tmp), seq)
                on.append(us)
                events.append(n / steps)
            o, p, e = statistics.median(off), statistics.median(on), statistics.median(events)
            slow = p / o
            print(f"  {name:6s} {o:10.2f} {p:10.2f} {slow:8.2f}x {(p - o) / max(e, 1e-9):15.2f} {e:12.1f}  "
                  f"{1 - 1 / (1 + 0.05 * (slow - 1)):6.1%} / {1 - 1 / (1 + 0.10 * (slow - 1)):6.1%}")


if __name__ == "__main__":
    main()
