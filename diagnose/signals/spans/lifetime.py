"""Server-lifetime root spans: a root span open for the life of a server (a "serve" or "startup"
span, a long-poll connection) is not one request, and one of them among many requests would make
the request statistics meaningless (one 24 h span among 100 requests over 10 s: the window becomes
24 h, QPS 0.0, the latency tail 24 h). Pure: numpy arrays in, a mask out.

The rule (``RULE``): a span is a lifetime span when it is more than LIFETIME_FACTOR times longer
than the median span *and* longer than the time from the first start to the last end of all the
other spans (it covers them all, so it is no part of their traffic), with at least MIN_OTHERS
other spans to measure that against. A slow request among a few (or in a slow phase that other
requests share) is never one: the others' spread grows with it.
"""
from __future__ import annotations

import numpy as np

LIFETIME_FACTOR = 100
MIN_OTHERS = 10
RULE = (f"longer than {LIFETIME_FACTOR}x the median root span and than the first start to last end of all "
        f"other root spans, with at least {MIN_OTHERS} others")


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
    spread = int(end_ns[others].max()) - int(start_ns[others].min())
    out[long & (dur > spread)] = True
    return out


__all__ = ["LIFETIME_FACTOR", "MIN_OTHERS", "RULE", "lifetime_mask"]
