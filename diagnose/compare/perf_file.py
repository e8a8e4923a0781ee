"""The performance file: one Markdown file per service with its baseline metrics, its current
bottleneck and layer, and a dated history of changes with their measured effect.

``diagnose baseline BUNDLE --file perf.md`` sets the baseline; ``diagnose compare BASE NEW --record
perf.md [--change TEXT]`` appends a history row and updates the current bottleneck. The file is
regenerated from its state, which it carries at its end in an HTML comment (invisible once
rendered; ``>`` escaped so no value can close the comment). Dates are the captures' own start
times (UTC). Reading is bounded (MAX_BYTES) and refuses anything but a regular file.
"""
from __future__ import annotations

import json
import math
import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from diagnose.compare.diff import Comparison
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


@dataclass
class PerfState:
    service: str
    baseline: dict[str, Any] | None = None
    current: dict[str, Any] | None = None
    history: list[dict[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"service": self.service, "baseline": self.baseline, "current": self.current,
                "history": self.history or []}


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
    hist = doc.get("history")
    return PerfState(doc["service"][:200], _snap(doc.get("baseline")), _snap(doc.get("current")),
                     [h for h in hist if isinstance(h, dict)] if isinstance(hist, list) else [])


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number this file holds")


def _bounded_int(text: str) -> int:
    if len(text) > 30:
        raise ValueError("an integer of more than 30 digits")
    return int(text)


def _snap(v: Any) -> dict[str, Any] | None:
    """A capture's snapshot as the file may hold it: a dict whose ``metrics`` is a dict of dicts."""
    if not isinstance(v, dict):
        return None
    metrics = v.get("metrics")
    clean = {k: m for k, m in metrics.items() if isinstance(m, dict)} if isinstance(metrics, dict) else {}
    return {**v, "metrics": clean}


def snapshot(r: Report) -> dict[str, Any]:
    """What the file keeps of one capture: when, where, its verdict and key metric values."""
    v = r.analysis.verdict
    metrics = {}
    for m in METRICS:
        s = r.analysis.signals.get(m.signal)
        if s is not None and s.value is not None:
            metrics[m.key] = {"label": m.label, "value": s.value, "unit": m.unit}
    started = r.manifest.get("started_ns")
    return {"captured": utc_datetime(started if type(started) is int else None), "bundle": str(r.bundle.path),
            "quadrant": v.quadrant.value, "layer": v.layer.value if v.layer else None, "headline": v.headline,
            "confidence": v.confidence, "metrics": metrics}


def set_baseline(state: PerfState | None, r: Report, service: str | None) -> PerfState:
    name = service or (state.service if state else None) or _service_name(r)
    snap = snapshot(r)
    hist = list(state.history or []) if state else []
    hist.append({"captured": snap["captured"], "change": "baseline set", "bundle": snap["bundle"],
                 "verdict": _verdict(snap), "deltas": {}, "gate": None, "findings": []})
    hist = hist[-MAX_HISTORY:]  # a file diagnose writes must stay one it reads (MAX_BYTES)
    newest = max((s for s in (snap, state.current if state else None) if s), key=lambda s: str(s.get("captured", "")))
    return PerfState(name, snap, newest, hist)


def record(state: PerfState | None, base: Report, new: Report, comp: Comparison, change: str | None,
           gate_failed: bool | None) -> PerfState:
    """Append ``comp`` as a history row (the file starts with ``base`` as its baseline)."""
    st = state or set_baseline(None, base, None)
    snap = snapshot(new)
    deltas = {m.key: {"delta_pct": m.delta_pct, "delta": m.delta, "unit": m.unit, "significant": m.significant,
                      "direction": m.direction} for m in comp.metrics if m.key in HISTORY_KEYS and m.delta is not None}
    if change is not None and len(change) > MAX_CHANGE:
        change = change[:MAX_CHANGE - 1] + "…"
    row = {"captured": snap["captured"], "change": change or "(not described: pass --change TEXT)",
           "bundle": snap["bundle"], "against": snapshot(base)["captured"], "verdict": _verdict(snap),
           "deltas": deltas, "gate": None if gate_failed is None else ("fail" if gate_failed else "pass"),
           "findings": list(dict.fromkeys(f"{f.change}: {f.title} ({f.rule_id})" for f in comp.findings
                                          if f.change != "kept"))}
    history = sorted([*(st.history or []), row], key=lambda h: str(h.get("captured", "")))[-MAX_HISTORY:]
    # the current bottleneck is the newest capture on record, whichever order they were compared in
    newest = max((s for s in (snap, st.current) if s), key=lambda s: str(s.get("captured", "")))  # ties: snap
    return PerfState(st.service, st.baseline, newest, history)


def service_name(r: Report) -> str:
    """The service's name as the file records it: the target's script (or its process name)."""
    return _service_name(r)


def _service_name(r: Report) -> str:
    t = r.manifest.get("target") or {}
    argv = [str(a) for a in t.get("cmdline") or []]
    script = next((os.path.basename(a) for a in argv[1:] if not a.startswith("-")), None)
    return script or str(t.get("name") or "service")


def _verdict(snap: dict[str, Any]) -> str:
    """As the report's first line says it: "Service-bound, system layer", "No load"."""
    q, layer = str(snap.get("quadrant")), snap.get("layer")
    if q in ("no_load", "unknown"):
        return "No load" if q == "no_load" else "No verdict"
    return bound_words(q) + (f", {layer} layer" if layer else "")


def _finite(v: Any) -> float | None:
    try:
        f = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    except OverflowError:
        return None
    return f if f is not None and math.isfinite(f) and abs(f) < 1e18 else None


def _metric_rows(snap: dict[str, Any]) -> list[str]:
    raw = snap.get("metrics")
    metrics: dict[str, Any] = raw if isinstance(raw, dict) else {}
    rows = [f"| {cell(m.get('label', '?'))} | {cell(fmt_value(v, str(m.get('unit', ''))))} |"
            for m in metrics.values() if isinstance(m, dict) and (v := _finite(m.get("value"))) is not None]
    return ["| metric | value |", "|---|---|", *rows, ""] if rows else ["No key metric was measured.", ""]


def _delta_cell(d: Any) -> str:
    pct = _finite(d.get("delta_pct")) if isinstance(d, dict) else None
    if pct is None:
        return "-"
    mark = {True: "", False: " (noise)", None: " (noise unknown)"}.get(d.get("significant"), "")
    delta = _finite(d.get("delta"))
    if d.get("unit") == "%" and delta is not None:  # a change of a percentage
        return f"{delta:+.1f} pp{mark}"
    return f"{pct:+.1f}%{mark}"


MAX_DEPTH = 16  # what the file's own state nests to is 4: deeper is not diagnose's


def _json_safe(v: Any, depth: int = 0) -> Any:
    """The state as JSON can hold it: non-finite floats and anything nested past MAX_DEPTH as null."""
    if depth > MAX_DEPTH:
        return None
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _json_safe(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [_json_safe(x, depth + 1) for x in v]
    return v


def _history_row(h: dict[str, Any]) -> str:
    raw = h.get("deltas")
    deltas: dict[str, Any] = raw if isinstance(raw, dict) else {}
    cells = [cell(h.get("captured", "?")), cell(h.get("against") or "-"), cell(h.get("change", "")),
             cell(h.get("verdict", ""))]
    cells += [_delta_cell(deltas.get(k)) for k in HISTORY_KEYS]
    found = h.get("findings")
    listed = "; ".join(map(str, found)) if isinstance(found, list) and found else "-"
    cells += [cell(h.get("gate") or "-"), cell(listed)]
    return "| " + " | ".join(cells) + " |"


def render(state: PerfState) -> str:
    """The whole file, state block included; the oldest history rows go until it fits MAX_BYTES (what
    diagnose writes, it reads again)."""
    out = _render(state)
    while len(out.encode("utf-8", errors="backslashreplace")) > MAX_BYTES and state.history:
        state = replace(state, history=state.history[max(1, len(state.history) // 10):])
        out = _render(state)
    return out


def _render(state: PerfState) -> str:
    out = [f"# Performance file: {text(state.service)}", "",
           "Written by diagnose (`diagnose baseline`, `diagnose compare --record`); it is regenerated each "
           "time, so edits are lost. The method: measure before changing anything, change one layer at a "
           "time, measure again, and record the effect here.", ""]
    cur = state.current
    if cur:
        conf = _finite(cur.get("confidence"))
        conf_s = f" (confidence {conf:.2f})" if conf is not None else ""
        out += ["## Current bottleneck", "", f"**{text(_verdict(cur))}**{conf_s}, "
                f"captured {text(cur.get('captured'))}: {text(cur.get('headline', ''))}", "",
                f"Bundle: {code(cur.get('bundle', '?'))}", ""]
    base = state.baseline
    if base:
        out += ["## Baseline", "", f"Captured {text(base.get('captured'))}, bundle {code(base.get('bundle', '?'))}; "
                f"verdict {text(_verdict(base))}.", ""] + _metric_rows(base)
    out += ["## History", "", "| captured | against | change | verdict | " + " | ".join(HISTORY_KEYS)
            + " | gate | findings |", "|" + "---|" * (len(HISTORY_KEYS) + 6)]
    for h in sorted(state.history or [], key=lambda h: str(h.get("captured", "")) if isinstance(h, dict) else ""):
        if isinstance(h, dict):
            out.append(_history_row(h))
    out += ["", "In capture time order; each row's changes are against the capture it was compared with (the "
            "BASE of `compare BASE NEW`, captured at \"against\"); \"-\": not measured in both (latency and QPS "
            "need stage spans); "
            "\"(noise)\": within the captures' own run-to-run noise; pp: percentage points."]
    blob = json.dumps(_json_safe(state.to_json()), indent=1, allow_nan=False).replace(">", "\\u003e")
    return "\n".join(out) + f"\n\n{MARKER} v{VERSION}\n{blob}\n-->\n"


__all__ = ["PerfFileError", "PerfState", "read_state", "record", "render", "set_baseline", "snapshot"]
