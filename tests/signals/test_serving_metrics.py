"""Serving-engine /metrics -> window statistics and signals, on the project's own recordings
(fixtures/serving-metrics: prometheus_client's HTTP server on 127.0.0.1 under vLLM, SGLang, Triton
and TGI names, tests/record_serving_metrics.py), against the values the simulated requests put in.

Every recording starts with a warm-up the window must leave out (30 requests of 2 s TTFT, 40
preemptions...): a reader that used the last scrape's totals instead of the first-to-last
increase would see them.
"""
from __future__ import annotations

import json
import shutil

import pytest

from diagnose.bundle import Bundle
from diagnose.bundle.records import decoder
from diagnose.bundle.records.serving import ServingScrapeRecord, ServingSeries, ServingSourceRecord
from diagnose.bundle.streams import SERVING
from diagnose.catalogs.serving_fields import Engine, read_page
from diagnose.collectors.serving_metrics import scrape_record
from diagnose.signals.serving import _signals, queue_share, serving_signals
from diagnose.signals.serving_metrics import bucket_quantile, counter_increase, serving_metrics
from helpers import REPO
from serving_sim import recording, window_s


def test_vllm_recording_gives_the_simulated_rates_and_quantiles():
    records, index = recording("vllm")
    sm = serving_metrics(records)
    w = window_s(index)
    truth = index["truth"]
    assert sm.engine is Engine.VLLM and sm.scrapes == 4 and sm.window_s == pytest.approx(w)
    assert sm.rates["requests"].per_s == pytest.approx(truth["counters"]["requests"] / w)  # 60 requests
    assert sm.rates["output_tokens"].per_s == pytest.approx(60 * 128 / w)
    assert sm.rates["preemptions"].increase == 9  # not the warm-up's 40
    # gauges per scrape: running 4, 8, 8, 6 + waiting 2, 5, 7, 4; KV usage 0.90, 0.97, 0.99, 0.98
    assert (sm.gauges["in_flight"].mean, sm.gauges["in_flight"].max) == (11.0, 15.0)
    assert sm.gauges["kv_usage"].mean == pytest.approx(96.0) and sm.gauges["kv_usage"].max == pytest.approx(99.0)
    ttft = sm.histograms["ttft"]
    assert ttft.count == 60 and ttft.mean_s == pytest.approx(truth["histograms"]["ttft"]["sum"] / 60)
    # TTFT window: 24 in (0.025, 0.05], 24 in (0.05, 0.1], 12 in (0.1, 0.25].
    # P50: rank 30, 6 past 24 of the 24 in (0.05, 0.1]: 0.05 + 0.05 x 6/24 = 0.0625
    # P99: rank 59.4, 11.4 past 48 of the 12 in (0.1, 0.25]: 0.1 + 0.15 x 11.4/12 = 0.2425
    assert ttft.p50_s == pytest.approx(0.0625) and ttft.p99_s == pytest.approx(0.2425)
    assert 0.05 < truth["histograms"]["ttft"]["p50"] <= 0.1  # the exact P50 lies in that bucket
    # ITL: 450 in (0.01, 0.025], 144 in (0.025, 0.05], 6 in (0.25, 0.5]: P50 0.01 + 0.015 x 300/450,
    # P99 rank 594 = the top of (0.025, 0.05]
    assert sm.histograms["itl"].p50_s == pytest.approx(0.02) and sm.histograms["itl"].p99_s == pytest.approx(0.05)
    assert queue_share(sm)[0] == pytest.approx(40.0)  # 14 s queued of 35 s end to end per step


@pytest.mark.parametrize("variant, share, extra", [
    ("sglang", 10.0, "serving.gpu_overlap_wait_pct"), ("triton", 30.0, None), ("tgi", 60.0, "serving.tpot_p50_ms")])
def test_each_engine_recording(variant, share, extra):
    records, index = recording(variant)
    sm = serving_metrics(records)
    sig = _signals(sm)
    w = window_s(index)
    assert sm.engine.value == index["engine"]
    assert sig["serving.queue_share_pct"].value == pytest.approx(share)
    assert sig["serving.qps"].value == pytest.approx(index["truth"]["counters"]["requests"] / w)
    if variant == "sglang":  # 0.25 s of GPU wait per step, 3 steps
        assert sig[extra].value == pytest.approx(100 * 0.75 / w)
    if variant == "tgi":  # TPOT per request: 30 x 30 ms in (0.025, 0.05], 30 x 60 ms in (0.05, 0.1]
        assert sig[extra].value == pytest.approx(50.0) and sig["serving.tpot_p99_ms"].value == pytest.approx(99.0)
        assert sig["serving.in_flight_mean"].value == 16.0  # batch 4 + queue 10, 12, 14, 12
    if variant == "triton":  # duration counters: no quantiles, the pending count is its in-flight
        assert not [n for n in sig if n.endswith("_p50_ms")] and sig["serving.waiting_mean"].value == 3.0


def test_restarted_engine_gives_the_same_window_as_an_uninterrupted_one():
    """The engine restarted between scrapes 2 and 3 (every counter and bucket back to 0). Judged
    bucket by bucket, a bucket that refilled to its old count looks unchanged: 20 TTFTs land in
    the +Inf bucket and P99 reads 2.455 s; the restart is decided for the whole histogram."""
    restarted = serving_metrics(recording("vllm-restart")[0])
    plain = serving_metrics(recording("vllm")[0])
    for key in ("ttft", "itl", "tpot", "queue", "e2e"):
        a, b = restarted.histograms[key], plain.histograms[key]
        assert (a.count, a.p50_s, a.p99_s) == pytest.approx((b.count, b.p50_s, b.p99_s)), key
    assert restarted.rates["preemptions"].increase == 9 and restarted.rates["preemptions"].resets == 1


def test_older_vllm_names_read_as_the_same_signals():
    """vLLM before V1: gpu_cache_usage_perc and time_per_output_token_seconds (now ITL)."""
    def old(text: str) -> str:
        return (text.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
                .replace("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"))
    sm = serving_metrics(recording("vllm", old)[0])
    assert sm.gauges["kv_usage"].metric == "vllm:gpu_cache_usage_perc" and sm.gauges["kv_usage"].max == 99.0
    assert sm.histograms["itl"].metric == "vllm:time_per_output_token_seconds"
    assert sm.histograms["itl"].p50_s == pytest.approx(0.02)


def test_counters_without_total_suffix_as_triton_and_tgi_write_them():
    """prometheus_client writes counters as <name>_total; Triton's and TGI's exporters do not."""
    def page(n: int) -> str:
        return (f"# TYPE nv_inference_request_success counter\n"
                f'nv_inference_request_success{{model="m",version="1"}} {100 * n}\n'
                f"# TYPE nv_inference_queue_duration_us counter\n"
                f'nv_inference_queue_duration_us{{model="m",version="1"}} {2e6 * n}\n'
                f"nv_inference_request_duration_us{{model=\"m\",version=\"1\"}} {8e6 * n}\n")
    recs = [scrape_record(i * 1_000_000_000, 0, read_page(page(i))) for i in (1, 2, 3)]
    sm = serving_metrics(recs)
    assert sm.engine is Engine.TRITON and sm.rates["requests"].per_s == pytest.approx(100.0)
    assert sm.rates["queue_total"].increase == pytest.approx(4.0)  # microseconds -> seconds
    assert queue_share(sm)[0] == pytest.approx(25.0)


def test_counter_increase_counts_resets_from_zero():
    assert counter_increase([5, 8, 2, 4]) == (3 + 2 + 2, 1)
    assert counter_increase([7]) == (0.0, 0)


def test_bucket_quantile_edges():
    inf = float("inf")
    assert bucket_quantile(0.5, [(1.0, 2), (2.0, 4), (inf, 4)]) == (1.0, False)
    assert bucket_quantile(0.5, [(1.0, 0), (2.0, 0), (inf, 10)]) == (2.0, True)  # all above the top bound
    assert bucket_quantile(0.5, [(1.0, 0), (inf, 0)]) == (None, False)  # no observation in the window
    assert bucket_quantile(0.5, []) == (None, False)


def test_hand_edited_stream_records_cost_only_themselves():
    """The stream is a file in a bundle anyone may edit: wrong types are skipped, never raised."""
    records, index = recording("vllm")
    records[0]["t_ns"] = index["scrapes"][0]["t_ns"]
    bad = [{"kind": "scrape", "t_ns": "soon", "series": []}, {"kind": "scrape", "t_ns": 5, "series": "x"},
           {"kind": "scrape", "t_ns": 6, "series": [{"name": ["list"]}, {"name": "vllm:num_requests_running",
                                                                        "value": "NaN"},
                                                   {"name": "vllm:e2e_request_latency_seconds",
                                                    "buckets": [["a", 1], [None], 7, [1e400, 2]]}]},
           {"kind": "error", "t_ns": 7, "reason": ["not", "text"]}, {"kind": 3}]
    sm = serving_metrics(records + bad)
    assert sm.engine is Engine.VLLM and sm.scrapes == 4 and len(sm.errors) == 1  # t_ns 6: decades early
    assert sm.window_s == pytest.approx(window_s(index))
    assert sm.histograms["ttft"].count >= 60 and sm.gauges["kv_usage"].max == pytest.approx(99.0)


def _bundle(tmp_path, lines: list[str]) -> Bundle:
    b = tmp_path / "b"
    shutil.copytree(REPO / "fixtures" / "cpu" / "service-json", b)
    (b / SERVING.name).write_text("".join(line + "\n" for line in lines))
    return Bundle.open(b)


def test_the_stream_is_decoded_once_into_its_types_a_malformed_record_dropped_and_counted(tmp_path):
    """Bundle.typed(SERVING): every line one ServingRecord by its kind; a record of the wrong shape is
    dropped and counted (invalid_records), a line that is not JSON is torn; the signals are those of
    the well-formed records."""
    records, _index = recording("vllm")
    bad = [{"kind": "scrape", "t_ns": "soon", "series": []}, {"kind": "nope"}, [1, 2],
           {"kind": "scrape", "t_ns": 9, "series": [{"name": "vllm:num_requests_running", "value": True}]}]
    b = _bundle(tmp_path, [json.dumps(r) for r in records + bad] + ['{"kind": "scr'])
    typed = b.typed(SERVING)
    assert [type(r) for r in typed] == [ServingSourceRecord] + [ServingScrapeRecord] * 4
    assert b.invalid_records == {SERVING.name: 4} and b.torn_lines == {SERVING.name: 1}
    assert typed[1].series[0].labels and all(isinstance(s, ServingSeries) for s in typed[1].series)
    assert serving_signals(b).signals == _signals(serving_metrics(records))


def test_an_absurd_number_on_the_page_costs_that_number_not_the_scrape():
    """The collector keeps any finite number the engine wrote; a reader uses those below MAX_ABS, so
    a hostile 1e305 drops out of its series alone (as before the stream was typed)."""
    def evil(text: str) -> str:
        return text + ('vllm:num_requests_running{model_name="evil"} 1e305\n'
                       'vllm:e2e_request_latency_seconds_bucket{model_name="evil",le="1e305"} 1e306\n')
    records, _index = recording("vllm", evil)
    assert any(s.get("value") == 1e305 for s in records[1]["series"])
    decode = decoder("ServingRecord").decode
    typed = [decode(json.dumps(r).encode()) for r in records]
    assert serving_metrics(typed) == serving_metrics(recording("vllm")[0])
