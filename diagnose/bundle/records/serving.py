"""The serving engine's /metrics stream (collectors/serving_metrics.py): one ``source`` record, then
one record per ``scrape`` or failed scrape (``error``), told apart by their ``kind``.

Series hold the engine's own values in the metric's own unit (catalogs/serving_fields.py TABLE says
how each reaches the canonical unit); counters and histogram buckets are cumulative since the
engine started, so readers take increases over the window (diagnose/signals/serving_metrics.py).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

import msgspec

from diagnose.bundle.records.base import Count, Finite, Record
from diagnose.catalogs.serving_fields import Engine

MAX_ABS = 1e300  # a value of larger magnitude is no reading (sums of a few would overflow to inf)

# A bucket's upper bound: a number, or the +Inf bucket's "+Inf" (catalogs/serving_fields.py INF: JSON
# has no infinity).
Bound = float | Literal["+Inf"]


def _usable(v: float | None) -> float | None:
    return v if v is not None and abs(v) < MAX_ABS else None  # NaN (a dict's) fails too


class ServingSeries(Record):
    """One series of a scrape: a metric of catalogs/serving_fields.py TABLE with one label set
    (``le`` left out). A gauge or counter has ``value``; a histogram its cumulative ``buckets``
    ([upper bound, observations at or below it], bounds ascending, the last "+Inf"), ``sum`` (of the
    observations, in the metric's unit) and ``count``.

    The numbers are the engine's (the page is the target's hostile input: the collector keeps only
    finite ones, any magnitude): they are typed as floats and read through the ``finite_*``
    properties, so one absurd value costs that value, not the scrape."""

    name: str  # the metric as TABLE names it, counters without ``_total``
    labels: dict[str, str] = {}
    value: float | None = None
    buckets: list[tuple[Bound, float]] = []
    sum: float | None = None
    count: float | None = None

    @property
    def finite_value(self) -> float | None:
        return _usable(self.value)

    @property
    def finite_sum(self) -> float | None:
        return _usable(self.sum)

    @property
    def finite_count(self) -> float | None:
        return _usable(self.count)

    @property
    def finite_buckets(self) -> dict[float, float]:
        """{upper bound (+Inf as inf): cumulative count} of the buckets whose bound and count are
        usable numbers (a repeated bound: its last)."""
        out: dict[float, float] = {}
        for le, n in self.buckets:
            bound = float("inf") if le == "+Inf" else _usable(float(le))
            count = _usable(n)
            if bound is not None and count is not None:
                out[bound] = count
        return out


class ServingSourceRecord(Record, tag="source", tag_field="kind"):
    """What was scraped: written once, when the collector starts (after the probe's scrape)."""

    t_ns: Count | None = None  # Unix ns
    url: str = ""  # the /metrics URL (never with credentials: parse_metrics_url refuses them)
    engine: str | None = None  # an Engine value, as the probe's page said (see ``known_engine``)
    period_s: Finite | None = None  # the scrape period asked

    @property
    def known_engine(self) -> Engine | None:
        """The engine the source names; None for none or one this diagnose does not know (a
        hand-edited record: readers then count the series' engines)."""
        try:
            return Engine(self.engine)
        except ValueError:
            return None


class ServingScrapeRecord(Record, tag="scrape", tag_field="kind", kw_only=True):
    """One /metrics page read: the series of the metrics in TABLE, and what was left out."""

    t_ns: Count  # Unix ns the page was read (0 and up: hand-made streams count from 0)
    dur_ms: Finite | None = None  # the GET and the parse
    series: list[ServingSeries]
    garbage: Count = 0  # lines of known metrics the parser rejected (or never saw: too long)
    garbage_lines: list[str] = []  # the first few, numbered, cut to MAX_LINE_CHARS
    other_lines: Count = 0  # sample lines of metrics not in TABLE (not parsed)
    dropped: Count = 0  # series, buckets or values left out (caps, NaN, a bad le)


class ServingErrorRecord(Record, tag="error", tag_field="kind"):
    """A scrape that failed (refused, timed out, too large, not HTTP 200)."""

    t_ns: Count | None = None  # Unix ns
    reason: Any = None  # why, one line; any JSON value, read through ``why``: the failure still counts

    @property
    def why(self) -> str:
        """The reason as text (at most 200 characters)."""
        return str(self.reason)[:200]


# The SERVING stream's record (streams.py ``record``: "ServingRecord"), by its ``kind``.
ServingRecord = ServingSourceRecord | ServingScrapeRecord | ServingErrorRecord


def serving_records(records: Iterable[ServingRecord | Mapping[str, Any]]) -> list[ServingRecord]:
    """Stream records as the bundle's typed reader gives them (``Bundle.typed(SERVING)``), from
    records already typed or from the plain dicts a JSON Lines tail yields (the live view's): a
    dict of the wrong shape is left out, as the bundle's reader drops it."""
    out: list[ServingRecord] = []
    for r in records:
        if isinstance(r, (ServingSourceRecord, ServingScrapeRecord, ServingErrorRecord)):
            out.append(r)
            continue
        try:
            out.append(msgspec.convert(r, ServingRecord))
        except msgspec.ValidationError:
            continue
    return out


__all__ = ["MAX_ABS", "Bound", "ServingErrorRecord", "ServingRecord", "ServingScrapeRecord", "ServingSeries",
           "ServingSourceRecord", "serving_records"]
