"""signals(Bundle): every typed signal the rules read, with units and provenance.

Each source reads one kind of stream from the bundle and returns a SourceResult; the registry below
is the one place a new source is added. Sources are pure apart from reading the bundle; each takes
the analysis parameters (diagnose/signals/params.py) and reads those that concern it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import msgspec

from diagnose.bundle import Bundle
from diagnose.bundle.errors import MALFORMED
from diagnose.model import Signal, StackShare, ThreadSummary
from diagnose.results.details import Details
from diagnose.results.quality import DataQuality, StreamsQuality
from diagnose.signals.base import SignalSource, SourceResult
from diagnose.signals.cpu import cpu_signals
from diagnose.signals.gpu import gpu_signals
from diagnose.signals.params import DEFAULT_PARAMS, AnalysisParams
from diagnose.signals.serving import serving_signals
from diagnose.signals.timeline import timeline_signals

SIGNAL_SOURCES: tuple[SignalSource, ...] = (cpu_signals, gpu_signals, timeline_signals, serving_signals)


@dataclass
class Extracted:
    """Every source's result together; the account and the verdict add their parts of
    ``data_quality`` (frozen, like ``details``: replaced, never changed in place)."""

    signals: dict[str, Signal] = field(default_factory=dict)
    data_quality: DataQuality = field(default_factory=DataQuality)
    details: Details = field(default_factory=Details)
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
    source_errors: dict[str, str] = {}
    for source in sources:
        try:
            r = source(bundle, params)
        except MALFORMED as exc:  # a hand-edited or corrupt stream costs its signals, not the report
            source_errors[source.__name__] = f"{type(exc).__name__}: {str(exc)[:160]}"
            continue
        out.signals.update({n: _finite(sig) for n, sig in r.signals.items()})
        out.data_quality = out.data_quality.merged(r.data_quality)
        out.details = out.details.merged(r.details)
        out.threads += r.threads
        out.top_stacks += r.top_stacks
    # FIFOs, devices, symlinks planted in a bundle (unreadable): never read, said here
    streams = StreamsQuality(torn_lines=dict(bundle.torn_lines), invalid_records=dict(bundle.invalid_records),
                             unreadable_members=dict(bundle.unreadable), source_errors=source_errors)
    out.data_quality = msgspec.structs.replace(out.data_quality, streams=streams, capture_s=capture_s(bundle))
    return out


def capture_s(bundle: Bundle) -> float | None:
    """The capture's length from the manifest (end - start, s, 2 decimals); None when unknown."""
    window = bundle.info.window_ns
    return float(round((window[1] - window[0]) / 1e9, 2)) if window and window[0] else None


__all__ = ["SIGNAL_SOURCES", "Extracted", "SourceResult", "capture_s", "extract"]
