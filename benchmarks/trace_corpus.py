"""The trace corpus of benchmarks/accuracy.py (``--traces``): public Kineto traces (../shared/data,
read in place, never copied into the repository) and the project's own recording, each imported the
way ``diagnose analyze FILE`` does and judged on quadrant, layer and first remedy. The expected
answers live here only; HTA's reference figures (../shared/data/README.md) back the GPU ones.

The first remedy is matched by its opening words: the training wording (a step loop) and the
serving wording of one rule differ there.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "torch-traces"
OWN = REPO / "fixtures" / "torch"

HOST_GAPS_TRAINING = "Find what the host does in the gaps (see 'GPU idle gaps' and the DataLoader share)"
HOST_GAPS_SERVING = "Find what the host does in the gaps (see 'GPU idle gaps'): move pre/post-processing"
# case -> (trace, (quadrant, layer, first remedy's opening words))
TRACES: dict[str, tuple[Path, tuple[str, str, str]]] = {
    "own/h200 train step (DataLoader)": (OWN / "h200-train-step" / "trace.json.gz",
                                         ("service", "service", HOST_GAPS_TRAINING)),
    "hta/rank-0 (V100 DDP, compute)": (SHARED / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
                                       ("compute", "model", "Cheaper math per step: bf16 autocast")),
    "hta/nccl_data (GPU waits for its host)": (SHARED / "nccl_data.json.gz",
                                               ("service", "service", HOST_GAPS_TRAINING)),
    "hta/mi250 minitoy (ROCm)": (SHARED / "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
                                 ("service", "service", HOST_GAPS_TRAINING)),
    "hta/benchmark add (tiny kernels)": (SHARED / "benchmark_result_493459_1694039959_trace.json.gz",
                                         ("service", "service", HOST_GAPS_SERVING)),
    "hta/backward_thread (7 events)": (SHARED / "backward_thread.json", ("service", "service", HOST_GAPS_SERVING)),
    "hta/rank_not_found (CPU-only step)": (SHARED / "rank_not_found.json.gz",
                                           ("service", "service", "Move the Python work the join names into "
                                                                  "DataLoader workers")),
    # one DDP rank on gloo: the step's time is two threads' gradient all-reduces, not Python between ops
    "hta/rank-34 (CPU-only, gloo DDP)": (SHARED / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
                                         ("io", "engine", "Overlap gradient collectives with backward")),
}


def judge_trace(path: Path, expected: tuple[str, str, str]) -> dict:
    """Import and analyse one trace; its verdict against ``expected`` (remedy by opening words)."""
    from diagnose.bundle import Bundle
    from diagnose.bundle.importers import import_files
    from diagnose.verdict.analyze import analyze

    with tempfile.TemporaryDirectory(prefix="trace-corpus-") as tmp:
        a = analyze(Bundle.open(import_files([path], Path(tmp))))
    v = a.verdict
    got = (v.quadrant.value, v.layer.value if v.layer else None, v.remedy or "")
    return {"quadrant": got[0], "layer": got[1], "remedy": got[2], "confidence": round(v.confidence, 2),
            "correct": got[:2] == expected[:2] and got[2].startswith(expected[2])}


__all__ = ["SHARED", "TRACES", "judge_trace"]
