"""The serving engine's newest /metrics scrapes as the live Service panel shows them while no span
has arrived: running / waiting requests and KV-cache usage of the newest scrape, TTFT and the queue
share over the last RECENT_SCRAPES scrapes. Reads records the feed tails from the SERVING stream
(bounded, as the spans); the statistics are diagnose/signals/serving_metrics.py's (pure)."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from diagnose.signals.serving_metrics import ServingMetrics, serving_metrics

RECENT_SCRAPES = 10  # ~10 s at the collector's 1 s period: the window of the live TTFT and queue share


@dataclass(frozen=True)
class EngineSnapshot:
    """``latest``: the newest scrape alone (gauges); ``recent``: the last RECENT_SCRAPES (histogram
    increases: TTFT P50/P99, queue share); ``scrapes``: how many scrapes arrived in all."""

    latest: ServingMetrics
    recent: ServingMetrics
    scrapes: int


class EngineSeries:
    """The SERVING stream's source record and newest scrapes (at most RECENT_SCRAPES kept)."""

    def __init__(self) -> None:
        self._source: dict[str, Any] = {}
        self._scrapes: deque[dict[str, Any]] = deque(maxlen=RECENT_SCRAPES)
        self.scrapes = 0

    def add(self, rec: dict[str, Any]) -> None:
        """One stream record (``source``, ``scrape`` or ``error``; others ignored)."""
        kind = rec.get("kind")
        if kind == "source":
            self._source = rec
        elif kind == "scrape":
            self._scrapes.append(rec)
            self.scrapes += 1

    def snapshot(self) -> EngineSnapshot | None:
        """None before the first well-formed scrape."""
        if not self._scrapes:
            return None
        latest = serving_metrics([self._source, self._scrapes[-1]])
        recent = serving_metrics([self._source, *self._scrapes])
        if latest is None or recent is None:
            return None
        return EngineSnapshot(latest, recent, self.scrapes)


__all__ = ["EngineSeries", "EngineSnapshot", "RECENT_SCRAPES"]
