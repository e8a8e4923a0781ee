"""The streams of a bundle, each declared once: its member name, the collector whose status covers
it, the shape of one record and how it is read.

Every other module names a stream through its spec (``PROCESS.name``, ``PYSPY_WINDOWS.file(3)``),
never by a literal: ``tests/bundle/test_stream_specs.py`` fails if a declared name appears in the
package sources anywhere but here. A stream typed on the host names its record class in
diagnose/bundle/records/ (``Bundle.typed``: decoded and checked once); the other record shapes are
TypedDicts: the records stay the plain dicts the JSON Lines hold (a stream may be hand-edited or
torn, so readers still check what they use), and the declaration says which keys a producer writes
and in which unit.

Standard library only: the in-target agent imports this package.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, TypedDict

FINDINGS = "findings.json"
REPORT = "report.md"


class StreamKind(str, Enum):
    JSONL = "jsonl"  # one JSON object per line, appended and flushed as records arrive
    FILES = "files"  # a directory of numbered files in the producer's own format


@dataclass(frozen=True)
class StreamSpec:
    """One stream of the bundle.

    ``name``: the member name (a JSON Lines file, or the directory of a FILES stream, with its
    trailing slash as the manifest lists it). ``pattern``: a FILES stream's file name for
    sequence number ``seq`` (from 1). ``record``: the shape of one record (JSONL) or of one file's
    content (FILES). ``reader``: JSONL: the decoded records (dicts, in file order) -> the parsed
    tuple that ``Bundle.stream`` caches; FILES: a path -> the file's content, or None when it is
    unreadable (None for files read by their analyser, e.g. torch traces, streamed by
    diagnose.traces.reader).
    """

    name: str
    collector: str
    record: Any  # a JSONL stream typed on the host: the name of its class in diagnose/bundle/records.py
    reader: Callable[..., Any] | None
    kind: StreamKind = StreamKind.JSONL
    pattern: str | None = None

    @property
    def directory(self) -> str:
        """A FILES stream's directory name inside the bundle (``pyspy``)."""
        return self.name.rstrip("/")

    def file(self, seq: int) -> str:
        """A FILES stream's member name for sequence number ``seq`` (``pyspy/window-0003.json``)."""
        if self.pattern is None:
            raise ValueError(f"stream {self.name} is not a directory of numbered files")
        return self.pattern.format(seq=seq)


def record_tuple(records: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The default JSONL reader: every decoded record, in file order."""
    return tuple(records)


MAX_WINDOW_BYTES = 256 << 20  # one py-spy window file read whole (a 5 s window is a few MiB)


MAX_WINDOW_OBJECTS = 4_000_000  # JSON objects in one py-spy window (an event and its args: 2 each)


def read_json_list(path: Path) -> list[dict[str, Any]] | None:
    """A file holding one JSON array (py-spy's chrometrace): its objects, or None if unreadable
    (also a symlink, a FIFO or device, a file over MAX_WINDOW_BYTES, or more than
    MAX_WINDOW_OBJECTS objects: a 120 MiB file of ``{}`` would take ~27 GiB parsed)."""
    from diagnose.bundle.files import read_regular_file

    try:
        data = read_regular_file(path, MAX_WINDOW_BYTES)
        if data.count(b"{") > MAX_WINDOW_OBJECTS:  # counted before parsing: tiny objects cost ~1 KiB each parsed
            return None
        doc = json.loads(data.decode("utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None
    return [e for e in doc if isinstance(e, dict)] if isinstance(doc, list) else None


# ---- record shapes ------------------------------------------------------------------------------

class ChromeTraceEvent(TypedDict, total=False):
    """One event of a py-spy chrometrace window: B/E per frame, ``ts`` in us from the window origin."""

    name: str
    cat: str
    ph: str
    pid: int
    tid: int
    ts: float
    args: dict[str, Any]  # filename, line


class SpanRecord(TypedDict, total=False):
    """One span as its producers write it (diagnose/agent/inproc/records.py make_record): ids in hex,
    times Unix ns. The host decodes it into records/spans.py ``SpanRecord``."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str
    start_ns: int
    end_ns: int | None  # None: still open when the capture ended
    status: str
    attributes: dict[str, Any]
    events: list[dict[str, Any]]
    service: str | None
    source: str  # agent, otlp or import


class NvmlCallRecord(TypedDict, total=False):
    """One recorded NVML backend call (collectors/nvml_replay.py); the first is the meta record."""

    call: str
    gpu: int | None
    t_ns: int
    result: Any
    error: str
    format: str
    version: int


# ---- the streams ---------------------------------------------------------------------------------

PROCESS = StreamSpec("process.jsonl", "process", "ProcessReading", record_tuple)
THREADS = StreamSpec("threads.jsonl", "process", "ThreadNameRecord", record_tuple)
PYSPY = StreamSpec("pyspy.jsonl", "pyspy", "PyspyWindowRecord", record_tuple)
PYSPY_SOURCES = StreamSpec("pyspy-sources.jsonl", "pyspy", "PyspySourceRecord", record_tuple)
PYSPY_WINDOWS = StreamSpec("pyspy/", "pyspy", list[ChromeTraceEvent], read_json_list, StreamKind.FILES,
                           "pyspy/window-{seq:04d}.json")
NVML = StreamSpec("nvml.jsonl", "nvml", "NvmlRecord", record_tuple)
GPM = StreamSpec("gpm.jsonl", "gpm", "GpmRecord", record_tuple)
DCGM = StreamSpec("dcgm.jsonl", "dcgm", "DcgmRecord", record_tuple)
DCGM_RAW = StreamSpec("dcgm/", "dcgm", str, None, StreamKind.FILES, "dcgm/scrape-{seq:04d}.prom")
SERVING = StreamSpec("serving-metrics.jsonl", "serving", "ServingRecord", record_tuple)
SERVING_RAW = StreamSpec("serving-metrics/", "serving", str, None, StreamKind.FILES,
                         "serving-metrics/scrape-{seq:04d}.prom")
SPANS = StreamSpec("spans.jsonl", "agent", "SpanRecord", record_tuple)  # also the OTLP receiver, importers
GC = StreamSpec("gc.jsonl", "agent", "GcPauseRecord", record_tuple)
TORCH = StreamSpec("torch.jsonl", "agent", "TorchTraceRecord", record_tuple)
TORCH_TRACES = StreamSpec("torch/", "agent", dict, None, StreamKind.FILES, "torch/trace-{seq:04d}.json.gz")
# Recordings of the NVML/GPM backends (benchmarks/record_gpu.py), replayed by the GPU tests.
NVML_CALLS = StreamSpec("nvml-calls.jsonl", "nvml", NvmlCallRecord, record_tuple)
GPM_CALLS = StreamSpec("gpm-calls.jsonl", "gpm", NvmlCallRecord, record_tuple)

STREAMS: tuple[StreamSpec, ...] = (PROCESS, THREADS, PYSPY, PYSPY_SOURCES, PYSPY_WINDOWS, NVML, GPM, DCGM,
                                   DCGM_RAW, SERVING, SERVING_RAW, SPANS, GC, TORCH, TORCH_TRACES, NVML_CALLS,
                                   GPM_CALLS)


__all__ = ["DCGM", "DCGM_RAW", "FINDINGS", "GC", "GPM", "GPM_CALLS", "NVML", "NVML_CALLS", "PROCESS", "PYSPY",
           "PYSPY_SOURCES", "PYSPY_WINDOWS", "REPORT", "SERVING", "SERVING_RAW", "SPANS", "STREAMS", "THREADS",
           "TORCH", "TORCH_TRACES",
           "StreamKind", "StreamSpec", "read_json_list", "record_tuple"]
