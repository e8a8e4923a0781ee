"""Helpers for the kernel-timeline tests: real traces from ../shared/data read in place, and small
(malformed) traces derived from their events in a temporary directory."""
from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import SHARED_DATA

TRACES = SHARED_DATA / "torch-traces"
RANK0 = "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
NCCL = "nccl_data.json.gz"
BENCH = "benchmark_result_493459_1694039959_trace.json.gz"
MI250 = "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
CPU_ONLY = "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
RANK_NOT_FOUND = "rank_not_found.json.gz"
LARGE_INT = "large_integer_rank-70.pt.trace.json.gz"


def shared(name: str) -> Path:
    path = TRACES / name
    if not path.is_file():
        pytest.skip(f"shared trace {name} not found under {TRACES} (read in place, never copied)")
    return path


def load(name: str) -> dict[str, Any]:
    path = shared(name)
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return json.loads(raw)


def snippet(name: str, keep: Callable[[dict], bool], limit: int = 200) -> tuple[dict, list[dict]]:
    """(metadata, up to ``limit`` events that ``keep`` accepts) of a shared trace."""
    doc = load(name)
    events = [e for e in doc.pop("traceEvents") if keep(e)][:limit]
    return doc, events


def write(path: Path, meta: dict, events: list[dict], gz: bool = True) -> Path:
    doc = dict(meta, traceEvents=events)
    data = json.dumps(doc, indent=1).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path
