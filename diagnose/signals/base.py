"""What a signal source returns, and helpers shared by sources."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from diagnose.bundle import Bundle, CollectorState
from diagnose.model import Signal, StackShare, ThreadSummary
from diagnose.results.quality import DataQuality

if TYPE_CHECKING:
    from diagnose.signals.params import AnalysisParams


@dataclass
class SourceResult:
    """Signals from one kind of stream, plus figures for the report.

    ``data_quality``: the source's own sections of DataQuality (counts, ratios, measured errors; the
    others None; ``extract`` lays each source's sections over the others'). ``details``: JSON-ready
    tables for renderers (e.g. idle gaps, latency percentiles), keyed by a name unique to the source.
    """

    signals: dict[str, Signal]
    data_quality: DataQuality = field(default_factory=DataQuality)
    details: dict[str, Any] = field(default_factory=dict)
    threads: tuple[ThreadSummary, ...] = ()
    top_stacks: tuple[StackShare, ...] = ()


# (bundle, analysis parameters) -> signals; a source ignores the parameters that are not its own.
SignalSource = Callable[[Bundle, "AnalysisParams"], SourceResult]


def collector_reason(bundle: Bundle, name: str) -> str:
    """Why collector ``name`` left no data: its manifest state and reason, for Signal.reason."""
    st = bundle.collectors.get(name)
    if st is None:
        return f"collector {name} did not run"
    if st.state in (CollectorState.OK, CollectorState.PARTIAL, CollectorState.RUNNING):
        return f"collector {name} recorded no usable data"
    return f"{name} {st.state.value}: {st.reason or 'no reason recorded'}"
