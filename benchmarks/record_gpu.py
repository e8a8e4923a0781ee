"""Record labelled real-hardware GPU bundles into fixtures/gpu/ (needs an NVIDIA GPU and CUDA torch).

    python benchmarks/record_gpu.py [--seconds 20] [--only compute,io] [--out fixtures/gpu]
    python benchmarks/record_gpu.py --dry-run      # no GPU: run each workload briefly on the CPU

For each workload of benchmarks/gpu_workloads.py (bf16 matmuls, copy + embedding gather, tiny
kernels between JSON work, file reads feeding the GPU) it starts the workload as a child, waits for
READY, and captures it for ``--seconds`` with py-spy, the process collector and the NVML and GPM
collectors (the io workload reads its batches from a slow loopback peer). The last two talk to NVML
through ``RecordingBackend``, so every NVML call and its result is also written to
``nvml-calls.jsonl`` / ``gpm-calls.jsonl``: exactly what ``ReplayBackend`` reads.
``fixtures/gpu/<label>/`` then holds the bundle (streams and manifest), the two call recordings, the
workload's torch profiler trace (``torch/trace-0001.json.gz`` indexed by ``torch.jsonl``) and
``expected.json`` (label, expected quadrant, GPU, driver, date, ``real``).
tests/collectors/test_gpu_nvml.py analyses each bundle and replays its calls through the collectors.
Reads only: no GPU setting is changed. Prints one summary row per workload.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKLOADS_PY = Path(__file__).resolve().parent / "gpu_workloads.py"
# label -> (workload in gpu_workloads.py, expected quadrant)
LABELS = {
    "compute-bf16-matmul": ("compute", "compute"),
    "bandwidth-copy-gather": ("bandwidth", "bandwidth"),
    "service-tiny-kernels": ("service", "service"),
    "io-socket-reads": ("io", "io"),
}
SUMMARY = ("gpu.kernel_busy_pct", "gpu.sm_active_pct", "gpu.tensor_active_pct", "gpu.dram_active_pct",
           "cpu.process_util_pct")


def die(message: str) -> SystemExit:
    print(f"error: {message}", file=sys.stderr)
    return SystemExit(2)


def start_workload(workload: str, seconds: float, stage: Path, device: str) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, str(WORKLOADS_PY), workload, "--seconds", str(seconds),
                              "--stage", str(stage), "--device", device], stdout=subprocess.PIPE, text=True)
    line = child.stdout.readline()
    if "READY" not in line:
        child.kill()
        raise die(f"workload {workload} did not start (exit {child.wait()}): {line.strip()}")
    return child


def nvml_preflight() -> dict:
    """Host and device facts; exits 2 with the reason where NVML cannot be used."""
    from diagnose.collectors.nvml_backend import LiveNvmlBackend, NvmlUnavailable

    backend = LiveNvmlBackend()
    try:
        host = backend.open()
        devices = backend.devices()
    except NvmlUnavailable as exc:
        raise die(f"recording needs NVML: {exc}; run on a GPU host (or --dry-run)") from None
    finally:
        backend.close()
    if not devices:
        raise die("NVML sees no GPU; check CUDA_VISIBLE_DEVICES")
    return {"driver": host.get("driver_version"), "gpu": devices[0].get("name"),
            "gpm": [d.get("gpm_supported") for d in devices]}


def capture(child: subprocess.Popen, dest: Path, seconds: float, meta: dict) -> Path:
    """Capture ``child`` into a bundle under dest/.capture, recording every NVML call into dest."""
    from diagnose.capture.session import Capture
    from diagnose.capture.target import resolve_target
    from diagnose.collectors import CaptureOptions
    from diagnose.collectors.gpm import GpmCollector
    from diagnose.collectors.nvml import NvmlCollector
    from diagnose.collectors.nvml_backend import LiveNvmlBackend
    from diagnose.collectors.nvml_replay import RecordingBackend
    from diagnose.collectors.process import ProcessCollector
    from diagnose.collectors.pyspy import PySpyCollector

    def recorder(name: str):
        return lambda: RecordingBackend(LiveNvmlBackend(), dest / name, meta)

    collectors = (PySpyCollector(), ProcessCollector(), NvmlCollector(recorder("nvml-calls.jsonl")),
                  GpmCollector(recorder("gpm-calls.jsonl")))
    options = CaptureOptions(duration_s=seconds, rate_hz=50, gpu_rate_hz=10.0)
    command = ["python", "benchmarks/record_gpu.py", "--seconds", f"{seconds:g}"]
    result = Capture(resolve_target(child.pid), options, dest / ".capture", command, collectors).run(threading.Event())
    return result.bundle_path


def place(bundle: Path, stage: Path, dest: Path) -> None:
    """Move the bundle's files and the torch trace (indexed in torch.jsonl) into ``dest``."""
    for item in bundle.iterdir():
        shutil.move(str(item), dest / item.name)
    shutil.rmtree(dest / ".capture")
    if (stage / "torch").is_dir():
        shutil.move(str(stage / "torch"), dest / "torch")
        meta = json.loads((stage / "torch-meta.json").read_text())
        (dest / "torch.jsonl").write_text(json.dumps(meta) + "\n")


def record(label: str, seconds: float, out: Path, facts: dict) -> dict:
    from diagnose.pipeline import analyse

    workload, quadrant = LABELS[label]
    dest = out / label
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    stage = Path(tempfile.mkdtemp(prefix=f"record-{label}-"))
    meta = {"label": label, "workload": workload, "gpu": facts["gpu"], "driver": facts["driver"]}
    child = start_workload(workload, seconds + 10, stage, "cuda")
    try:
        bundle = capture(child, dest, seconds, meta)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    place(bundle, stage, dest)
    shutil.rmtree(stage, ignore_errors=True)
    a = analyse(dest).analysis
    expected = {"quadrant": quadrant, "label": label, "workload": workload, "real": True, **facts,
                "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "seconds": seconds,
                "verdict_at_recording": a.verdict.quadrant.value}
    (dest / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    return {"label": label, "expected": quadrant, "verdict": a.verdict.quadrant.value,
            **{k: a.signals[k].value for k in SUMMARY if k in a.signals}}


def dry_run(seconds: float) -> int:
    """Each workload on the CPU for ``seconds`` with its profiler window: checks the script here."""
    for label, (workload, _) in LABELS.items():
        stage = Path(tempfile.mkdtemp(prefix=f"dry-{label}-"))
        child = start_workload(workload, seconds, stage, "cpu")
        code = child.wait(timeout=seconds + 120)
        trace = stage / "torch" / "trace-0001.json.gz"
        size = trace.stat().st_size if trace.exists() else None
        shutil.rmtree(stage, ignore_errors=True)
        print(f"{label:24s} exit {code}  trace {size if size else 'MISSING'} bytes")
        if code != 0 or not size:
            return 1
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="capture length per workload (default 20)")
    ap.add_argument("--only", default="", help="comma-separated workloads: compute,bandwidth,service,io")
    ap.add_argument("--out", type=Path, default=REPO / "fixtures" / "gpu")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: run the workloads on the CPU, record nothing")
    args = ap.parse_args()
    if args.dry_run:
        return dry_run(min(args.seconds, 6.0))
    wanted = {w for w in args.only.split(",") if w}
    labels = [lb for lb, (wl, _) in LABELS.items() if not wanted or wl in wanted]
    facts = nvml_preflight()
    rows = [record(label, args.seconds, args.out, facts) for label in labels]
    for r in rows:
        print(json.dumps(r))
    return 0 if all(r["expected"] == r["verdict"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
