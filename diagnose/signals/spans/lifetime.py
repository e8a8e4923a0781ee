"""Server-lifetime root spans: a root span open for the life of a server (a "serve" or "startup"
span, a long-poll connection) is not one request, and one of them among many requests would make
the request statistics meaningless (one 24 h span among 100 requests over 10 s: the window becomes
24 h, QPS 0.0, the latency tail 24 h). Pure: numpy arrays in, a mask out.

The rule (``RULE``): a span is a lifetime span when it is more than LIFETIME_FACTOR times longer
than the median span *and* overlaps every other span (it opens before the first of them ends and
closes after the last of them starts: it was open through all their traffic), with at least
MIN_OTHERS other spans to measure that against. A slow request is not one: it overlaps only the
requests around it, whether they run one after another or many at once, unless it lasts through
the whole of the others' traffic (and is then said, not hidden, like every lifetime span).
"""
from __future__ import annotations

import numpy as np

LIFETIME_FACTOR = 100
MIN_OTHERS = 10
RULE = (f"longer than {LIFETIME_FACTOR}x the median root span and open through all the other root spans "
        f"(at least {MIN_OTHERS} of them)")


def lifetime_mask(start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """Which spans (int64 start/end, ns) are lifetime spans by ``RULE``: a bool array, all False
    when fewer than MIN_OTHERS spans would remain."""
    dur = end_ns - start_ns
    out = np.zeros(len(dur), bool)
    if len(dur) <= MIN_OTHERS:
        return out
    long = dur > LIFETIME_FACTOR * max(float(np.median(dur)), 1.0)
    others = ~long
    if not long.any() or others.sum() < MIN_OTHERS:
        return out
    through = (start_ns <= end_ns[others].min()) & (end_ns >= start_ns[others].max())
    out[long & through] = True
    return out


__all__ = ["LIFETIME_FACTOR", "MIN_OTHERS", "RULE", "lifetime_mask"]
