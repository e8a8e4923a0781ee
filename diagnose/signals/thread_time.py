"""What the thread-time account (diagnose/account/threads.py) reads of a bundle besides py-spy's
windows (cpu.py) and the /proc readings (threads.py): when requests were open (request spans, or
the process collector's accepted connections), when diagnose's own agent held the target (torch
window stops and exports), and whether the agent took part. Each read once per bundle; pure.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from diagnose.agent.inproc.torchwin import YIELD_S
from diagnose.bundle import Bundle
from diagnose.bundle.streams import PROCESS, TORCH
from diagnose.signals.spans.analytics import parsed_sample
from diagnose.signals.spans.sampling import sample_of

MAX_SEGMENT_NS = 3600 * 10**9  # no py-spy window or profiler hold lasts an hour: longer ones are malformed


@dataclass(frozen=True)
class OpenRequests:
    """When request spans say a request was open: the union of their [start, end) as sorted, disjoint
    ``starts``/``ends`` (Unix ns), and ``unseen``: the chance that a request the agent sampled out
    was open at a moment no kept one is (0 when every trace was kept)."""

    starts: list[int]
    ends: list[int]
    unseen: float = 0.0


def open_requests(bundle: Bundle) -> OpenRequests | None:
    """The request spans' open intervals, or None without request spans.

    Spans sampled 1 in N (signals/spans/sampling.py) miss requests: the kept traces' in-flight mean
    L_kept (request-s / s) times N - 1 is the sampled-out requests' in-flight mean, and with
    arrivals independent of the sample (the agent keeps by trace id) the chance that at least one
    of them is open is 1 - exp(-L_unseen) (Poisson). Without it the accepted connections, which
    count idle keep-alive ones, stood for "a request open" and an idle loop read as IO."""
    def build() -> OpenRequests | None:
        sampling = sample_of(bundle)[2]
        reqs = parsed_sample(bundle).requests
        if not reqs:
            return None
        starts: list[int] = []
        ends: list[int] = []
        busy = 0
        for lo, hi in sorted((r.span.start_ns, r.span.end_ns) for r in reqs):
            busy += max(0, hi - lo)
            if starts and lo <= ends[-1]:
                ends[-1] = max(ends[-1], hi)
            else:
                starts.append(lo)
                ends.append(max(lo, hi))
        unseen = 0.0
        if sampling is not None and ends[-1] > starts[0]:
            unseen = 1.0 - math.exp(-busy / (ends[-1] - starts[0]) * (sampling.scale - 1.0))
        return OpenRequests(starts, ends, unseen)
    return bundle.derived("spans.open_requests", build)


def connection_readings(bundle: Bundle) -> tuple[list[int], list[int]]:
    """(t_ns, accepted connections) readings of the process collector, time-ordered."""
    def build() -> tuple[list[int], list[int]]:
        rows = sorted((r.t_ns, n) for r in bundle.typed(PROCESS) if (n := r.accepted) is not None)
        return [t for t, _ in rows], [n for _, n in rows]
    return bundle.derived("process.connection_readings", build)


def profiler_holds(bundle: Bundle) -> list[tuple[int, int]]:
    """When diagnose's agent held the target's GIL stopping and exporting a torch window (Unix ns,
    from its index records: ``stopping_ns`` to ``end_ns``, then the export's wall time after its
    YIELD_S pause). The target's threads were held by the observer then, not by the service."""
    out = []
    for w in bundle.typed(TORCH):
        stop, end = w.stopping_ns, w.end_ns
        if stop is None or end is None or not 0 < stop <= end < stop + MAX_SEGMENT_NS:
            continue
        out.append((stop, end))
        export = w.export_wall_s
        if export is not None and 0 < export < 3600:
            lo = end + int(YIELD_S * 1e9)
            out.append((lo, lo + int(export * 1e9)))
    return sorted(out)


def agent_ran(bundle: Bundle) -> bool:
    """Whether diagnose's agent took part in the capture (its threads, named ``diagnose-*``, are left
    out only then: the target chooses its own thread names)."""
    return any(c.name == "agent" and c.state in ("ok", "partial") for c in bundle.info.collectors)


__all__ = ["MAX_SEGMENT_NS", "OpenRequests", "agent_ran", "connection_readings", "open_requests", "profiler_holds"]
