"""Record NVML backend calls to JSON Lines, and replay them through the same interface.

``RecordingBackend`` wraps any backend (the live one on a GPU host, see benchmarks/record_gpu.py)
and writes one line per call; ``ReplayBackend`` reads exactly those lines back and answers the
collectors' calls with them, so a recording made on real hardware runs the real collectors,
signals and rules on a machine without a GPU.

File format (NVML_CALLS in diagnose/bundle/streams.py, one JSON object per line):
``{"call": "meta", "format": "diagnose-nvml-calls", "version": 1, ...}`` first, then
``{"call": "open"|"devices"|"processes"|"read"|"gpm_read", "gpu": int|null, "t_ns": int,
"result": ...}`` or ``..., "error": "<reason>"}`` where the live call raised NvmlUnavailable.
``t_ns`` is the Unix time when the call returned. Replay answers each (call, gpu) pair with its
recorded results in order and starts over when they run out; sample timestamps of a ``read`` are
moved by (now - recorded ``t_ns``), so replayed samples lie where they would on a live host.
"""
from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from diagnose.bundle import JsonlStream
from diagnose.bundle.streams import NVML_CALLS
from diagnose.collectors.nvml_backend import NvmlBackend, NvmlUnavailable

FORMAT = "diagnose-nvml-calls"
VERSION = 1
CALLS_FILE = NVML_CALLS.name


class RecordingBackend(NvmlBackend):
    """Passes every call to ``inner`` and appends call and result to ``path`` (0600)."""

    def __init__(self, inner: NvmlBackend, path: Path, meta: dict[str, Any] | None = None):
        self._inner = inner
        self._out = JsonlStream(Path(path))
        self._out.write({"call": "meta", "format": FORMAT, "version": VERSION, **(meta or {})})

    def _call(self, name: str, gpu: int | None, fn, *args) -> Any:
        try:
            result = fn(*args)
        except NvmlUnavailable as exc:
            self._out.write({"call": name, "gpu": gpu, "t_ns": time.time_ns(), "error": str(exc)})
            raise
        self._out.write({"call": name, "gpu": gpu, "t_ns": time.time_ns(), "result": result})
        return result

    def open(self) -> dict[str, Any]:
        return self._call("open", None, self._inner.open)

    def devices(self) -> list[dict[str, Any]]:
        return self._call("devices", None, self._inner.devices)

    def processes(self, gpu: int) -> dict[str, Any]:
        return self._call("processes", gpu, self._inner.processes, gpu)

    def read(self, gpu: int, since_us: int) -> dict[str, Any]:
        return self._call("read", gpu, self._inner.read, gpu, since_us)

    def gpm_read(self, gpu: int) -> dict[str, Any]:
        return self._call("gpm_read", gpu, self._inner.gpm_read, gpu)

    def close(self) -> None:
        self._inner.close()
        self._out.close()


class ReplayError(ValueError):
    """The file is not a diagnose NVML call recording."""


def load_calls(path: Path) -> dict[tuple[str, int | None], list[dict[str, Any]]]:
    """Group the records of a recording by (call, gpu). Raises ReplayError on a foreign file."""
    groups: dict[tuple[str, int | None], list[dict[str, Any]]] = defaultdict(list)
    with open(path, encoding="utf-8") as fh:
        lines = [json.loads(line) for line in fh if line.strip()]
    if not lines or lines[0].get("format") != FORMAT:
        raise ReplayError(f"{path} is not a {FORMAT} recording (first line must be its meta record)")
    if lines[0].get("version") != VERSION:
        raise ReplayError(f"{path} has version {lines[0].get('version')}, this diagnose reads {VERSION}")
    for rec in lines[1:]:
        groups[(rec["call"], rec.get("gpu"))].append(rec)
    return groups


def shift_read(result: dict[str, Any], shift_us: int, since_us: int) -> dict[str, Any]:
    """A recorded ``read`` result with its sample timestamps moved by ``shift_us``, keeping only
    samples newer than ``since_us`` (what nvmlDeviceGetSamples would return)."""
    samples = {
        key: [[t + shift_us, v] for t, v in rows if t + shift_us > since_us]
        for key, rows in (result.get("samples") or {}).items()
    }
    procs = [[pid, t + shift_us, sm, mem] for pid, t, sm, mem in result.get("process_samples") or []
             if t + shift_us > since_us]
    return {**result, "samples": samples, "process_samples": procs}


class ReplayBackend(NvmlBackend):
    """Answers NVML calls from a recording made by RecordingBackend."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._groups = load_calls(self.path)
        self._next: dict[tuple[str, int | None], int] = defaultdict(int)

    def _take(self, call: str, gpu: int | None, cycle: bool = True) -> dict[str, Any]:
        rows = self._groups.get((call, gpu))
        if not rows:
            raise NvmlUnavailable(f"replay {self.path.name} has no {call} call"
                                  + (f" for GPU {gpu}" if gpu is not None else ""))
        i = self._next[(call, gpu)]
        self._next[(call, gpu)] = (i + 1) % len(rows) if cycle else i
        rec = rows[i]
        if "error" in rec:
            raise NvmlUnavailable(rec["error"])
        return rec

    def open(self) -> dict[str, Any]:
        return self._take("open", None, cycle=False)["result"]

    def devices(self) -> list[dict[str, Any]]:
        return self._take("devices", None, cycle=False)["result"]

    def processes(self, gpu: int) -> dict[str, Any]:
        return self._take("processes", gpu)["result"]

    def read(self, gpu: int, since_us: int) -> dict[str, Any]:
        rec = self._take("read", gpu)
        shift_us = time.time_ns() // 1000 - rec["t_ns"] // 1000
        return shift_read(rec["result"], shift_us, since_us)

    def gpm_read(self, gpu: int) -> dict[str, Any]:
        return self._take("gpm_read", gpu)["result"]

    def close(self) -> None:
        """Nothing to release: the recording was read at construction."""


__all__ = ["CALLS_FILE", "RecordingBackend", "ReplayBackend", "ReplayError", "load_calls", "shift_read"]
