"""What a sweep reads, as msgspec types: a ``--command``'s last stdout line and the sweep file.

Both are read leniently (records.base ``lenient``): a number outside [0, MAX_NUMBER] (a huge
integer, NaN, a bool, text) is not a measurement and reads as None, and costs only itself. A sweep
file's step must still have both rates and, when it gives one, a numeric P99 (``StepCore``, read
strictly): a step without them is refused, not guessed.
"""
from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta, Struct

from diagnose.bundle.records.base import lenient

MAX_NUMBER = 1e12  # a rate, latency or count past this is not a measurement
Measured = Annotated[float, Meta(ge=0, le=MAX_NUMBER)]


class CommandLine(Struct):
    """A ``--command``'s last stdout line: req/s (``qps`` accepted for ``throughput``), ms, counts."""

    throughput: Measured | None = None
    qps: Measured | None = None
    p99_ms: Measured | None = None
    p50_ms: Measured | None = None
    mean_ms: Measured | None = None
    requests: Measured | None = None
    errors: Measured | None = None

    @property
    def rate(self) -> float | None:
        return self.throughput if self.throughput is not None else self.qps


class StepCore(Struct):
    """What a sweep file's step must have (read strictly)."""

    offered_qps: Measured
    achieved_qps: Measured
    p99_ms: Measured | None = None


class StepRecord(Struct):
    """One step as ``LoadStep.to_json`` writes it (read leniently, after StepCore)."""

    offered_qps: Measured
    achieved_qps: Measured
    p99_ms: Measured | None = None
    p50_ms: Measured | None = None
    mean_ms: Measured | None = None
    requests: Measured | None = None
    errors: Measured | None = None
    unfinished: Measured | None = None
    arrival_qps: Measured | None = None


class SweepFile(Struct):
    """The sweep file ``Sweep.to_json`` writes; ``target``, ``driver`` and ``stopped_early`` are shown as
    text whatever a hand edit left there, ``version`` compared as JSON holds it."""

    kind: str | None = None
    version: int | float | bool | None = None
    steps: list[Any] | None = None
    target: Any = ""
    driver: Any = ""
    step_s: Measured | None = None
    warmup_s: Measured | None = None
    stopped_early: Any = None


def command_line(raw: Any) -> CommandLine | None:
    """The CommandLine of a decoded JSON line; None when it is not an object."""
    return lenient(CommandLine, raw)


def sweep_file(raw: Any) -> SweepFile | None:
    """The SweepFile of a decoded JSON document; None when it is not an object."""
    return lenient(SweepFile, raw)


__all__ = ["MAX_NUMBER", "CommandLine", "Measured", "StepCore", "StepRecord", "SweepFile", "command_line",
           "sweep_file"]
