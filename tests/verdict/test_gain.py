"""Predicted gains (diagnose/verdict/gain.py): Amdahl's arithmetic on the busiest thread or the
account, the cap where the next thread saturates, no throughput below capacity, batching by the
roofline at the batch Little's law allows, no gain for no load; on the recorded bundles, every
remedy's gain is the arithmetic of its own term, the verdict's first remedy first."""
from __future__ import annotations

from pathlib import Path

import pytest

from diagnose.bundle import Bundle
from diagnose.model import Account, AccountTerm, Layer, Quadrant, Signal, ThreadSummary, Verdict
from diagnose.results.gain import Band, BusiestThread
from diagnose.verdict.analyze import analyze
from diagnose.verdict.gain import REMOVED, gain_for, predict, predict_gains

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
Q, L = Quadrant, Layer


def _sig(**values: float) -> dict[str, Signal]:
    return {k.replace("__", ".").replace("_LB_", "[").replace("_RB_", "]"): Signal(k, v, "", "test")
            for k, v in values.items()}


def _term(kind: str, share: float, q: Quadrant | None = Q.SERVICE, layer: Layer | None = L.SERVICE) -> AccountTerm:
    return AccountTerm(kind, kind, share, share * 10, q, layer, "test")


def _threads(**cpu: float) -> tuple[ThreadSummary, ...]:
    return tuple(ThreadSummary(i, name, pct, None, 10.0, None) for i, (name, pct) in enumerate(cpu.items(), 1))


def _account(*terms: AccountTerm, busiest: dict[str, float] | None = None) -> Account:
    return Account("threads", "t", "thread-s", 10.0, terms,
                   busiest=BusiestThread(tid=1, sampled_s=10.0, kinds=busiest) if busiest else None)


def test_amdahl_on_the_busiest_thread():
    ser = _term("cpu.serialization", 0.3)
    acc = _account(ser, _term("cpu.python", 0.2), _term("idle.work", 0.5, None, None),
                   busiest={"cpu.serialization": 0.5, "cpu.python": 0.5})
    g = predict(ser, "orjson", acc, (acc,), _sig(cpu__max_thread_demand_pct=97.0), ())
    low, high, _ = REMOVED["cpu.serialization"]
    assert g.method == "amdahl" and g.share == 0.5 and g.basis.startswith("busiest thread")
    assert g.throughput_x == Band(low=round(1 / (1 - 0.5 * low), 3), high=round(1 / (1 - 0.5 * high), 3))
    assert g.p50_x is None  # no request spans: no latency predicted


def test_the_next_thread_caps_the_band_and_the_observer_does_not():
    ser = _term("cpu.serialization", 0.6)
    acc = _account(ser, busiest={"cpu.serialization": 0.9})
    threads = _threads(loop=97.0, worker=40.0, **{"diagnose-agent-torch": 90.0, "[native] pool": 95.0})
    threads = (ThreadSummary(1, "loop", 97.0, None, 10.0, None), *threads[1:])
    g = predict(ser, "orjson", acc, (acc,), _sig(cpu__max_thread_demand_pct=97.0), threads)
    assert g.throughput_x.high == 2.5 and "worker, 40% of a core" in g.assumption  # 100 / 40
    assert g.throughput_x.low == round(min(2.5, 1 / (1 - 0.9 * REMOVED["cpu.serialization"][0])), 3)


def test_below_capacity_predicts_latency_not_throughput():
    ser = _term("cpu.serialization", 0.2)
    threads_acc = _account(ser, _term("idle.work", 0.7, None, None), busiest={"cpu.serialization": 0.3})
    requests = Account("requests", "r", "request-s", 5.0, (_term("stage.postprocess", 0.4), _term("stage.model", 0.5)))
    g = predict(ser, "orjson", threads_acc, (threads_acc, requests), _sig(cpu__max_thread_demand_pct=30.0), ())
    low, high, _ = REMOVED["cpu.serialization"]
    assert g.throughput_x is None and "below capacity" in g.assumption
    assert g.p50_x == Band(low=round(1 - 0.4 * high, 3), high=round(1 - 0.4 * low, 3)) and g.p99_x == g.p50_x


def test_batching_by_the_roofline_at_the_batch_littles_law_allows():
    queue = _term("wait.unbatched", 0.4)
    acc = _account(queue, _term("cpu.memory", 0.4, Q.BANDWIDTH, L.MODEL), busiest={"cpu.memory": 0.9})
    sig = _sig(cpu__max_thread_demand_pct=95.0, spans__in_flight_littles_law=32.0,
               kernels__intensity_flop_per_byte=0.5)
    g = predict(queue, "batch", acc, (acc,), sig, ())
    # batch min(32, 16) = 16; per item min(16, 2/0.5) = 4 at the low ridge (x 0.5 efficiency),
    # min(16, 10/0.5) = 16 at the high one
    assert g.method == "batching" and g.throughput_x == Band(low=2.0, high=16.0)
    sig["kernels.intensity_flop_per_byte"] = Signal("k", 5.0, "FLOP/byte", "test")  # near the ridge: little to gain
    assert predict(queue, "batch", acc, (acc,), sig, ()).throughput_x == Band(low=1.0, high=2.0)


def test_no_load_has_no_gain_and_unknown_none():
    acc = _account(_term("idle.work", 0.9, None, None))
    idle = Verdict(Q.NO_LOAD, None, {}, 0.5, "no load", account="threads", remedy="capture under load")
    (g,) = predict_gains(idle, (acc,), {})
    assert g.method == "none" and g.throughput_x is None and g.p50_x is None
    assert predict_gains(Verdict(Q.UNKNOWN, None, {}, 0.0, "x"), (acc,), {}) == ()


def test_the_change_picks_the_remedy_it_names():
    acc = _account(_term("cpu.serialization", 0.5), _term("cpu.tokenization", 0.3), busiest={"cpu.serialization": 1.0})
    v = Verdict(Q.SERVICE, L.SERVICE, {}, 0.8, "x", account="threads", remedy="Replace json with orjson/msgspec")
    gains = predict_gains(v, (acc,), _sig(cpu__max_thread_demand_pct=99.0))
    assert gains[0].term == "cpu.serialization" and len(gains) == 2
    assert gain_for(gains, "switched to a fast Rust tokenizer")[0].term == "cpu.tokenization"
    assert gain_for(gains, "something else")[1].startswith("BASE's first remedy")


BUNDLES = ["cpu/service-json", "cpu/compute-torch", "cpu/io-socket", "gpu/compute-bf16-matmul",
           "gpu/bandwidth-copy-gather", "gpu/io-socket-reads", "gpu/service-tiny-kernels"]


@pytest.mark.parametrize("name", BUNDLES)
def test_recorded_bundles_predict_from_their_own_terms(name):
    a = analyze(Bundle.open(FIXTURES / name))
    v, acc = a.verdict, a.accounts[0]
    assert v.gains and v.gains[0].remedy == v.remedy
    for g in v.gains:
        term = next(t for t in acc.terms if t.kind == g.term)
        assert g.share > 0 and g.removed is not None and g.assumption
        if g.throughput_x is not None:
            assert 1.0 <= g.throughput_x.low <= g.throughput_x.high  # a remedy never predicts a loss
            if g.basis.startswith("busiest thread"):
                assert acc.busiest is not None and g.share == pytest.approx(acc.busiest.kinds[g.term], abs=1e-4)
            raw = 1 / (1 - g.share * g.removed.high)
            assert g.throughput_x.high <= round(raw, 3) + 1e-9  # capped, never raised
        assert term.share >= 0.05


def test_the_json_loop_gains_what_its_serialization_share_allows():
    a = analyze(Bundle.open(FIXTURES / "cpu/service-json"))
    (g,) = a.verdict.gains
    assert g.term == "cpu.serialization" and a.accounts[0].busiest.kinds["cpu.serialization"] == 1.0
    assert g.throughput_x == Band(low=2.5, high=10.0)  # all of the thread: 1 / (1 - 0.6) .. 1 / (1 - 0.9)


def test_the_report_and_the_text_summary_show_the_gain_beside_the_remedy():
    from diagnose.pipeline import analyse
    from diagnose.render import render
    from diagnose.render.account import account_lines

    report = analyse(FIXTURES / "cpu/service-json")
    md, txt = render(report, "md"), "\n".join(account_lines(report.analysis))
    remedy_at = md.index("**First remedy:**")
    assert md.index("**Predicted gain** of the first remedy: throughput 2.50x-10.00x (amdahl: ") > remedy_at
    assert "predicted gain: throughput 2.50x-10.00x" in txt


def test_a_starved_host_gives_back_the_time_waited_for_a_core_first():
    from diagnose.model import OwnReading

    core, ser = _term("wait.core", 0.5, None, L.SYSTEM), _term("cpu.serialization", 0.4)
    acc = _account(core, ser, busiest={"wait.core": 0.5, "cpu.serialization": 0.5})
    own = OwnReading(Q.SERVICE, L.SERVICE, "Replace json with orjson/msgspec", "cpu.serialization", "service-bound")
    v = Verdict(Q.SERVICE, L.SYSTEM, {}, 0.8, "starved", account="threads", remedy="Give it dedicated cores",
                dedicated=own)
    gains = predict_gains(v, (acc,), _sig(cpu__max_thread_demand_pct=100.0))
    low, high, _ = REMOVED["wait.core"]
    assert gains[0].remedy == "Give it dedicated cores" and gains[0].method == "cores" and gains[0].share == 0.5
    assert gains[0].throughput_x == Band(low=round(1 / (1 - 0.5 * low), 3), high=round(1 / (1 - 0.5 * high), 3))
    # the target's own remedy next, on its busy time (the core wait left out): all of it serialization
    assert gains[1].term == "cpu.serialization" and gains[1].share == 1.0


def test_other_remedies_are_shortened_between_words():
    from diagnose.render.gain import other_gains
    from diagnose.results.gain import Band, PredictedGain

    long = "Profile the top Python functions below and vectorize or cache the hottest ones"
    line = other_gains((PredictedGain(remedy="first", term="a", method="amdahl", throughput_x=Band(low=1.1, high=1.2)),
                        PredictedGain(remedy=long, term="b", method="amdahl", throughput_x=Band(low=1.0, high=1.1))),
                       "first")
    assert line is not None and "Profile the top Python functions below and vectorize or…" in line, line
