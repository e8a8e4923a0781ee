"""py-spy's achieved sampling rate per thread, and windows that overran (pure).

py-spy reads every thread's stack in each sampling round and counts one sample per thread-stack.
With many threads, or on a saturated host, a round takes longer than the period asked for: each
thread is then sampled less often than ``--rate``, and a window of ``--duration`` seconds (py-spy
counts rounds, not seconds) runs longer. A window's achieved rate per thread is its samples / the
seconds its threads were alive in it (each thread from its first to its last sample: a
thread-per-request server's threads live for a request, not the window). Inputs: the PYSPY index records (``rate_hz``
asked, ``samples``, ``window_s`` asked, ``ended_by``) and the stacks rebuilt from each window.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import msgspec

from diagnose.bundle.records import PyspyWindowRecord
from diagnose.results.quality import PyspyQuality
from diagnose.signals.stacks import Segment

UNDERSAMPLED_SHARE = 0.25  # below this share of the asked rate, stack findings lose confidence
MANY_THREADS = 50  # a round over this many threads is a reason py-spy falls behind
HOST_SATURATED_PCT = 90.0
OVERRUN_SLACK_S = 1.0  # a window sampling max(1 s, 25%) longer than asked overran
OVERRUN_SHARE = 0.25


@dataclass(frozen=True)
class WindowRate:
    """One py-spy window: ``threads`` seen in it, ``sampled_s`` from its first to its last event;
    ``asked_s`` the ``--duration`` it was given (None in bundles older than the field);
    ``thread_s`` the seconds its threads were alive in it (None: every thread the whole window)."""

    window: int
    asked_hz: float
    threads: int
    samples: int
    sampled_s: float
    asked_s: float | None
    thread_s: float | None = None

    @property
    def live_thread_s(self) -> float:
        return self.thread_s if self.thread_s is not None else self.threads * self.sampled_s

    @property
    def achieved_hz(self) -> float | None:
        """Samples per second per live thread, or None without threads or sampled time."""
        return self.samples / self.live_thread_s if self.threads and self.live_thread_s > 0 else None

    @property
    def threads_live(self) -> int:
        """Threads alive at once, on average: those read in each round."""
        return round(self.live_thread_s / self.sampled_s) if self.sampled_s > 0 else self.threads

    @property
    def overran(self) -> bool:
        return self.asked_s is not None and self.sampled_s > self.asked_s + max(OVERRUN_SLACK_S,
                                                                                OVERRUN_SHARE * self.asked_s)


def _number(v: float | None) -> float | None:
    """A count or a time the rate may use: in [0, 2**53) (a hand-edited index may say anything)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 2**53 else None


def window_rate(record: PyspyWindowRecord, segments: Iterable[Segment],
                default_asked_s: float | None) -> WindowRate | None:
    """The rate of one window, or None when its record has no usable rate or sample count."""
    segs = list(segments)
    asked_hz, samples = _number(record.rate_hz), _number(record.samples)
    if not segs or not asked_hz or samples is None:
        return None
    first = _number(record.first_ts_us)
    first = min(s.start_us for s in segs) if first is None else first
    last = _number(record.last_ts_us) or max(s.end_us for s in segs)
    spans: dict[tuple[int | None, int], tuple[float, float]] = {}
    for seg in segs:
        lo, hi = spans.get((seg.pid, seg.tid), (seg.start_us, seg.end_us))
        spans[(seg.pid, seg.tid)] = (min(lo, seg.start_us), max(hi, seg.end_us))
    asked_s = _number(record.window_s)
    sampled_s = max(0.0, (last - first) / 1e6)
    thread_s = min(sum(hi - lo for lo, hi in spans.values()) / 1e6, len(spans) * sampled_s)
    return WindowRate(int(_number(record.window) or 0), asked_hz, len(spans), int(samples), sampled_s,
                      asked_s if asked_s is not None else default_asked_s, thread_s)


def rate_quality(rates: list[WindowRate], requested_hz: float | None, host_cpu_pct: float | None,
                 lowered_by: str | None = None) -> PyspyQuality:
    """The rate figures of the py-spy section: the achieved rate per thread over all windows
    (thread-time weighted), its share of the rate the user requested (``requested_hz``, ``--rate``;
    else the highest asked of a window) and of the rate asked of py-spy (the overhead budget may
    lower it: ``lowered_by`` says why), the windows that overran, and below UNDERSAMPLED_SHARE of the
    requested rate the statement of why, for the report and the confidence of stack findings. Every
    figure None without a usable window."""
    usable = [r for r in rates if r.achieved_hz is not None]
    if not usable:
        return PyspyQuality()
    thread_s = sum(r.live_thread_s for r in usable)
    samples = sum(r.samples for r in usable)
    asked = sum(r.live_thread_s * r.asked_hz for r in usable)
    achieved = samples / thread_s
    requested = requested_hz if requested_hz and requested_hz > 0 else max(r.asked_hz for r in usable)
    overran = [r for r in rates if r.overran]
    q = PyspyQuality(
        requested_hz=requested, asked_hz=max(r.asked_hz for r in usable),
        achieved_hz_per_thread=round(achieved, 2), achieved_share_pct=round(100.0 * achieved / requested, 1),
        achieved_share_of_asked_pct=round(100.0 * samples / asked, 1) if asked else None,
        threads_max=max(r.threads_live for r in usable), windows_overran=len(overran),
        overran=(f"{len(overran)} of {len(rates)} py-spy window(s) overran (py-spy counts rounds, not seconds): "
                 + ", ".join(f"window {r.window} sampled {r.sampled_s:.1f} s for {r.asked_s:g} s" for r in overran[:3]))
        if overran else None)
    if achieved < UNDERSAMPLED_SHARE * requested:
        why = _why(q, host_cpu_pct, lowered_by)
        q = msgspec.structs.replace(q, undersampled=(
            f"py-spy sampled each thread at {achieved:.2g} Hz, {100 * achieved / requested:.0f}% of the "
            f"{requested:g} Hz requested ({why}): below {UNDERSAMPLED_SHARE:.0%} of the requested rate, "
            "stack-based findings lose confidence"))
    return q


def _why(q: PyspyQuality, host_cpu_pct: float | None, lowered_by: str | None) -> str:
    reasons = []
    if q.threads_max is not None and q.threads_max >= MANY_THREADS:
        reasons.append(f"{q.threads_max} threads read in each round")
    if q.asked_hz is not None and q.requested_hz is not None and q.asked_hz < q.requested_hz:
        reasons.append(f"the overhead budget asked py-spy for {q.asked_hz:g} Hz"
                       + (f" ({lowered_by})" if lowered_by else ""))
    behind = q.achieved_share_of_asked_pct
    if behind is not None and behind < 75:
        reasons.append(f"py-spy reached {behind:.0f}% of the rate it was asked")
    if host_cpu_pct is not None and host_cpu_pct >= HOST_SATURATED_PCT:
        reasons.append(f"the host's CPUs were {host_cpu_pct:.0f}% busy")
    return "; ".join(reasons) or "py-spy fell behind its rounds"


__all__ = ["UNDERSAMPLED_SHARE", "WindowRate", "rate_quality", "window_rate"]
