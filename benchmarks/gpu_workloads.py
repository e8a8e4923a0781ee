"""The four labelled GPU workloads benchmarks/record_gpu.py records, one per child process.

    python benchmarks/gpu_workloads.py NAME --seconds 20 --stage DIR [--device cuda|cpu]

Each runs its loop for ``--seconds`` and, after a warm-up, one torch.profiler window of
``PROFILE_STEPS`` iterations (CPU + CUDA activities) saved as ``DIR/torch/trace-0001.json.gz``
with ``DIR/torch-meta.json`` (the torch.jsonl record of the bundle conventions). It prints
``READY`` once CUDA is initialised and the first kernels ran, so NVML lists the process.

- compute:   bf16 8192x8192 matmuls back to back (tensor cores saturated);
- bandwidth: 1 GiB device-to-device copies alternating with an embedding gather (DRAM-bound);
- service:   64x64 kernels launched one at a time from Python with JSON work between them;
- io:        the GPU waits on 8 MiB batches read from a slow peer (a feeder process sending
             ~100 MB/s over a loopback socket).
``--device cpu`` runs the same code on the CPU, to check the script where no GPU exists.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROFILE_AFTER_S = 4.0
PROFILE_STEPS = 10


def compute(torch: Any, dev: str) -> Callable[[], None]:
    n = 8192 if dev == "cuda" else 512
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)

    def step() -> None:
        for _ in range(8):
            torch.matmul(a, b)
    return step


def bandwidth(torch: Any, dev: str) -> Callable[[], None]:
    n = (1 << 28) if dev == "cuda" else (1 << 22)  # 1 GiB of fp32 on the GPU
    src, dst = torch.empty(n, device=dev), torch.empty(n, device=dev)
    table = torch.randn(1 << 22 if dev == "cuda" else 1 << 14, 256, device=dev)
    idx = torch.randint(0, table.shape[0], (1 << 20 if dev == "cuda" else 1 << 12,), device=dev)

    def step() -> None:
        dst.copy_(src)
        torch.index_select(table, 0, idx)
    return step


def service(torch: Any, dev: str) -> Callable[[], None]:
    x = torch.randn(64, 64, device=dev)
    payload = {"rows": [{"id": i, "tokens": list(range(32))} for i in range(200)]}

    def step() -> None:
        for _ in range(20):
            body = json.loads(json.dumps(payload))
            y = x @ x
            body["score"] = float(y.sum().item())  # tiny kernel, then a sync, per item
    return step


# The slow peer of the io workload: 1 MiB blocks every 10 ms (~100 MB/s, an object store over the
# network rather than local NVMe); it exits when the workload closes the socket.
FEEDER = """
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
block = bytes(1 << 20)
while True:
    try:
        s.sendall(block)
    except OSError:
        break
    time.sleep(0.01)
"""


def io(torch: Any, dev: str) -> Callable[[], None]:
    srv = socket.create_server(("127.0.0.1", 0))
    feeder = subprocess.Popen([sys.executable, "-c", FEEDER, str(srv.getsockname()[1])])
    conn, _ = srv.accept()
    buf = bytearray(8 << 20)
    view = memoryview(buf)

    def step() -> None:
        got = 0
        while got < len(buf):  # the GPU waits for this batch to arrive
            n = conn.recv_into(view[got:])
            if not n:
                raise ConnectionError("the feeder closed the socket")
            got += n
        t = torch.frombuffer(buf, dtype=torch.uint8).to(dev)
        t.float().mean()

    def cleanup() -> None:
        conn.close()
        srv.close()
        feeder.wait(10)
    step.cleanup = cleanup  # type: ignore[attr-defined]
    return step


WORKLOADS: dict[str, Callable[[Any, str], Callable[[], None]]] = {
    "compute": compute, "bandwidth": bandwidth, "service": service, "io": io,
}


def sync(torch: Any, dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def profile(torch: Any, dev: str, step: Callable[[], None], stage: Path) -> None:
    """One torch.profiler window; writes torch/trace-0001.json.gz and torch-meta.json."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
    (stage / "torch").mkdir(parents=True, exist_ok=True)
    raw = stage / "trace.json"
    meta: dict[str, Any] = {"file": "torch/trace-0001.json.gz", "activities": ["cpu", "cuda"][:len(acts)],
                            "torch_version": torch.__version__, "error": None, "start_ns": time.time_ns()}
    with torch_profile(activities=acts) as prof:
        for _ in range(PROFILE_STEPS):
            step()
        sync(torch, dev)
    meta["end_ns"] = time.time_ns()
    prof.export_chrome_trace(str(raw))
    meta["base_time_ns"] = json.loads(raw.read_text()).get("baseTimeNanoseconds")
    with open(raw, "rb") as src, gzip.open(stage / "torch" / "trace-0001.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    (stage / "torch-meta.json").write_text(json.dumps(meta))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", choices=sorted(WORKLOADS))
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--stage", type=Path, required=True)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = ap.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: torch sees no CUDA GPU; run on a GPU host or pass --device cpu", file=sys.stderr)
        return 2
    step = WORKLOADS[args.name](torch, args.device)
    step()
    sync(torch, args.device)
    print("READY", os.getpid(), flush=True)
    start = time.monotonic()
    profiled = False
    while time.monotonic() - start < args.seconds:
        if not profiled and time.monotonic() - start >= PROFILE_AFTER_S:
            profile(torch, args.device, step, args.stage)
            profiled = True
        step()
    sync(torch, args.device)
    getattr(step, "cleanup", lambda: None)()
    return 0


if __name__ == "__main__":
    sys.exit(main())
