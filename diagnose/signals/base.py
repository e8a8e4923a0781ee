"""What a signal source returns, and helpers shared by sources."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from diagnose.bundle import Bundle, CollectorState
from diagnose.model import Signal, StackShare, ThreadSummary
from diagnose.results.details import Details
from diagnose.results.quality import DataQuality

if TYPE_CHECKING:
    from diagnose.signals.params import AnalysisParams


@dataclass
class SourceResult:
    """Signals from one kind of stream, plus figures for the report.

    ``data_quality``: the source's own sections of DataQuality (counts, ratios, measured errors; the
    others None; ``extract`` lays each source's sections over the others'). ``details``: the source's
    own sections of Details, the tables renderers read (diagnose/results/details.py).
    """

    signals: dict[str, Signal]
    data_quality: DataQuality = field(default_factory=DataQuality)
    details: Details = field(default_factory=Details)
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
