"""Columnar event tables built from parsed Kineto events, one batch at a time.

Only what the analyzers read is kept: per complete ("X") event its category, interned name,
pid/tid, start and duration (ns), the CPU-GPU correlation id, the op's External id, the GPU
device/stream, FLOPs and bytes where the trace has them; flow events (ac2g and the older
async_cpu_to_gpu/async launch flows) and thread/process names. Everything else (python_function
events, instant events, unused args) is counted and dropped.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np

from diagnose.traces.flops import FLOP_OPS, op_flops_bytes
from diagnose.traces.op_args import batch_dim, precision_code
from diagnose.traces.schema import (
    CAT_CODE,
    CAT_CPU_OP,
    CAT_KERNEL,
    CAT_SYNC,
    DEVICE_WAIT_NAMES,
    EVENT_COLUMNS,
    FLOW_CATS,
    FLOW_COLUMNS,
    FLOW_END,
    FLOW_START,
    GPU_CATS,
    PROFILER_RANGE_CATS,
    Table,
)
from diagnose.traces.store import GrowingTable, PartitionedStore
from diagnose.traces.typed import NO_ARGS, Args, Event, decode_events, events_of

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_NAN = math.nan
_PH_ATTR = attrgetter("ph")
_FLOPS_ATTR = attrgetter("flops")
_COLL_ATTR, _PG_ATTR = attrgetter("collective"), attrgetter("pg_name")
_SEQ_ATTR, _SEQ_LOWER_ATTR = attrgetter("seq"), attrgetter("seq_lower")
_DEVICE_WAIT_RX = re.compile(DEVICE_WAIT_NAMES)
_X_KEYS = ("cat", "name", "pid", "tid", "ts", "dur", "args")
# column, typed.Args attribute (its default where the trace has no such arg)
_ARG_COLUMNS = (("correlation", "correlation"), ("external_id", "external_id"), ("stream", "stream"),
                ("device", "device"), ("bytes", "bytes"))

def as_int(value: Any, default: int = -1) -> int:
    """An int64 id from a JSON value; strings like "stream 7" yield their number; else default."""
    if type(value) is int:
        return value if _INT64_MIN <= value <= _INT64_MAX else default
    if isinstance(value, float) and math.isfinite(value) and _INT64_MIN <= value < _INT64_MAX:
        return int(value)
    if isinstance(value, str):
        digits = "".join(ch for ch in value if ch.isdigit())
        return int(digits) if digits and len(digits) < 19 else default
    return default


def as_float(value: Any) -> float:
    """A finite float, or NaN for anything else (bare inf/NaN, strings, null, huge integers)."""
    if type(value) is int or type(value) is float:
        try:
            f = float(value)
        except OverflowError:  # an integer beyond a double (read by the tolerant parser)
            return math.nan
        return f if math.isfinite(f) else math.nan
    if isinstance(value, str):
        try:
            f = float(value)
        except ValueError:
            return math.nan
        return f if math.isfinite(f) else math.nan
    return math.nan


NAME_MAX_CHARS = 4096  # the longest real kernel names (CUTLASS templates) are ~2,000 characters


def clean_name(value: Any) -> str:
    """Names as text, at most NAME_MAX_CHARS (longer ones end in "…"), with control characters
    (invalid in JSON strings) replaced."""
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    if len(text) > NAME_MAX_CHARS:
        text = text[:NAME_MAX_CHARS - 1] + "…"
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else "\ufffd" for ch in text)


@dataclass
class ColumnBuilder:
    """Accumulates events batch by batch; each batch becomes numpy arrays right away."""

    names: dict[str, int] = field(default_factory=dict)  # raw or cleaned name -> id
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    process_names: dict[int, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: {
        "events": 0, "kept": 0, "flows": 0, "invalid": 0, "skipped": 0, "profiler_ranges": 0})
    wait_ids: set[int] = field(default_factory=set)  # name ids of device-track waits (DEVICE_WAIT_NAMES)
    labels: list[str] = field(default_factory=list)  # name id -> text
    store: PartitionedStore = field(default_factory=PartitionedStore)
    flow_store: GrowingTable = field(default_factory=lambda: GrowingTable(FLOW_COLUMNS))

    def add_batch(self, events: list[Any]) -> None:
        """Append one parsed batch (orjson dicts): typed as the JSON decoder types them
        (typed.events_of); a value that is not an object is counted invalid."""
        typed = events_of(events)
        self.counts["events"] += len(events)
        self.counts["invalid"] += len(events) - len(typed)
        self._add_events(typed)

    def add_json_array(self, body: bytes) -> bool:
        """Append the events of the JSON array ``body``, decoded into typed structs (typed.py);
        False, with nothing added, when it does not decode that way (use ``add_batch``)."""
        events = decode_events(body)
        if events is None:
            return False
        self.add_typed(events)
        return True

    def add_typed(self, events: list[Event]) -> None:
        """Append events already typed (typed.py)."""
        self.counts["events"] += len(events)
        self._add_events(events)

    def _add_events(self, events: list[Event]) -> None:
        """Columns are gathered with C-level attrgetter maps (the hot path) and validated in numpy;
        odd values (strings, huge ints, null) fall back per value."""
        xs, flows, meta = _by_phase(events, list(map(_PH_ATTR, events)))
        for e in meta:
            self._add_metadata(e)
        self.counts["skipped"] += len(events) - len(xs) - len(flows) - len(meta)
        if xs:
            fields = tuple(list(map(attrgetter(k), xs)) for k in _X_KEYS)
            self._add_complete(fields[:6], [NO_ARGS if a is None else a for a in fields[6]])
        if flows:
            self._add_flows(tuple(list(map(attrgetter(k), flows)) for k in ("id", "ph", "pid", "tid", "ts", "cat")))

    def _add_complete(self, fields: tuple[list[Any], ...], args: list[Args]) -> None:
        """Complete events from their columns (cat, name, pid, tid, ts, dur) and their ``args``."""
        fields = fields + (args,)
        cats = _lookup(CAT_CODE, fields[0])
        if None in cats:  # categories nobody reads (python_function, Trace, ...): dropped here
            self.counts["profiler_ranges"] += sum(1 for c, raw in zip(cats, fields[0]) if c is None
                                                  and raw.__class__ is str and raw in PROFILER_RANGE_CATS)
            idx = [i for i, c in enumerate(cats) if c is not None]
            self.counts["skipped"] += len(cats) - len(idx)
            if not idx:
                return
            fields = tuple([col[i] for i in idx] for col in fields)
            cats = [cats[i] for i in idx]
        _, raw, pid, tid, ts, dur, arg_col = fields
        nids = self._name_ids(list(raw))
        if self.wait_ids:  # a device track's own waits are sync events, not busy time
            waits = self.wait_ids
            cats = [CAT_SYNC if c == CAT_KERNEL and n in waits else c for c, n in zip(cats, nids)]
        rows: dict[str, Any] = {
            "cat": cats, "name": nids, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            **{col: list(map(attrgetter(attr), arg_col)) for col, attr in _ARG_COLUMNS},
            "flops": [_NAN] * len(cats), "precision": [0] * len(cats), "batch": [-1] * len(cats),
            **self._collective_rows(arg_col),
        }
        with_formula = {self.names[n] for n in FLOP_OPS if n in self.names}
        ops = {i for i, n in enumerate(nids) if n in with_formula}
        ops.update(i for i, f in enumerate(map(_FLOPS_ATTR, arg_col)) if f is not None)  # ops that carry a flops arg
        for i in sorted(i for i in ops if cats[i] == CAT_CPU_OP):
            a = arg_col[i]
            if a.input_dims is None and a.flops is None:  # nothing to count from
                rows["bytes"][i] = _NAN
                continue
            op = a.op_args()
            rows["flops"][i], rows["bytes"][i] = op_flops_bytes(self.labels[nids[i]], op)
            rows["precision"][i] = precision_code(op)
            rows["batch"][i] = batch_dim(self.labels[nids[i]], op)
        self.store.append(_validated_events(rows, self.counts))

    def _collective_rows(self, arg_col: list[Args]) -> dict[str, list[Any]]:
        """``coll``/``pg`` (name ids of the args "Collective name" and "Process Group Name", -1
        where absent) and ``seq`` (arg "Seq" or "seq", -1 where absent) of one batch."""
        coll, pg = list(map(_COLL_ATTR, arg_col)), list(map(_PG_ATTR, arg_col))
        n = len(arg_col)
        if coll.count(None) == n:  # the usual batch: no collective in it
            return {"coll": [-1] * n, "pg": [-1] * n, "seq": [-1] * n}
        seq = [a if a is not None else b for a, b in zip(map(_SEQ_ATTR, arg_col), map(_SEQ_LOWER_ATTR, arg_col))]
        return {"coll": [-1 if v is None else self._intern(v) for v in coll],
                "pg": [-1 if v is None else self._intern(v) for v in pg],
                "seq": [-1 if v is None else as_int(v) for v in seq]}

    def _name_ids(self, raw: list[Any]) -> list[int]:
        ids = _lookup(self.names, raw)
        get = self.names.get
        for i in [i for i, v in enumerate(ids) if v is None]:
            # a name new to this batch repeats in it: the first occurrence interns it
            nid = get(raw[i]) if raw[i].__class__ is str else None
            ids[i] = self._intern(raw[i]) if nid is None else nid
        return ids  # type: ignore[return-value]

    def _add_flows(self, fields: tuple[list[Any], ...]) -> None:
        """Flow events from their columns (id, ph, pid, tid, ts, cat)."""
        kinds = _lookup(FLOW_CATS, fields[5])
        keep = [i for i, k in enumerate(kinds) if k is not None]
        self.counts["skipped"] += len(kinds) - len(keep)
        if not keep:
            return
        if len(keep) < len(kinds):
            fields = tuple([col[i] for i in keep] for col in fields)
        fid, ph, pid, tid, ts, _ = fields
        rows = {"id": fid, "phase": [FLOW_START if p == "s" else FLOW_END for p in ph],
                "kind": [k for k in kinds if k is not None], "pid": pid, "tid": tid, "ts": ts}
        self.flow_store.append(_validated_flows(rows, self.counts))

    def _intern(self, name: Any) -> int:
        """Id of a name not seen before (or not a string); control characters are replaced."""
        text = clean_name(name)
        nid = self.names.get(text)
        if nid is None:
            nid = self.names[text] = len(self.labels)
            self.labels.append(text)
            if _DEVICE_WAIT_RX.match(text):
                self.wait_ids.add(nid)
        if name.__class__ is str:
            self.names[name] = nid
        return nid

    def _add_metadata(self, ev: Event) -> None:
        label = clean_name(ev.args.name if ev.args is not None else None)
        if ev.name == "thread_name":
            self.thread_names[(as_int(ev.pid), as_int(ev.tid))] = label
        elif ev.name == "process_name":
            self.process_names[as_int(ev.pid)] = label

    def partitions(self) -> dict[str, Table]:
        """gpu / runtime / cpu tables (trace µs columns ``ts``/``dur``), in file order."""
        self.counts["skipped"] += self.store.dropped
        self.counts["kept"] -= self.store.dropped
        return self.store.finish()

    def flows(self) -> Table:
        return self.flow_store.finish()

    def name_table(self) -> tuple[str, ...]:
        return tuple(self.labels)


def _by_phase(events: list[Any], phs: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """Complete ("X"), flow ("s"/"f") and metadata ("M") events; the rest is not read."""
    return ([e for e, ph in zip(events, phs) if ph == "X"],
            [e for e, ph in zip(events, phs) if ph == "s" or ph == "f"],
            [e for e, ph in zip(events, phs) if ph == "M"])


def _lookup(table: dict[Any, int], keys: list[Any]) -> list[int | None]:
    """``table.get`` over keys; unhashable keys (a list where a string belongs) give None."""
    get = table.get
    try:
        return [get(k) for k in keys]
    except TypeError:
        return [get(k) if k.__class__ is str else None for k in keys]


def _int_column(values: list[Any]) -> np.ndarray:
    """int64 ids; values numpy cannot take (strings like "stream 7", huge ints, null) one by one."""
    try:
        out = np.asarray(values, dtype=np.int64)
        if out.ndim == 1:  # a column of lists ([7] for a tid) would be 2-D: read it value by value
            return out
    except (OverflowError, ValueError, TypeError):
        pass
    return np.fromiter((as_int(v) for v in values), np.int64, len(values))


def _float_column(values: list[Any]) -> np.ndarray:
    """float64 with NaN for anything that is not a finite number."""
    try:
        out = np.asarray(values, dtype=np.float64)
    except (OverflowError, ValueError, TypeError):
        out = None
    if out is None or out.ndim != 1:
        out = np.fromiter((as_float(v) for v in values), np.float64, len(values))
    out[~np.isfinite(out)] = np.nan
    return out


def _validated_events(rows: dict[str, list], counts: dict[str, int]) -> dict[str, np.ndarray]:
    cols = {k: (_float_column(v) if EVENT_COLUMNS[k] is np.float64 else _int_column(v)).astype(
        EVENT_COLUMNS[k], copy=False) for k, v in rows.items()}
    gpu = np.isin(cols["cat"], GPU_CATS)
    cols["stream"] = np.where(gpu & (cols["stream"] < 0), cols["tid"], cols["stream"])
    cols["device"] = np.where(gpu & (cols["device"] < 0), cols["pid"], cols["device"])
    ok = np.isfinite(cols["ts"]) & np.isfinite(cols["dur"]) & (cols["dur"] >= 0)
    bad = int(len(ok) - ok.sum())
    counts["invalid"] += bad
    counts["kept"] += len(ok) - bad
    return {k: v[ok] for k, v in cols.items()} if bad else cols


def _validated_flows(rows: dict[str, list], counts: dict[str, int]) -> dict[str, np.ndarray]:
    cols = {k: (_float_column(v) if FLOW_COLUMNS[k] is np.float64 else _int_column(v)).astype(
        FLOW_COLUMNS[k], copy=False) for k, v in rows.items()}
    ok = np.isfinite(cols["ts"])
    counts["flows"] += int(ok.sum())
    counts["invalid"] += int(len(ok) - ok.sum())
    return {k: v[ok] for k, v in cols.items()}


__all__ = ["ColumnBuilder", "as_float", "as_int"]
