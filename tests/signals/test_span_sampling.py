"""Issue 12: spans the agent sampled 1 in N (by trace id, to keep its span work inside its CPU
budget) are a known sample, not dropped spans: the analysis keeps the traces of the final fraction
(whole), scales QPS and counts by N, keeps the window covered, and states the sampling."""
from __future__ import annotations

import random

import pytest

from diagnose.agent.inproc.spanbudget import hex_kept
from diagnose.bundle.records.manifest import manifest_info
from diagnose.bundle.records.spans import span_record
from diagnose.results.quality import DataQuality, SpansQuality
from diagnose.signals.spans.analytics import parse_spans, request_summary
from diagnose.signals.spans.coverage import span_coverage
from diagnose.signals.spans.sampling import agent_sampling, in_sample
from diagnose.verdict.data_quality import warnings

T0 = 1_700_000_000 * 10**9
WINDOW = (T0, T0 + 10 * 10**9)


def _trace(rng: random.Random, start: int, source: str = "agent") -> list[dict]:
    tid = f"{rng.getrandbits(128):032x}"
    root, child = f"{rng.getrandbits(64):016x}", f"{rng.getrandbits(64):016x}"
    base = {"trace_id": tid, "kind": "server", "status": "unset", "attributes": {}, "events": [], "source": source}
    return [{**base, "span_id": child, "parent_span_id": root, "name": "db", "start_ns": start + 10**6,
             "end_ns": start + 3 * 10**6},
            {**base, "span_id": root, "parent_span_id": None, "name": "request", "start_ns": start,
             "end_ns": start + 4 * 10**6}]


def _agent(fraction: float, **counts) -> dict:
    return {"name": "agent", "state": "ok", "counts": {
        "spans_keep_fraction": fraction, "spans_keep_history": [[T0, 1.0], [T0 + 10**8, fraction]],
        "spans_seen": 40_000, "spans_kept": 5_000, "spans_cpu_s": 0.19, "spans_cpu_pct": 1.9,
        "spans_cpu_budget_pct": 2.0, "spans_dropped": 0, **counts}}


def test_the_final_sample_is_kept_whole_and_counts_are_scaled_by_n():
    rng = random.Random(3)
    # 10,000 requests over 10 s (1000/s), all written (the fraction fell to 1/8 after they were)
    records = [r for i in range(10_000) for r in _trace(rng, T0 + i * 10**6)]
    sampling = agent_sampling([_agent(1 / 8)])
    assert sampling is not None and sampling.one_in == 8
    typed = [span_record(r) for r in records]
    kept, left = in_sample(typed, sampling)
    assert left + len(kept) == len(records) and all(hex_kept(r.trace_id, 1 / 8) for r in kept)
    ss = parse_spans(kept)
    assert len(ss.requests) == len(kept) // 2  # whole traces: every kept root has its child, no orphan root
    summary = request_summary(ss, WINDOW, None, sampling.scale)
    assert summary["qps"] == pytest.approx(1000, rel=0.1)  # ~1250 sampled requests x 8 over 10 s
    assert summary["requests_estimated"] == pytest.approx(10_000, rel=0.1)
    assert summary["sampled_one_in"] == 8 and summary["requests"] == len(ss.requests)
    assert summary["latency"]["p50_ms"] == pytest.approx(4.0)  # latency from the sample, unscaled
    assert summary["in_flight_measured_mean"] == pytest.approx(1000 * 0.004, rel=0.15)  # ~4 open at once
    unsampled = request_summary(parse_spans(typed), WINDOW)
    assert unsampled["qps"] == pytest.approx(1000, rel=0.01) and "requests_estimated" not in unsampled

    # sampled-out is not dropped: the window stays covered
    assert span_coverage(manifest_info({"collectors": [_agent(1 / 8)]}).collectors, WINDOW, ss.spans) is None
    dq = DataQuality(spans=SpansQuality(sampled=sampling.statement(), sampling=sampling.quality()))
    [w] = warnings(dq)
    assert w.collectors == ("agent",) and "sampled 1 in 8" in w.text and "scaled by 8" in w.text


def test_other_producers_spans_are_never_filtered_and_a_full_sample_is_no_sampling():
    rng = random.Random(5)
    otlp = [r for i in range(200) for r in _trace(rng, T0 + i * 10**6, source="otlp")]
    agent = [r for i in range(200) for r in _trace(rng, T0 + i * 10**6)]
    sampling = agent_sampling([_agent(1 / 4)])
    kept, left = in_sample(map(span_record, otlp + agent), sampling)
    assert [r for r in kept if r.source == "otlp"] == [span_record(r) for r in otlp] and 0 < left < len(agent)
    assert agent_sampling([_agent(1.0)]) is None
    assert agent_sampling([_agent(0.3)]) is None  # not a fraction the agent can choose: not believed
    assert agent_sampling([_agent(True)]) is None and agent_sampling([{"name": "agent", "counts": "x"}]) is None
