"""read_trace(path) -> KinetoTrace: a torch profiler (Kineto) Chrome trace as numpy columns.

The events come from stream.py (gzip inflated by chunks, events cut between their boundaries and
decoded into typed structs, a tolerant path for the ones orjson rejects); a small, strictly valid
document is parsed in one call instead. Only the columns the analyzers read are kept (columns.py,
store.py). Peak memory: a few chunks plus the columns (~60-90 bytes per kept event), independent of
the document's object graph.

Timestamps: Kineto writes µs floats (ns resolution in the fraction); with ``baseTimeNanoseconds``
the Unix time is ``baseTimeNanoseconds + ts·1000``, without it ``ts`` is already Unix µs.
"""
from __future__ import annotations

import errno
import os
import stat
import zlib
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import numpy as np
import orjson

from diagnose.bundle.files import file_kind
from diagnose.bundle.records.base import lenient
from diagnose.traces.columns import ColumnBuilder, as_int
from diagnose.traces.devices import DeviceProps, device_props
from diagnose.traces.scan import ScanState
from diagnose.traces.schema import Table
from diagnose.traces.stream import TraceReadError, feed_events, inflate_chunks, skeleton_metadata
from diagnose.traces.tolerant import Damage, Tally
from diagnose.traces.typed import decode_document

WHOLE_DOC_BYTES = 4 << 20  # a document this small is parsed in one call (fixed costs dominate)
_GZIP_MAGIC = b"\x1f\x8b"
MIN_UNIX_US = 1e14  # ~1973: smaller timestamps without a base time are not on the Unix clock
MIN_PLAUSIBLE_NS = 946_684_800 * 10**9  # 2000-01-01: a base time or a trace's placement before
MAX_PLAUSIBLE_NS = 4_102_444_800 * 10**9  # 2100-01-01 (or after) is not a Unix time in ns
MAX_TS_US = MAX_PLAUSIBLE_NS / 1000  # |ts| beyond this (µs) is no time on any clock a trace may use


def plausible_ns(value: Any) -> bool:
    """Whether ``value`` is an int (not a bool) Unix time in ns between 2000 and 2100."""
    return type(value) is int and MIN_PLAUSIBLE_NS <= value < MAX_PLAUSIBLE_NS


def base_time_ns(value: Any) -> int | None:
    """A document's ``baseTimeNanoseconds`` when it is a plausible Unix time in ns, else None."""
    return value if plausible_ns(value) else None


@dataclass(frozen=True)
class TraceMeta:
    """Trace-level facts from the document's metadata (``distributedInfo``, ``deviceProperties``)."""

    rank: int | None
    world_size: int | None
    schema_version: int | None
    base_time_ns: int | None
    devices: tuple[str, ...]
    backend: str | None
    unix_clock: bool  # False when timestamps could not be placed on the Unix clock
    device_props: tuple[DeviceProps, ...] = ()  # the same devices with the facts that identify a model


@dataclass(frozen=True)
class ReadReport:
    """How reading went: counts, repairs, and where a truncated file stopped."""

    bytes_read: int
    events: int
    kept: int
    flows: int
    invalid: int
    skipped: int
    repaired: int
    unparsable: int
    truncated_at_byte: int | None
    error: str | None
    metadata_dropped_bytes: int = 0
    ignored_after: int = 0  # non-blank bytes after the document's root value (a second document)
    damage: Damage = Damage()  # where the dropped events were, backslashes repaired
    profiler_ranges: int = 0  # CUPTI range-profiler events (kernels replayed under counters): not analysed

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "damage": self.damage.to_json()}


@dataclass(frozen=True)
class KinetoTrace:
    """A trace as columns, sorted by start: ``gpu`` (kernels, memcpy, memset, stream syncs),
    ``runtime`` (cuda*/hip* host calls), ``cpu`` (torch ops and record_function labels). Times
    are Unix ns (``start_ns``, ``dur_ns``, ``end_ns``); flows have ``t_ns``."""

    path: str
    meta: TraceMeta
    report: ReadReport
    names: tuple[str, ...]
    gpu: Table
    runtime: Table
    cpu: Table
    flows: Table
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    process_names: dict[int, str] = field(default_factory=dict)


class _Distributed(msgspec.Struct, frozen=True):
    """``distributedInfo``: the ids as the trace writes them (as_int reads "rank 3" and 3.0 too)."""

    rank: int | float | str | None = None
    world_size: int | float | str | None = None
    backend: str | None = None


class _Header(msgspec.Struct, frozen=True, rename="camel"):
    """The document's metadata beside ``traceEvents`` (``distributedInfo``, ``baseTimeNanoseconds``...),
    each field read leniently; the times and device rows are checked by their own readers."""

    distributed_info: _Distributed = _Distributed()
    base_time_nanoseconds: Any = None
    device_properties: Any = None
    schema_version: int | None = None


def _meta(doc: dict[str, Any], base_override: int | None, first_ts_us: float | None) -> TraceMeta:
    head = lenient(_Header, doc) or _Header()
    dist = head.distributed_info
    rank, ws = as_int(dist.rank, -1), as_int(dist.world_size, -1)
    base = base_time_ns(head.base_time_nanoseconds)
    base = base if base is not None else base_time_ns(base_override)
    props = device_props(head.device_properties)
    devices = tuple(d.name for d in props)
    unix = base is not None or (first_ts_us is not None and first_ts_us >= MIN_UNIX_US)
    return TraceMeta(rank if rank >= 0 else None, ws if ws > 0 else None, head.schema_version, base, devices,
                     dist.backend, unix, props)


def _in_range(table: Table, tally: Tally) -> Table:
    """The rows whose ts (and ts + dur) no clock could hold (|t| > MAX_TS_US, past year 2100 even
    as Unix µs) dropped and counted: in ns they would overflow int64 and wreck every span."""
    if not len(table):
        return table
    ts = table["ts"]
    ok = np.abs(ts) <= MAX_TS_US
    if "dur" in table.columns:
        ok &= np.abs(ts + table["dur"]) <= MAX_TS_US
    if ok.all():
        return table
    tally.out_of_range += int(len(ok) - ok.sum())
    return table.take(ok)


def _to_ns(table: Table, base_ns: int) -> Table:
    """Replace µs float columns by int64 Unix ns (start_ns, dur_ns, end_ns; flows: t_ns), rows
    sorted by start. Works column by column to keep peak memory near the table's size."""
    cols = table.columns
    ts = cols.pop("ts")
    whole = np.floor(ts)  # split: Unix µs (~1.7e15) times 1000 would not fit a double exactly
    ts -= whole
    ts *= 1000.0
    start = whole.astype(np.int64)
    del whole
    start *= 1000
    start += np.rint(ts).astype(np.int64)
    start += base_ns
    del ts
    order = np.argsort(start, kind="stable")
    if "dur" in cols:
        dur = np.rint(cols.pop("dur") * 1000.0).astype(np.int64)
        cols.update(start_ns=start, dur_ns=dur, end_ns=start + dur)
    else:
        cols["t_ns"] = start
    for k in list(cols):
        cols[k] = cols[k][order]
    return Table(cols)


def _head(chunks: Iterator[bytes]) -> tuple[list[bytes], Iterator[bytes] | None, Exception | None]:
    """The first chunks, up to WHOLE_DOC_BYTES: (chunks, the rest or None at the end, the
    EOFError/zlib.error that ended them early)."""
    head: list[bytes] = []
    size = 0
    try:
        for data in chunks:
            head.append(data)
            size += len(data)
            if size > WHOLE_DOC_BYTES:
                return head, chunks, None
    except (EOFError, zlib.error) as exc:
        return head, None, exc
    return head, None, None


def _replay(head: list[bytes], rest: Iterator[bytes] | None, failure: Exception | None) -> Iterator[bytes]:
    yield from head
    if failure is not None:
        raise failure
    if rest is not None:
        yield from rest


def _whole_document(head: list[bytes], builder: ColumnBuilder) -> dict[str, Any] | None:
    """A small, strictly valid trace parsed in one call (no structural scan): msgspec straight into
    typed events, or orjson dicts when an event does not fit them; returns the metadata beside the
    events, or None when it is not one (odd content, no events array): the streaming path then reads it."""
    data = b"".join(head)
    if data.count(b'"traceEvents"') != 1:  # a key twice: orjson keeps the last, streaming reads both
        return None
    typed = decode_document(data)  # the events straight into their structs (typed.py), else orjson dicts
    if typed is not None:
        builder.add_typed(typed.trace_events)
        return typed.header()
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return None
    builder.add_batch(doc.pop("traceEvents"))
    return doc


def _open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading: no symlink at its last component, never blocking (a FIFO),
    a regular file by fstat of the opened descriptor. Raises TraceReadError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        why = "a symlink (not followed)" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
        raise TraceReadError(f"cannot open {path}: {why}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise TraceReadError(f"cannot open {path}: {file_kind(mode)}, not a regular file")
    return os.fdopen(fd, "rb")


def read_trace(path: Path | str, base_time_ns: int | None = None, fh: BinaryIO | None = None) -> KinetoTrace:
    """Read a Kineto/Chrome trace (``.json`` or gzipped, detected by content).

    ``base_time_ns``: the clock base from the bundle's TORCH index record when the trace has none.
    ``fh``: the file already open (e.g. by descriptor below a bundle; it is read from its start
    and not closed), else ``path`` is opened (regular files only, no symlink as its last part).
    Raises TraceReadError when the file cannot be opened or holds no JSON document at all; a
    truncated or partly malformed file is read as far as it goes (see ``report``).
    """
    path = Path(path)
    builder, st = ColumnBuilder(), ScanState()
    tally = Tally()
    with nullcontext(fh) if fh is not None else _open_regular(path) as fh:
        gz = fh.read(2) == _GZIP_MAGIC
        fh.seek(0)
        chunks = inflate_chunks(fh, gz)
        head, rest, failure = _head(chunks)
        doc = _whole_document(head, builder) if rest is None and failure is None else None
        if doc is None:
            truncated, error = feed_events(_replay(head, rest, failure), builder, st, tally)
        else:
            truncated, error, st.offset = None, None, sum(map(len, head))
    if doc is None:
        if st.root is None:
            raise TraceReadError(f"{path} holds no JSON document" + (f" ({error})" if error else ""))
        doc = skeleton_metadata(bytes(st.skeleton))
        if not st.events_seen:
            error = error or "no traceEvents array: not a Chrome/Kineto trace"
    parts, flows = builder.partitions(), builder.flows()
    parts = {k: _in_range(t, tally) for k, t in parts.items()}
    kept_out = tally.out_of_range
    flows = _in_range(flows, tally)
    flows_out = tally.out_of_range - kept_out
    firsts = [float(t["ts"].min()) for t in parts.values() if len(t)]
    meta = _meta(doc, base_time_ns, min(firsts) if firsts else None)
    base = meta.base_time_ns or 0
    c = builder.counts
    report = ReadReport(st.offset, c["events"], c["kept"] - kept_out, c["flows"] - flows_out,
                        c["invalid"] + tally.out_of_range, c["skipped"],
                        tally.repaired, tally.unparsable, truncated, error, st.skeleton_dropped,
                        st.ignored_after, tally.damage(), c["profiler_ranges"])
    return KinetoTrace(str(path), meta, report, builder.name_table(), _to_ns(parts["gpu"], base),
                       _to_ns(parts["runtime"], base), _to_ns(parts["cpu"], base), _to_ns(flows, base),
                       builder.thread_names, builder.process_names)


__all__ = ["KinetoTrace", "ReadReport", "TraceMeta", "TraceReadError", "read_trace"]
