"""The performance file: one Markdown file per service with its baseline metrics, its current
bottleneck and layer, and a dated history of changes with their measured effect.

``diagnose baseline BUNDLE --file perf.md`` sets the baseline; ``diagnose compare BASE NEW --record
perf.md [--change TEXT]`` appends a history row and updates the current bottleneck. The file is
regenerated from its state, which it carries at its end in an HTML comment (invisible once
rendered; ``>`` escaped so no value can close the comment). Dates are the captures' own start
times (UTC). Reading is bounded (MAX_BYTES) and refuses anything but a regular file.

The state block is parsed by the json module (no NaN or infinity, integers of at most 30 digits,
nesting bounded by the interpreter's recursion limit) and read into typed rows (PerfState: Snapshot,
HistoryRow, Delta, KeyMetric); a block whose values have the wrong types is refused with msgspec's
word on where (``$.history[2].change``). Fields later versions added have defaults, so an older file
reads; keys this version does not know are ignored (and not written back).
"""
from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, Literal

import msgspec
from msgspec import Struct

from diagnose.compare.diff import Comparison
from diagnose.compare.gain_check import GainCheck
from diagnose.compare.metrics import METRICS
from diagnose.model import Report
from diagnose.render.markdown.gfm import cell, code, text
from diagnose.render.units import bound_words, fmt_value, utc_datetime

VERSION = 1
MAX_BYTES = 4 << 20
MARKER = "<!-- diagnose-performance-file"
_STATE = re.compile(re.escape(MARKER) + r" v(\d{1,6})\n(.*?)\n-->", re.S)
HISTORY_KEYS = ("p50", "p99", "qps", "cpu", "sm")
MAX_HISTORY = 1000  # rows kept (the oldest go first): the file stays far under MAX_BYTES
MAX_CHANGE = 1000  # characters of a --change text kept: 1000 rows of it still fit MAX_BYTES


class PerfFileError(ValueError):
    """The performance file cannot be read or is not one diagnose wrote; the message says which."""


Number = int | float  # as the state block holds it: an int is written back an int


class KeyMetric(Struct, frozen=True, kw_only=True):
    """One key metric of a capture (diagnose/compare/metrics.py METRICS), ``value`` in ``unit``."""

    label: str = "?"
    value: Number | None = None  # None: not finite when written
    unit: str = ""


class Snapshot(Struct, frozen=True, kw_only=True):
    """What the file keeps of one capture: when (its start, UTC), where, its verdict and key metrics."""

    captured: str  # "YYYY-MM-DD HH:MM:SS UTC", "?" when the bundle has no start time
    bundle: str = "?"
    quadrant: str = "unknown"  # a Quadrant value
    layer: str | None = None  # a Layer value
    headline: str = ""
    confidence: Number | None = None
    metrics: dict[str, KeyMetric] = {}  # by METRICS key


class Delta(Struct, frozen=True, kw_only=True):
    """One metric's change in a comparison (diagnose/compare/diff.py MetricDelta): ``delta`` in
    ``unit``, ``delta_pct`` of the base value; ``significant`` None: noise unknown."""

    delta_pct: Number | None = None
    delta: Number | None = None  # older files: absent
    unit: str = ""  # older files: absent
    significant: bool | None = None
    direction: str = "unknown"  # worse, better, neutral, within noise, too few, unknown


class GainRow(Struct, frozen=True, kw_only=True):
    """A comparison's predicted gain (BASE's, for the remedy the change names) and the measured one
    (diagnose/compare/gain_check.py): ratios NEW/BASE of ``metric`` (throughput or p50)."""

    remedy: str = ""
    metric: str | None = None
    predicted_low: Number | None = None
    predicted_high: Number | None = None
    measured: Number | None = None
    noise: Number | None = None  # relative noise band of the measured ratio
    outcome: str = "cannot tell"  # held, beat, fell short, cannot tell

    def cell(self) -> str:
        lo, hi, m = _finite(self.predicted_low), _finite(self.predicted_high), _finite(self.measured)
        pred = f"{min(lo, hi):.2f}-{max(lo, hi):.2f}x" if lo is not None and hi is not None else "-"  # hand-edited
        got = f"{m:.2f}x" if m is not None else "-"
        return f"{self.metric or 'gain'}: predicted {pred}, measured {got} ({self.outcome})"


def gain_row(g: GainCheck | None) -> GainRow | None:
    if g is None:
        return None
    band = g.band
    return GainRow(remedy=(g.predicted.remedy if g.predicted else "")[:MAX_CHANGE], metric=g.metric,
                   predicted_low=band.low if band else None, predicted_high=band.high if band else None,
                   measured=g.measured, noise=g.noise, outcome=g.outcome)


class HistoryRow(Struct, frozen=True, kw_only=True):
    """One row of the history: a baseline set, or a comparison recorded against the capture
    ``against`` (the BASE of ``compare BASE NEW``; None in baseline rows, which leave it out)."""

    captured: str
    change: str = ""
    bundle: str = "?"
    against: str | None = None
    verdict: str = ""
    deltas: dict[str, Delta] = {}  # by HISTORY_KEYS
    gate: Literal["pass", "fail"] | None = None  # None: no --fail-on
    findings: list[str] = []  # "appeared: TITLE (rule id)", "disappeared: ..."
    gain: GainRow | None = None  # the change's predicted gain against the measured one (compare --change)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.to_builtins(self)
        for key in ("against", "gain"):  # absent in baseline rows / comparisons without --change
            if out[key] is None:
                del out[key]
        return out


class PerfState(Struct, frozen=True):
    """The file's state: what it is regenerated from, kept in its state block."""

    service: str
    baseline: Snapshot | None = None
    current: Snapshot | None = None  # the newest capture on record
    history: tuple[HistoryRow, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"service": self.service, "baseline": _builtins(self.baseline), "current": _builtins(self.current),
                "history": [h.to_json() for h in self.history]}


def _builtins(snap: Snapshot | None) -> dict[str, Any] | None:
    out: dict[str, Any] | None = msgspec.to_builtins(snap)
    return out


def read_state(path: Path) -> PerfState | None:
    """The state in ``path``; None when there is no file. Raises PerfFileError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PerfFileError(f"cannot read {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise PerfFileError(f"{path} is not a regular file")
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise PerfFileError(f"{path} is larger than {MAX_BYTES >> 20} MiB: not a performance file")
    m = _STATE.search(data.decode("utf-8", errors="replace"))
    if not m:
        raise PerfFileError(f"{path} exists but was not written by diagnose (no state block): "
                            "choose another --file or --record path")
    if int(m.group(1)) != VERSION:
        raise PerfFileError(f"{path} is a version {m.group(1)} performance file; this diagnose reads {VERSION}")
    try:
        doc = json.loads(m.group(2), parse_constant=_no_constant, parse_int=_bounded_int)
    except (ValueError, RecursionError) as exc:
        raise PerfFileError(f"{path}: its state block is not valid JSON ({str(exc)[:120]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("service"), str):
        raise PerfFileError(f"{path}: its state block has no service name")
    try:
        state = msgspec.convert(doc, PerfState)
    except msgspec.ValidationError as exc:  # says where: "Expected `str`, got `int` - at `$.history[2].change`"
        raise PerfFileError(f"{path}: its state block is not one diagnose wrote ({str(exc)[:200]})") from None
    return msgspec.structs.replace(state, service=state.service[:200])


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number this file holds")


def _bounded_int(text: str) -> int:
    if len(text) > 30:
        raise ValueError("an integer of more than 30 digits")
    return int(text)


def snapshot(r: Report) -> Snapshot:
    """What the file keeps of one capture: when, where, its verdict and key metric values."""
    v = r.analysis.verdict
    metrics = {}
    for m in METRICS:
        s = r.analysis.signals.get(m.signal)
        if s is not None and s.value is not None:
            metrics[m.key] = KeyMetric(label=m.label, value=s.value, unit=m.unit)
    return Snapshot(captured=utc_datetime(r.bundle.typed_manifest.started_ns), bundle=str(r.bundle.path),
                    quadrant=v.quadrant.value, layer=v.layer.value if v.layer else None, headline=v.headline,
                    confidence=v.confidence, metrics=metrics)


def _newest(*snaps: Snapshot | None) -> Snapshot:
    """The latest captured of ``snaps`` (a tie: the first)."""
    return max((s for s in snaps if s), key=lambda s: s.captured)


def set_baseline(state: PerfState | None, r: Report, service: str | None) -> PerfState:
    name = service or (state.service if state else None) or _service_name(r)
    snap = snapshot(r)
    row = HistoryRow(captured=snap.captured, change="baseline set", bundle=snap.bundle, verdict=_verdict(snap))
    hist = (*(state.history if state else ()), row)[-MAX_HISTORY:]  # a file diagnose writes stays one it reads
    return PerfState(name, snap, _newest(snap, state.current if state else None), hist)


def record(state: PerfState | None, base: Report, new: Report, comp: Comparison, change: str | None,
           gate_failed: bool | None, gain: GainCheck | None = None) -> PerfState:
    """Append ``comp`` as a history row (the file starts with ``base`` as its baseline)."""
    st = state or set_baseline(None, base, None)
    snap = snapshot(new)
    deltas = {m.key: Delta(delta_pct=m.delta_pct, delta=m.delta, unit=m.unit, significant=m.significant,
                           direction=m.direction)
              for m in comp.metrics if m.key in HISTORY_KEYS and m.delta is not None}
    if change is not None and len(change) > MAX_CHANGE:
        change = change[:MAX_CHANGE - 1] + "…"
    row = HistoryRow(captured=snap.captured, change=change or "(not described: pass --change TEXT)",
                     bundle=snap.bundle, against=snapshot(base).captured, verdict=_verdict(snap), deltas=deltas,
                     gate=None if gate_failed is None else ("fail" if gate_failed else "pass"),
                     findings=list(dict.fromkeys(f"{f.change}: {f.title} ({f.rule_id})" for f in comp.findings
                                                 if f.change != "kept")), gain=gain_row(gain))
    history = tuple(sorted([*st.history, row], key=lambda h: h.captured))[-MAX_HISTORY:]
    # the current bottleneck is the newest capture on record, whichever order they were compared in
    return PerfState(st.service, st.baseline, _newest(snap, st.current), history)


def service_name(r: Report) -> str:
    """The service's name as the file records it: the target's script (or its process name)."""
    return _service_name(r)


def _service_name(r: Report) -> str:
    t = r.bundle.info.target
    script = next((os.path.basename(a) for a in t.cmdline[1:] if not a.startswith("-")), None)
    return script or t.name or "service"


def _verdict(snap: Snapshot) -> str:
    """As the report's first line says it: "Service-bound, system layer", "No load"."""
    q, layer = snap.quadrant, snap.layer
    if q in ("no_load", "unknown"):
        return "No load" if q == "no_load" else "No verdict"
    return bound_words(q) + (f", {layer} layer" if layer else "")


def _finite(v: Number | None) -> float | None:
    """A number the file may show: finite and below 1e18 (anything larger is no measurement)."""
    try:
        f = float(v) if v is not None else None
    except OverflowError:  # an int past float's range
        return None
    return f if f is not None and math.isfinite(f) and abs(f) < 1e18 else None


def _metric_rows(snap: Snapshot) -> list[str]:
    rows = [f"| {cell(m.label)} | {cell(fmt_value(v, m.unit))} |"
            for m in snap.metrics.values() if (v := _finite(m.value)) is not None]
    return ["| metric | value |", "|---|---|", *rows, ""] if rows else ["No key metric was measured.", ""]


def _delta_cell(d: Delta | None) -> str:
    pct = _finite(d.delta_pct) if d is not None else None
    if d is None or pct is None:
        return "-"
    mark = {True: "", False: " (noise)", None: " (noise unknown)"}[d.significant]
    delta = _finite(d.delta)
    if d.unit == "%" and delta is not None:  # a change of a percentage
        return f"{delta:+.1f} pp{mark}"
    return f"{pct:+.1f}%{mark}"


def _json_safe(v: Any) -> Any:
    """The state as JSON can hold it: non-finite floats as null (the types bound the nesting)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_json_safe(x) for x in v]
    return v


def _history_row(h: HistoryRow) -> str:
    cells = [cell(h.captured), cell(h.against or "-"), cell(h.change), cell(h.verdict)]
    cells += [_delta_cell(h.deltas.get(k)) for k in HISTORY_KEYS]
    cells += [cell(h.gain.cell() if h.gain else "-"), cell(h.gate or "-"),
              cell("; ".join(h.findings) if h.findings else "-")]
    return "| " + " | ".join(cells) + " |"


def render(state: PerfState) -> str:
    """The whole file, state block included; the oldest history rows go until it fits MAX_BYTES (what
    diagnose writes, it reads again)."""
    out = _render(state)
    while len(out.encode("utf-8", errors="backslashreplace")) > MAX_BYTES and state.history:
        state = msgspec.structs.replace(state, history=state.history[max(1, len(state.history) // 10):])
        out = _render(state)
    return out


def _render(state: PerfState) -> str:
    out = [f"# Performance file: {text(state.service)}", "",
           "Written by diagnose (`diagnose baseline`, `diagnose compare --record`); it is regenerated each "
           "time, so edits are lost. The method: measure before changing anything, change one layer at a "
           "time, measure again, and record the effect here.", ""]
    cur = state.current
    if cur:
        conf = _finite(cur.confidence)
        conf_s = f" (confidence {conf:.2f})" if conf is not None else ""
        out += ["## Current bottleneck", "", f"**{text(_verdict(cur))}**{conf_s}, "
                f"captured {text(cur.captured)}: {text(cur.headline)}", "",
                f"Bundle: {code(cur.bundle)}", ""]
    base = state.baseline
    if base:
        out += ["## Baseline", "", f"Captured {text(base.captured)}, bundle {code(base.bundle)}; "
                f"verdict {text(_verdict(base))}.", ""] + _metric_rows(base)
    out += ["## History", "", "| captured | against | change | verdict | " + " | ".join(HISTORY_KEYS)
            + " | predicted vs measured | gate | findings |", "|" + "---|" * (len(HISTORY_KEYS) + 7)]
    out += [_history_row(h) for h in sorted(state.history, key=lambda h: h.captured)]
    out += ["", "In capture time order; each row's changes are against the capture it was compared with (the "
            "BASE of `compare BASE NEW`, captured at \"against\"); \"-\": not measured in both (latency and QPS "
            "need stage spans); "
            "\"(noise)\": within the captures' own run-to-run noise; pp: percentage points."]
    blob = json.dumps(_json_safe(state.to_json()), indent=1, allow_nan=False).replace(">", "\\u003e")
    return "\n".join(out) + f"\n\n{MARKER} v{VERSION}\n{blob}\n-->\n"


__all__ = ["Delta", "GainRow", "HistoryRow", "KeyMetric", "PerfFileError", "PerfState", "Snapshot", "read_state",
           "record", "render", "set_baseline", "snapshot"]
