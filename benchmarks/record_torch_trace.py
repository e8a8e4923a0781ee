"""Record a real training-loop torch profiler (Kineto) trace on a CUDA GPU into fixtures/torch/.

    python benchmarks/record_torch_trace.py [--out fixtures/torch] [--steps 6]

A small conv + attention model trains on batches from a DataLoader whose Python collate does CPU
work; each step copies the batch host-to-device twice (pinned, non_blocking, and pageable), reads
the loss back with ``.item()`` (a device-to-host copy plus a stream sync) and calls
``torch.cuda.synchronize()`` once. The profiler runs with a schedule (wait 1, warmup 1, active
``--steps``), record_shapes and with_flops, so the trace carries ProfilerStep#N, DataLoader
annotations, ac2g flows, cudaStreamSynchronize/cudaDeviceSynchronize, memcpy HtoD (pinned and
pageable) and DtoH, GEMM/conv/attention/elementwise/reduction kernels and ``Input Dims``.
Writes ``<out>/<gpu>-train-step/trace.json.gz`` and ``meta.json`` (GPU, driver, torch version,
date). tests/traces/test_kineto_real_gpu.py reads them. Needs an NVIDIA GPU and a CUDA build of torch.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build(torch):
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 64, 3, padding=1)
            self.proj = nn.Linear(64, 256)
            self.attn = nn.MultiheadAttention(256, 8, batch_first=True)
            self.head = nn.Linear(256, 10)

        def forward(self, x):
            x = torch.relu(self.conv(x))  # (B, 64, 32, 32)
            x = x.flatten(2).transpose(1, 2)  # (B, 1024, 64)
            x = self.proj(x)
            x, _ = self.attn(x, x, x, need_weights=False)
            return self.head(x.mean(1))

    return Net


class Images:
    """Random images whose Python 'decode' costs CPU time: the input pipeline the step waits on."""

    def __init__(self, torch, n: int) -> None:
        self.torch, self.n = torch, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = self.torch.Generator().manual_seed(i)
        img = self.torch.rand(3, 32, 32, generator=g)
        _ = sum(j * j for j in range(20_000))  # stands in for JPEG decoding
        return img, i % 10


def driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001  (metadata only: any NVML failure leaves it unknown)
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "fixtures" / "torch")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--cpu", action="store_true", help="no GPU: check the script on the CPU (writes to --out)")
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    if not args.cpu and not torch.cuda.is_available():
        print("error: torch sees no CUDA GPU; run on a GPU host (or --cpu to check the script)", file=sys.stderr)
        return 2
    dev = torch.device("cpu" if args.cpu else "cuda")
    acts = [ProfilerActivity.CPU] + ([] if args.cpu else [ProfilerActivity.CUDA])
    model = build(torch)().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(Images(torch, 64 * (args.steps + 4)), batch_size=64, num_workers=0)
    pageable = torch.randn(64, 3, 32, 32)
    name = "cpu" if args.cpu else torch.cuda.get_device_name(0)
    label = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-").replace("nvidia-", "") + "-train-step"
    stage = Path(tempfile.mkdtemp(prefix="record-trace-"))
    with profile(activities=acts, record_shapes=True,
                 with_flops=True, schedule=schedule(wait=1, warmup=1, active=args.steps),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(stage / "trace.json"))) as prof:
        for step, (x, y) in enumerate(loader):
            if step >= args.steps + 2:
                break
            x = (x if args.cpu else x.pin_memory()).to(dev, non_blocking=True)  # pinned host-to-device copy
            extra = pageable.to(dev)  # pageable host-to-device copy
            y = y.to(dev, non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(x + 0.01 * extra), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss.item()  # device-to-host copy + stream sync
            if not args.cpu:
                torch.cuda.synchronize()
            prof.step()
    dest = args.out / label
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with open(stage / "trace.json", "rb") as src, gzip.open(dest / "trace.json.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    shutil.rmtree(stage, ignore_errors=True)
    meta = {"gpu": name, "torch_version": torch.__version__, "cuda": torch.version.cuda, "driver": driver(),
            "steps": args.steps, "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "real": True, "recorded_by": "benchmarks/record_torch_trace.py"}
    (dest / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps({"out": str(dest), "bytes": (dest / "trace.json.gz").stat().st_size, **meta}))
    return 0


if __name__ == "__main__":
    t0 = time.monotonic()
    code = main()
    print(f"recorded in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    sys.exit(code)
