"""Issue 16, data quality stated, never hidden: the pure parts (stack replay per process, py-spy's
achieved rate and overrun windows, process-collector gaps, span coverage, the confidence of
stack-based findings). The real-process checks live in tests/capture, tests/agent."""
from __future__ import annotations

from diagnose.bundle.records import PyspyWindowRecord
from diagnose.bundle.records.manifest import CollectorEntry, manifest_info
from diagnose.bundle.records.process import ProcessReading
from diagnose.bundle.records.spans import span_record
from diagnose.model import Evidence, Finding, Layer, Quadrant, Severity
from diagnose.results.quality import DataQuality
from diagnose.signals.process_gaps import process_gaps
from diagnose.signals.pyspy_rate import WindowRate, rate_quality, window_rate
from diagnose.signals.spans.analytics import parse_spans, request_summary
from diagnose.signals.spans.coverage import span_coverage
from diagnose.signals.stacks import Segment, segments_from_chrometrace
from diagnose.verdict.data_quality import warnings
from diagnose.verdict.sampling import discount_stack_findings

TID = 140000000000001  # the pthread id every forked process inherits
PERIOD_US = 10_000.0


class PySpyStream:
    """B/E events as py-spy writes them: each sample diffed against the previous sample of the
    same tid, whatever process it came from; the events carry the sampled process's pid."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.prev: list[tuple[str, str]] = []

    def sample(self, pid: int, frames: list[str], ts: float) -> None:
        stack = [(f'process {pid}:"python app.py"', ""), (f"thread ({pid}): MainThread", "")]
        stack += [(f, "/app/main.py") for f in frames]
        i = 0
        while i < min(len(self.prev), len(stack)) and self.prev[i] == stack[i]:
            i += 1
        self.events += [self._ev("E", n, f, pid, ts) for n, f in reversed(self.prev[i:])]
        self.events += [self._ev("B", n, f, pid, ts) for n, f in stack[i:]]
        self.prev, self.last_pid = stack, pid

    def close(self, ts: float) -> list[dict]:
        self.events += [self._ev("E", n, f, self.last_pid, ts) for n, f in reversed(self.prev)]
        return self.events

    @staticmethod
    def _ev(ph: str, name: str, filename: str, pid: int, ts: float) -> dict:
        return {"ph": ph, "name": name, "pid": pid, "tid": TID, "ts": ts, "cat": "py-spy",
                "args": {"filename": filename, "line": 1}}


def _entries(*raw: dict) -> tuple[CollectorEntry, ...]:
    """Collector entries as Bundle.info reads them from a manifest's ``collectors``."""
    return manifest_info({"collectors": list(raw)}).collectors


def _time_by_pid(events: list[dict]) -> dict[int, float]:
    """Thread-time per process (its main thread's OS tid, from py-spy's thread frame, is its pid)."""
    out: dict[int, float] = {}
    for seg in segments_from_chrometrace(events):
        out[seg.tid] = out.get(seg.tid, 0.0) + (seg.end_us - seg.start_us) / 1e6
    return out


def test_forked_workers_sharing_a_tid_each_hold_their_own_stack():
    """Three busy workers and an idle parent, the parent sampled last in each round: read per tid,
    the parent's idle stack held until the next round and the workers got ~0 s (no load)."""
    s = PySpyStream()
    for k in range(200):  # 2 s at 100 Hz
        for j, pid in enumerate((101, 102, 103)):
            s.sample(pid, ["worker", "matmul" if k % 2 else "matmul_inner"], k * PERIOD_US + j)
        s.sample(100, ["main", "sleep"], k * PERIOD_US + 3)
    by_pid = _time_by_pid(s.close(200 * PERIOD_US))
    for pid in (100, 101, 102, 103):  # 200 periods of 10 ms: 2 s each, within -5 and +1 periods at the edges
        assert 1.95 <= by_pid[pid] <= 2.01, by_pid
    segs = segments_from_chrometrace(s.events)
    assert {seg.pid for seg in segs if seg.tid == 101} == {101}
    assert not any("sleep" in {f.function for f in seg.frames} for seg in segs if seg.tid == 101)


def test_a_worker_no_longer_sampled_ends_at_its_last_sample():
    s = PySpyStream()
    for k in range(200):
        if k < 100:
            s.sample(101, ["worker", "busy"], k * PERIOD_US)
        s.sample(100, ["main", "sleep"], k * PERIOD_US + 1)  # elided by py-spy once alone: same stack
    by_pid = _time_by_pid(s.close(200 * PERIOD_US))
    assert 0.99 <= by_pid[101] <= 1.02, by_pid  # exited after 1 s: not held to the window's end
    assert 1.95 <= by_pid[100] <= 2.01, by_pid  # the whole 2 s window, as above


def test_undersampled_and_overrun_windows_are_stated_with_the_reason():
    """500 threads: py-spy read each at ~3.8 Hz instead of 100 Hz, its 5 s window ran 13 s."""
    rates = [WindowRate(1, 100.0, 501, int(501 * 3.8 * 13), 13.0, 5.0),
             WindowRate(2, 100.0, 501, int(501 * 3.8 * 5), 5.0, 5.0)]
    q = rate_quality(rates, 100.0, 99.0)
    assert q.achieved_hz_per_thread is not None and 3.7 <= q.achieved_hz_per_thread <= 3.9
    assert q.achieved_share_pct is not None and q.achieved_share_pct < 5
    assert q.windows_overran == 1 and q.overran is not None and "window 1 sampled 13.0 s for 5 s" in q.overran
    text = q.undersampled
    assert text is not None
    assert "3.8 Hz" in text and "100 Hz requested" in text and "501 threads" in text and "99% busy" in text
    assert [w.collectors for w in warnings(DataQuality(pyspy=q))] == [("pyspy",), ("pyspy",)]
    assert rate_quality([WindowRate(1, 100.0, 2, 2 * 95 * 5, 5.0, 5.0)], 100.0, 10.0).undersampled is None


def _threads(n: int, life_s: float, window_s: float, hz: float,
             asked_hz: float = 50.0) -> tuple[PyspyWindowRecord, list[Segment]]:
    """``n`` threads over a ``window_s`` window, each alive ``life_s`` (one after another, or all at
    once when that is the whole window) and read at ``hz`` (one segment a sample)."""
    segs, step = [], (window_s - life_s) / n
    for i in range(n):
        start = i * step * 1e6
        per = int(life_s * hz)
        segs += [Segment(1000 + i, "req", start + k * 1e6 / hz, start + (k + 1) * 1e6 / hz, ()) for k in range(per)]
    rec = PyspyWindowRecord(window=1, samples=len(segs), rate_hz=asked_hz, window_s=window_s, first_ts_us=0.0,
                            last_ts_us=max(s.end_us for s in segs))
    return rec, segs


def test_short_lived_threads_sampled_at_the_asked_rate_are_not_undersampled():
    """A thread-per-request server: 300 threads in a 4 s window, each alive for its 0.1 s request and
    read at the 50 Hz asked. Counted over the whole window each would read 1.7% of the rate; over
    the time it lived, all of it."""
    rec, segs = _threads(300, 0.1, 4.0, 50.0)
    r = window_rate(rec, segs, None)
    assert r is not None and r.threads == 300 and 7 <= r.threads_live <= 8
    q = rate_quality([r], 50.0, 90.0)
    assert q.achieved_hz_per_thread is not None and 48 <= q.achieved_hz_per_thread <= 52
    assert q.undersampled is None and q.threads_max == r.threads_live
    slow = rate_quality([window_rate(*_threads(300, 4.0, 4.0, 2.0), None)], 50.0, 90.0)  # alive throughout, 2 Hz
    assert slow.undersampled is not None and "300 threads read in each round" in slow.undersampled


def _finding(source: str) -> Finding:
    return Finding("r", "t", "s.", Quadrant.SERVICE, Layer.SERVICE, Severity.WARNING, 0.9,
                   (Evidence("x", 50.0, "%", ">=", 30.0, source),), ())


def test_stack_findings_lose_confidence_below_a_quarter_of_the_requested_rate():
    q = rate_quality([WindowRate(1, 100.0, 501, int(501 * 3.8 * 5), 5.0, 5.0)], 100.0, None)
    stack, proc = discount_stack_findings([_finding("py-spy (chrometrace, sampled thread-time)"),
                                           _finding("process collector (psutil)")], DataQuality(pyspy=q))
    assert stack.confidence < 0.3 and "Lower confidence" in stack.summary and "3.8 Hz" in stack.summary
    assert proc.confidence == 0.9 and proc.summary == "s."
    fine = rate_quality([WindowRate(1, 100.0, 4, 4 * 90 * 5, 5.0, 5.0)], 100.0, None)
    assert discount_stack_findings([_finding("py-spy")], DataQuality(pyspy=fine))[0].confidence == 0.9


def test_process_collector_gaps_longer_than_three_intervals():
    t = [0.0, 0.1, 0.2, 1.4, 1.5, 1.6, 2.5]
    q = process_gaps([ProcessReading(t_ns=int(1e9 + x * 1e9), period_s=0.1) for x in t], None)
    assert q.gaps == 2 and q.gap_max_s == 1.2 and q.gaps_statement and "longest 1.2 s" in q.gaps_statement
    assert process_gaps([ProcessReading(t_ns=int(1e9 + x * 1e9)) for x in t], 1.0).gaps == 0  # 1 s interval


def _span(i: int, start: int, dur: int) -> dict:
    return {"trace_id": f"{i:032x}", "span_id": f"{i:016x}", "parent_span_id": None, "name": "request",
            "kind": "server", "start_ns": start, "end_ns": start + dur, "status": "unset"}


def test_qps_and_latency_over_the_part_of_the_window_the_kept_spans_cover():
    """1000 requests/s for 10 s; the agent kept the first 1.15 s and dropped the rest."""
    t0 = 10**18
    kept = [_span(i, t0 + i * 10**6, 5 * 10**6) for i in range(1150)]
    ss = parse_spans(map(span_record, kept))
    window = (t0, t0 + 10 * 10**9)
    agent = {"name": "agent", "counts": {"spans_dropped": 8850, "spans_dropped_ranges_ns": [[t0 + 1_155_000_000,
                                                                                             t0 + 10 * 10**9]]}}
    cov = span_coverage(_entries(agent, {"name": "process", "counts": {"records": 3}}), window, ss.spans)
    assert cov is not None and abs(cov.covered_s - 1.155) < 1e-6 and cov.producers == ("agent",)
    assert request_summary(ss, window)["qps"] < 120  # the whole window: ~115 QPS, a tenth of the truth
    summary = request_summary(ss, window, cov.covered)
    assert 990 <= summary["qps"] <= 1010 and summary["window_s"] == cov.covered_s
    assert 4.5 <= summary["in_flight_measured_mean"] <= 5.5  # Little: 1000/s x 5 ms
    assert "1.16 s of the 10.00 s" in cov.statement() and "over the covered" in cov.statement()
    # a producer that said how many, not when: the kept spans' own range is the covered part
    unknown = span_coverage(_entries({"name": "otlp", "counts": {"spans_dropped": 10}}), window, ss.spans)
    assert unknown is not None and not unknown.ranges_known and abs(unknown.covered_s - 1.154) < 0.01
    assert span_coverage(_entries({"name": "agent", "counts": {"spans_dropped": 0}}), window, ss.spans) is None


def test_a_stack_shared_by_threads_is_labelled_with_a_name_py_spy_read():
    from diagnose.signals.cpu import _threads_label

    assert _threads_label({"?", "Thread-7 (process_request_thread)", "Thread-9"}) == \
        "3 threads, e.g. Thread-7 (process_request_thread)"
    assert _threads_label({"?"}) == "?" and _threads_label({"MainThread"}) == "MainThread"
