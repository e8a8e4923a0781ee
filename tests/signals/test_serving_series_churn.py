"""Series that come and go within the window (review 15): each labelset's own increase is taken
(its own resets), then summed; a series first seen mid-window counts from its first scrape (as
Prometheus ``increase()``), one that vanishes keeps what it gained and restarts nothing."""
from __future__ import annotations

from diagnose.signals.serving_metrics import serving_metrics

S = 10**9
TTFT = "vllm:time_to_first_token_seconds"
OK = "vllm:request_success"


def _hist(model: str, buckets, total: float) -> dict:
    count = buckets[-1][1]
    return {"name": TTFT, "labels": {"model_name": model}, "buckets": [[le, c] for le, c in buckets],
            "sum": total, "count": count}


def _counter(model: str, value: float) -> dict:
    return {"name": OK, "labels": {"model_name": model}, "value": value}


def _stats(*scrapes):
    recs = [{"kind": "source", "t_ns": 0, "url": "http://127.0.0.1:8000/metrics", "engine": "vllm", "period_s": 1.0}]
    recs += [{"kind": "scrape", "t_ns": i * S, "series": list(series)} for i, series in enumerate(scrapes)]
    sm = serving_metrics(recs)
    assert sm is not None
    return sm


A1 = _hist("a", [(0.1, 1000), ("+Inf", 1000)], 50.0)
A2 = _hist("a", [(0.1, 1010), ("+Inf", 1010)], 50.5)


def test_a_histogram_series_new_mid_window_adds_only_what_it_gained_there():
    """Before: 5010 requests (B's whole history) and B's quantiles; now A's 10 plus B's 0."""
    b2 = _hist("b", [(0.1, 0), (10.0, 5000), ("+Inf", 5000)], 25000.0)
    b3 = _hist("b", [(0.1, 0), (10.0, 5002), ("+Inf", 5002)], 25010.0)
    a3 = _hist("a", [(0.1, 1020), ("+Inf", 1020)], 51.0)
    h = _stats([A1], [A2, b2]).histograms["ttft"]
    assert h.count == 10 and h.p99_s is not None and h.p99_s <= 0.1
    h = _stats([A1], [A2, b2], [a3, b3]).histograms["ttft"]
    assert h.count == 22 and abs(h.mean_s - 11.0 / 22) < 1e-9  # A: 20 / 1.0 s; B: 2 / 10 s


def test_a_histogram_series_that_vanishes_is_no_restart():
    """Before: the summed count went down, read as a restart: 1010 instead of 10."""
    b1 = _hist("b", [(0.1, 5000), ("+Inf", 5000)], 250.0)
    h = _stats([A1, b1], [A2]).histograms["ttft"]
    assert h.count == 10


def test_a_histogram_series_that_restarts_alone_restarts_alone():
    b1 = _hist("b", [(0.1, 5000), ("+Inf", 5000)], 250.0)
    b2 = _hist("b", [(0.1, 3), ("+Inf", 3)], 0.1)  # B's engine restarted: 3 since
    h = _stats([A1, b1], [A2, b2]).histograms["ttft"]
    assert h.count == 13


def test_counters_are_per_series_too():
    r = _stats([_counter("a", 1000)], [_counter("a", 1010), _counter("b", 5000)],
               [_counter("a", 1020), _counter("b", 5001)]).rates["requests"]
    assert r.increase == 21 and r.resets == 0
    r = _stats([_counter("a", 1000), _counter("b", 5000)], [_counter("a", 1010)]).rates["requests"]
    assert r.increase == 10 and r.resets == 0
