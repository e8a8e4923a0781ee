"""Stream a torch trace once: copy it into the bundle while gathering what its TORCH index
record needs (time span, GPU activity, event count, the document's metadata).

One read of the file, whatever its size: the raw bytes pass through a CopyingReader into the
bundle's copy while the trace reader's event stream (diagnose/traces/stream.py ``stream_events``)
parses them one batch (~1 MiB of JSON) at a time into a TraceSkim. Memory: a few chunks and one
parsed batch; no columns are built (the analysis reads the copy again with ``read_trace``).
"""
from __future__ import annotations

import gzip
import io
import math
import os
import shutil
from collections.abc import Iterator
from contextlib import closing, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from diagnose.bundle.importers.base import Artifact, ImportFailed
from diagnose.traces.columns import as_float
from diagnose.traces.reader import MAX_TS_US
from diagnose.traces.stream import EventStream, TraceReadError, stream_events
from diagnose.traces.typed import Event, decode_events, events_of

if TYPE_CHECKING:
    from _typeshed import SupportsRead, SupportsWrite

GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver",
                            "gpu_user_annotation"})
COMPRESS_LEVEL = 5  # an uncompressed trace is stored gzipped: ~12x smaller, ~150 MB/s of JSON
COPY_BYTES = 1 << 20


@dataclass
class TraceSkim:
    """Facts gathered batch by batch as events stream past (a ``BatchSink``): the span of the
    timed events in the trace's own µs, whether any event is a GPU one, how many events there are."""

    events: int = 0
    first_us: float = math.inf
    last_us: float = -math.inf  # max of ts + dur
    gpu: bool = False
    out_of_range: int = 0  # timed events whose ts or end lies beyond MAX_TS_US (not used for the span)

    def add_batch(self, events: list[Any]) -> None:
        """Parsed events (orjson dicts), typed as the columns type them (traces/typed.py)."""
        self.events += len(events)
        self._add(events_of(events))

    def add_json_array(self, body: bytes) -> bool:
        """The events of the JSON array ``body`` decoded straight into typed structs; False, with
        nothing added, when they do not fit them (the stream then calls ``add_batch``)."""
        events = decode_events(body)
        if events is None:
            return False
        self.events += len(events)
        self._add(events)
        return True

    def _add(self, events: list[Event]) -> None:
        timed = [ev for ev in events if ev.ph != "M"]
        if timed:  # in numpy: ~3x faster than a loop over the events (1-2 s per GB of trace)
            ts = _floats([ev.ts for ev in timed])
            dur = _floats([ev.dur for ev in timed])
            end = ts + np.where(np.isfinite(dur), dur, 0.0)
            ok = np.isfinite(ts) & np.isfinite(end)
            sane = ok & (np.abs(ts) <= MAX_TS_US) & (np.abs(end) <= MAX_TS_US)
            self.out_of_range += int(ok.sum() - sane.sum())
            ok = sane
            if ok.any():
                self.first_us = min(self.first_us, float(ts[ok].min()))
                self.last_us = max(self.last_us, float(end[ok].max()))
        if not self.gpu:
            self.gpu = any(isinstance(cat := ev.cat, str) and cat in GPU_CATEGORIES for ev in events)

    def span_us(self) -> tuple[float, float] | None:
        """(first ts, last ts + dur) in µs of the trace's clock, or None without timed events."""
        return (self.first_us, self.last_us) if self.first_us <= self.last_us else None


def _floats(values: list[Any]) -> np.ndarray:
    """Values as float64, NaN where one is not a number (read as the trace reader reads them)."""
    try:
        out = np.array(values, dtype=np.float64)
        if out.ndim == 1:
            return out
    except (TypeError, ValueError, OverflowError):  # strings, objects, integers beyond a double
        pass
    return np.array([as_float(v) for v in values], dtype=np.float64)


class CopyingReader:
    """A binary reader over ``src`` that writes every byte it hands out to ``out``."""

    def __init__(self, src: SupportsRead[bytes], out: SupportsWrite[bytes]) -> None:
        self._src, self._out = src, out

    def read(self, n: int = -1) -> bytes:
        data = self._src.read(n)
        self._out.write(data)
        return data

    def drain(self) -> None:
        """Copy what the consumer left unread (e.g. padding after the gzip stream's end)."""
        shutil.copyfileobj(self._src, self._out, COPY_BYTES)


@contextmanager
def _gzipped_copy(artifact: Artifact, dst: Path) -> Iterator[tuple[io.BufferedIOBase, io.BufferedIOBase]]:
    """(the artifact's bytes, the bundle's new private ``dst``: 0600, never through a link,
    gzipped unless the artifact already is). Raises OSError."""
    dst.parent.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as raw, artifact.path.open("rb") as src, \
            (nullcontext(raw) if artifact.gzipped
             else gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=COMPRESS_LEVEL)) as out:
        yield src, out


def copy_and_skim(artifact: Artifact, dst: Path) -> tuple[TraceSkim, EventStream]:
    """Copy ``artifact`` to ``dst`` (mode 0600), byte for byte when it is gzipped, gzip-compressed
    in chunks when it is not, and stream its events once on the way.

    A JSON document cut short yields the events before the cut (``EventStream.truncated_at_byte``).
    Raises ImportFailed for a truncated or corrupt gzip stream, a read or write error, or a file
    that holds no JSON document.
    """
    skim = TraceSkim()
    try:
        with _gzipped_copy(artifact, dst) as (src, out):
            tee = CopyingReader(src, out)
            with closing(artifact.chunks(tee)) as chunks:
                stream = stream_events(chunks, skim)
            tee.drain()
    except OSError as exc:
        raise ImportFailed(f"cannot copy {artifact.path} to {dst}: {exc.strerror or exc}") from None
    except TraceReadError as exc:
        raise ImportFailed(f"{artifact.path}: {exc}; export the trace again with torch.profiler") from None
    return skim, stream


@dataclass(frozen=True)
class SkimTask:
    """One trace to skim in a worker process (``skim_task``): its path and whether it is gzipped."""

    path: str
    gzipped: bool


@dataclass(frozen=True)
class SkimOutcome:
    """What ``skim_task`` found: the skim and the event stream, or the ImportFailed message."""

    skim: TraceSkim | None
    stream: EventStream | None
    error: str | None = None


def skim_task(task: SkimTask) -> SkimOutcome:
    """Stream the events of ``task.path`` into a TraceSkim without copying it (a worker's half of
    ``copy_and_skim``; the importer copies the bytes afterwards); never raises for a bad file."""
    skim = TraceSkim()
    artifact = Artifact(Path(task.path), task.gzipped, b"", False)
    try:
        with open(task.path, "rb") as src, closing(artifact.chunks(src)) as chunks:
            stream = stream_events(chunks, skim)
    except OSError as exc:
        return SkimOutcome(None, None, f"cannot read {task.path}: {exc.strerror or exc}")
    except TraceReadError as exc:
        return SkimOutcome(None, None, f"{task.path}: {exc}; export the trace again with torch.profiler")
    except ImportFailed as exc:
        return SkimOutcome(None, None, str(exc))
    return SkimOutcome(skim, stream)


def copy_trace(artifact: Artifact, dst: Path, skimmed: SkimOutcome) -> tuple[TraceSkim, EventStream]:
    """``copy_and_skim`` where a worker already skimmed the file (``skim_task``): only the bytes
    are copied here. Raises ImportFailed as copy_and_skim does."""
    if skimmed.error is not None or skimmed.skim is None or skimmed.stream is None:
        raise ImportFailed(skimmed.error or f"{artifact.path}: not skimmed")
    try:
        with _gzipped_copy(artifact, dst) as (src, out):
            shutil.copyfileobj(src, out, COPY_BYTES)
    except OSError as exc:
        raise ImportFailed(f"cannot copy {artifact.path} to {dst}: {exc.strerror or exc}") from None
    return skimmed.skim, skimmed.stream
