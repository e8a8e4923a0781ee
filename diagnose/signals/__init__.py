"""signals(Bundle): every typed signal the rules read, with units and provenance.

Each source reads one kind of stream from the bundle and returns a SourceResult; the registry below
is the one place a new source is added. Sources are pure apart from reading the bundle; each takes
the analysis parameters (diagnose/signals/params.py) and reads those that concern it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from diagnose.bundle import Bundle
from diagnose.bundle.errors import MALFORMED
from diagnose.model import Signal, StackShare, ThreadSummary
from diagnose.signals.base import SignalSource, SourceResult
from diagnose.signals.cpu import cpu_signals
from diagnose.signals.gpu import gpu_signals
from diagnose.signals.params import DEFAULT_PARAMS, AnalysisParams
from diagnose.signals.serving import serving_signals
from diagnose.signals.timeline import timeline_signals

SIGNAL_SOURCES: tuple[SignalSource, ...] = (cpu_signals, gpu_signals, timeline_signals, serving_signals)




@dataclass
class Extracted:
    signals: dict[str, Signal] = field(default_factory=dict)
    data_quality: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    threads: tuple[ThreadSummary, ...] = ()
    top_stacks: tuple[StackShare, ...] = ()


def _finite(sig: Signal) -> Signal:
    """A NaN or infinite value (absurd inputs: a zero bandwidth, 1e308 FLOPs) is unknown, never a
    number a rule compares or JSON cannot hold."""
    if sig.value is None or math.isfinite(sig.value):
        return sig
    return Signal(sig.name, None, sig.unit, sig.source, f"not a finite number ({sig.value}) from malformed input")


def extract(bundle: Bundle, sources: tuple[SignalSource, ...] = SIGNAL_SOURCES,
            params: AnalysisParams = DEFAULT_PARAMS) -> Extracted:
    out = Extracted()
    for source in sources:
        try:
            r = source(bundle, params)
        except MALFORMED as exc:  # a hand-edited or corrupt stream costs its signals, not the report
            out.data_quality.setdefault("source_errors", {})[source.__name__] = (
                f"{type(exc).__name__}: {str(exc)[:160]}")
            continue
        out.signals.update({n: _finite(sig) for n, sig in r.signals.items()})
        out.data_quality.update(r.data_quality)
        out.details.update(r.details)
        out.threads += r.threads
        out.top_stacks += r.top_stacks
    out.data_quality["torn_stream_lines"] = dict(bundle.torn_lines)
    if bundle.invalid_records:
        out.data_quality["invalid_stream_records"] = dict(bundle.invalid_records)
    if bundle.unreadable:  # FIFOs, devices, symlinks planted in a bundle: never read, said here
        out.data_quality["unreadable_members"] = dict(bundle.unreadable)
    m = bundle.manifest
    if m.get("started_ns") and m.get("ended_ns") and m["ended_ns"] > m["started_ns"]:
        out.data_quality["capture_s"] = round((m["ended_ns"] - m["started_ns"]) / 1e9, 2)
    return out


__all__ = ["SIGNAL_SOURCES", "Extracted", "SourceResult", "extract"]
