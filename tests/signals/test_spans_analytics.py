"""Span analytics on spans recorded by the real OpenTelemetry SDK (in-memory exporter) and GC
pauses from the agent's real gc.callbacks recorder, converted by the agent's record converter."""
from __future__ import annotations

import gc
import json
import time

import msgspec
import pytest

from diagnose.agent.inproc.gcpause import GcRecorder
from diagnose.agent.inproc.spans import span_record
from diagnose.bundle import Bundle, BundleWriter
from diagnose.bundle.records import spans as span_records
from diagnose.bundle.streams import GC, SPANS
from diagnose.results.spans import LlmDetail
from diagnose.signals.spans.analytics import Span, parse_spans, request_summary
from diagnose.signals.spans.llm import llm_summary
from diagnose.signals.spans.tail import tail_summary
from diagnose.signals.timeline import timeline_signals
from diagnose.verdict.analyze import analyze

REQUESTS = 60
SLOW_EVERY = 30  # requests 0 and 30 are slow: long queue, big body, a GC pause inside
# The slow queue wait dwarfs any scheduling stall a loaded CI host adds to the other stages, so the
# tail's dominant stage stays the queue (a 40 ms wait once lost to a stalled 4 ms model stage).
SLOW_QUEUE_S = 0.3
TOKENS = 21


def _serve(tracer, n: int) -> None:
    from opentelemetry import trace

    slow = n % SLOW_EVERY == 0
    with tracer.start_as_current_span("POST /generate", kind=trace.SpanKind.SERVER) as root:
        root.set_attribute("http.request.body.size", 50_000 if slow else 1_000)
        with tracer.start_as_current_span("queue"):
            time.sleep(SLOW_QUEUE_S if slow else 0.001)
        with tracer.start_as_current_span("tokenize"):
            time.sleep(0.002)
        with tracer.start_as_current_span("generate") as gen:
            gen.set_attribute("gen_ai.usage.output_tokens", TOKENS)
            time.sleep(0.002)
            gen.add_event("first_token")
            time.sleep(0.002)
            if slow:
                junk = []
                for _ in range(2_000):
                    node: list = []
                    node.append(node)
                    junk.append(node)
                del junk
                gc.collect(0)  # young generation only: a short, real pause
        with tracer.start_as_current_span("serialize_response"):
            time.sleep(0.0005)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "spans-test"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    recorder = GcRecorder()
    # Only the slow requests' explicit gc.collect(0) may pause: an automatic full collection of the
    # whole pytest heap (0.5 s seen late in a loaded run) would land in whichever stage allocated.
    gc.collect()
    gc.freeze()
    gc.disable()
    started = time.time_ns()
    recorder.install()
    try:
        for n in range(REQUESTS):
            _serve(tracer, n)
    finally:
        recorder.remove()
        gc.enable()
        gc.unfreeze()
    ended = time.time_ns()
    path = tmp_path_factory.mktemp("spans") / "b"
    path.mkdir()
    w = BundleWriter(path)
    for s in exporter.get_finished_spans():
        w.stream("spans.jsonl").write(span_record(s))
    now = time.time_ns()
    for bad in ({"end_ns": None}, {"end_ns": now - 10**9}, {"start_ns": now - 25 * 3600 * 10**9}):
        rec = span_record(exporter.get_finished_spans()[0])
        rec.update({"start_ns": now, "span_id": "f" * 16}, **bad)
        w.stream("spans.jsonl").write(rec)
    for p in recorder.drain():
        w.stream("gc.jsonl").write(p)
    w.write_manifest({"schema_version": 1, "started_ns": started, "ended_ns": ended, "collectors": []})
    w.close()
    return Bundle.open(path)


def _parsed(bundle):
    ss = parse_spans(bundle.typed(SPANS))
    m = bundle.manifest
    return ss, request_summary(ss, (m["started_ns"], m["ended_ns"]))


def test_latency_percentiles_qps_and_littles_law(bundle):
    ss, s = _parsed(bundle)
    assert ss.invalid == {"no_end_time": 1, "end_before_start": 1, "longer_than_24h": 1}
    assert s["requests"] == REQUESTS
    lat = s["latency"]
    assert 6.0 <= lat["p50_ms"] <= lat["p90_ms"] <= lat["p95_ms"] <= lat["p99_ms"] <= lat["p999_ms"] <= lat["max_ms"]
    assert lat["max_ms"] >= SLOW_QUEUE_S * 1e3 and lat["p50_ms"] < 40.0
    assert s["qps"] == pytest.approx(REQUESTS / s["window_s"])
    # every request lies inside the window, so the sweep and Little's law agree
    assert s["in_flight_measured_mean"] == pytest.approx(s["in_flight_littles_law"], rel=0.02)
    assert s["in_flight_measured_max"] == 1.0  # one request at a time
    assert s["by_name"][0]["name"] == "POST /generate"


def test_stage_breakdown(bundle):
    _, s = _parsed(bundle)
    st = s["stage_share_pct"]
    assert st["queue"] > st["postprocess"] > 0 and st["preprocess"] > 0 and st["model"] > 0
    assert st["network"] == st["db"] == 0
    assert sum(st.values()) + s["unstaged_pct"] == pytest.approx(100.0, abs=0.5)


def test_tail_analysis_names_stage_size_and_gc(bundle):
    ss, _ = _parsed(bundle)
    pauses = [(p.start_ns, p.end_ns) for p in bundle.typed(GC)]
    assert pauses
    tail = tail_summary(ss.requests, pauses)
    assert tail["requests"] == 1 and tail["cut_ms"] >= SLOW_QUEUE_S * 1e3
    assert tail["dominant_stage"] == "queue" and tail["grown_stage"] == "queue"
    assert tail["size_attribute"]["attribute"] == "http.request.body.size"
    assert tail["size_attribute"]["ratio"] == 50.0
    assert tail["gc_overlap_pct"] == 100.0 and tail["gc_share_of_tail_time_pct"] > 0


def test_ttft_and_tpot_from_first_token_events(bundle):
    ss, s = _parsed(bundle)
    llm = llm_summary(ss.spans, s["window_s"])
    assert llm["ttft"]["count"] == REQUESTS
    assert 2.0 <= llm["ttft"]["p50_ms"] < 10.0
    gen = [x for x in ss.spans if x.name == "generate"]
    ev = (gen[1].events[0].t_ns or 0) - gen[1].start_ns
    assert llm["tpot"]["p50_ms"] > 0
    assert llm["output_tokens"] == TOKENS * REQUESTS
    assert ev > 0


def test_ttft_and_tpot_from_gen_ai_attributes():
    from diagnose.signals.spans.analytics import Span

    span = Span(trace_id="t" * 32, span_id="s" * 16, name="chat", kind="server", start_ns=0, end_ns=2_000_000_000,
                status="ok", attributes={"gen_ai.server.time_to_first_token": 0.25, "gen_ai.usage.output_tokens": 101})
    llm = llm_summary([span], 2.0)
    assert llm["ttft"]["p50_ms"] == 250.0
    assert llm["tpot"]["p50_ms"] == pytest.approx((2000.0 - 250.0) / 100)
    assert llm["output_tokens_per_s"] == pytest.approx(50.5)


def test_span_signals_rules_and_report(bundle):
    r = timeline_signals(bundle)
    sig = r.signals
    assert sig["spans.p99_ms"].known and sig["spans.p99_ms"].unit == "ms"
    assert sig["spans.qps"].value > 0 and sig["spans.tail_gc_overlap_pct"].value == 100.0
    assert sig["spans.tail_gc_overlap_excess_pct"].value >= 80.0  # only the slow requests collected
    assert sig["llm.ttft_p50_ms"].known and sig["llm.tpot_p99_ms"].known
    assert sig["gpu.idle_pct"].value is None and "no torch profiler trace" in sig["gpu.idle_pct"].reason
    a = analyze(bundle)
    assert any(f.rule_id == "secondary.gc_in_tail" for f in a.findings)
    assert not any("request latency" in n.what for n in a.not_judged)
    doc = json.loads(json.dumps(a.to_json()))
    assert "points more than requests overall" in next(f["summary"] for f in doc["findings"]
                                                        if f["rule_id"] == "secondary.gc_in_tail")
    assert doc["details"]["requests"]["latency"]["count"] == REQUESTS


def test_generation_time_splits_at_the_first_token_into_prefill_and_decode():
    from diagnose.signals.spans.analytics import Span
    from diagnose.signals.spans.source import llm_signals

    # two generations of 1 s: 0.1 s then 0.3 s to the first token -> 20% before it, 80% decode
    spans = [Span(trace_id="t" * 32, span_id=f"s{i}" * 8, name="generate", kind="server", start_ns=0,
                  end_ns=1_000_000_000, status="ok",
                  attributes={"gen_ai.server.time_to_first_token": ttft, "gen_ai.usage.output_tokens": 33})
             for i, ttft in enumerate((0.1, 0.3))]
    llm = llm_summary(spans, 2.0)
    assert llm["phases"]["ttft_share_pct"] == pytest.approx(20.0)
    assert llm["phases"]["decode_share_pct"] == pytest.approx(80.0)
    assert llm["phases"]["generation_s"] == pytest.approx(2.0)
    queue = Span(trace_id="t" * 32, span_id="q" * 16, parent_span_id="s0" * 8, name="queue", start_ns=0,
                 end_ns=50_000_000, status="ok")
    split = llm_summary([*spans, queue], 2.0)["phases"]  # 50 ms of the first 100 ms waited in a queue span
    assert split["queue_share_pct"] == pytest.approx(2.5) and split["prefill_share_pct"] == pytest.approx(17.5)
    sig = llm_signals(msgspec.convert(llm, LlmDetail))
    assert sig["llm.decode_share_pct"].value == pytest.approx(80.0) and sig["llm.decode_share_pct"].unit == "%"
    get = Span(trace_id="t" * 32, span_id="x" * 16, name="get", kind="server", start_ns=0, end_ns=10, status="ok")
    assert llm_summary([get], 1.0)["phases"] is None


def test_stage_union_of_few_intervals_matches_the_numpy_merge():
    import random

    from diagnose.signals.spans.analytics import SMALL_UNION, _union

    rng = random.Random(7)
    for _ in range(300):
        iv = [(a, a + rng.randint(-5, 50)) for a in (rng.randint(0, 200) for _ in range(rng.randint(1, 12)))]
        big = iv * (SMALL_UNION // len(iv) + 1)  # the same union through the numpy path
        assert len(big) > SMALL_UNION and _union(iv) == _union(big)
    assert _union([(0, 10), (5, 20), (30, 40)]) == 30 and _union([(10, 5)]) == 0


@pytest.mark.timeout(10)
def test_span_ids_that_make_a_cycle_end_the_request_walk():
    """Span ids come from the target: a span naming itself as its parent, or two spans naming each
    other, used to loop the request-tree walk forever (found by the break-it review)."""
    t, tid = 10**18, "1" * 32

    def rec(span_id: str, parent: str | None, name: str, dur_ms: int) -> dict:
        return {"trace_id": tid, "span_id": span_id, "parent_span_id": parent, "name": name, "kind": "internal",
                "start_ns": t, "end_ns": t + dur_ms * 10**6, "status": "ok", "attributes": {}, "events": []}

    recs = [rec("a" * 16, None, "GET /", 10), rec("a" * 16, "a" * 16, "preprocess", 5),
            rec("b" * 16, "c" * 16, "x", 1), rec("c" * 16, "b" * 16, "y", 1)]
    ss = parse_spans(map(span_records.span_record, recs))
    (req,) = ss.requests  # the cycle b <-> c has no root: no request
    assert req.span.name == "GET /"


def test_gc_pauses_every_request_overlaps_do_not_explain_the_tail():
    """New-user trial: "100% overlap a GC pause (all: 100%)" was a finding at confidence 1.00."""
    from diagnose.model import Signal
    from diagnose.rules import RULES
    from diagnose.verdict.evaluate import evaluate

    def fired(tail_pct: float, all_pct: float) -> bool:
        sig = {"spans.tail_gc_overlap_pct": Signal("spans.tail_gc_overlap_pct", tail_pct, "%", "test"),
               "spans.tail_gc_overlap_excess_pct": Signal("spans.tail_gc_overlap_excess_pct", tail_pct - all_pct,
                                                          "%", "test")}
        return any(f.rule_id == "secondary.gc_in_tail" for f in evaluate(RULES, sig)[0])

    assert fired(100.0, 5.0) and not fired(100.0, 100.0) and not fired(20.0, 0.0)


def test_requests_that_all_ended_outside_the_capture_window_give_no_qps(tmp_path):
    """Break-it review: spans shifted by +5 h gave their latencies beside "QPS 0" and "in-flight 0",
    and `compare --fail-on qps=-5%` failed (exit 1) on that 0. Now QPS is unknown and the report says why."""
    from diagnose.agent.inproc.records import make_record
    from diagnose.bundle import BundleWriter

    t0, ms = 1_700_000_000 * 10**9, 10**6
    w = BundleWriter(tmp_path)
    for i in range(40):
        start = t0 + 5 * 3600 * 10**9 + i * 20 * ms  # five hours after the capture
        w.stream("spans.jsonl").write(make_record(
            trace_id=f"{i + 1:032x}", span_id=f"{i + 1:016x}", parent_span_id=None, name="POST /x", kind="server",
            start_ns=start, end_ns=start + 5 * ms, status="ok", attributes={}, events=[], service="s",
            source="import"))
    w.write_manifest({"schema_version": 1, "started_ns": t0, "ended_ns": t0 + 10**10, "collectors": []})
    w.close()
    a = analyze(Bundle.open(tmp_path))
    assert a.signals["spans.p50_ms"].value == pytest.approx(5.0)
    for n in ("spans.qps", "spans.in_flight_mean"):
        assert a.signals[n].value is None and "ended inside the capture window" in a.signals[n].reason, n
    assert "none of the 40 requests" in a.data_quality.spans.outside_window


def test_a_span_line_of_the_wrong_shape_costs_only_itself(tmp_path):
    """Typed span records: ``"events": 5`` (a hostile target writes spans.jsonl) raised TypeError in the
    analysis; now a field of the wrong type gets its default, a line that is not an object is torn, and
    the spans left out are counted by reason as before."""
    t0, ms = 1_700_000_000 * 10**9, 10**6
    w = BundleWriter(tmp_path)
    ok = {"trace_id": "1" * 32, "span_id": "2" * 16, "name": "POST /x", "kind": "server", "start_ns": t0 + ms,
          "end_ns": t0 + 6 * ms, "status": "ok", "source": "import"}
    for rec in ({**ok, "events": 5, "attributes": [1]}, {**ok, "span_id": "3" * 16, "end_ns": None},
                {**ok, "span_id": "4" * 16, "end_ns": "6"}, {**ok, "span_id": 4}):
        w.stream(SPANS.name).write(rec)
    w.write_manifest({"schema_version": 1, "started_ns": t0, "ended_ns": t0 + 10**9, "collectors": []})
    w.close()
    with open(tmp_path / SPANS.name, "ab") as f:
        f.write(b"[1]\n")
    b = Bundle.open(tmp_path)
    (span, *rejected) = b.typed(SPANS)
    assert span.events == () and span.attributes == {} and span.dur_ns == 5 * ms
    assert [r.reject for r in rejected] == ["no_end_time", "bad_time", "bad_id"]
    a = analyze(b)
    assert a.signals["spans.p50_ms"].value == pytest.approx(5.0)
    assert a.data_quality.spans.invalid == {"no_end_time": 1, "bad_time": 1, "bad_id": 1}
    assert b.torn_lines == {SPANS.name: 1} and b.invalid_records == {}


@pytest.mark.parametrize("attributes", [
    {"gen_ai.server.time_to_first_token": 1e308}, {"gen_ai.server.time_per_output_token": 1e308},
    {"gen_ai.usage.output_tokens": 10**400}, {"http.request.body.size": 10**400}])
def test_a_span_attribute_too_large_for_a_float_costs_only_itself(tmp_path, attributes):
    """One span's attribute of 10**400 (an int msgspec decodes, float() cannot convert) or a TTFT of
    1e308 s (int(inf) ns) raised OverflowError in timeline_signals: every span signal was lost and
    the verdict was "no request spans" (found by the break-it review). Now such a value is no value."""
    t0, ms = 1_700_000_000 * 10**9, 10**6
    w = BundleWriter(tmp_path)
    for i in range(40):
        a = t0 + i * 20 * ms
        w.stream(SPANS.name).write({"trace_id": f"{i:032x}", "span_id": "1" * 16, "name": "POST /x", "kind": "server",
                                    "start_ns": a, "end_ns": a + (10 if i else 300) * ms,
                                    "attributes": {"http.request.body.size": 1000 * (1 + 9 * (i == 0)),
                                                   "gen_ai.usage.output_tokens": 20, **(attributes if i == 3 else {})}})
        w.stream(SPANS.name).write({"trace_id": f"{i:032x}", "span_id": "2" * 16, "parent_span_id": "1" * 16,
                                    "name": "generate", "start_ns": a, "end_ns": a + 5 * ms})
    w.write_manifest({"schema_version": 1, "started_ns": t0, "ended_ns": t0 + 10**9, "collectors": []})
    w.close()
    a = analyze(Bundle.open(tmp_path))
    assert a.data_quality.streams.source_errors == {}
    assert a.signals["spans.p50_ms"].value == pytest.approx(10.0)
    assert a.signals["spans.stage_share_pct[model]"].value == pytest.approx(100.0 * 5 * 40 / (39 * 10 + 300))
    tokens = 39 * 20 if "gen_ai.usage.output_tokens" in attributes else 40 * 20  # the roots' tokens, in 1 s
    assert a.signals["llm.output_tokens_per_s"].value == pytest.approx(tokens)
    assert a.signals["llm.tpot_p50_ms"].value is None and a.signals["llm.ttft_p50_ms"].value is None


def _span(tid: str, sid: str, parent: str | None, name: str, start: int, end: int) -> Span:
    return span_records.span_record({"trace_id": tid, "span_id": sid, "parent_span_id": parent, "name": name,
                                     "kind": "internal", "start_ns": start, "end_ns": end})


def _walked_stages(spans: list[Span]) -> list[tuple[str, dict[str, int]]]:
    """The request walk as it was before repeated ids were bounded (span by span from each root):
    the reference for well-formed streams."""
    from collections import defaultdict

    from diagnose.signals.spans.analytics import _union, stage_of

    ids = {(s.trace_id, s.span_id) for s in spans}
    kids: dict = defaultdict(list)
    roots = []
    for s in spans:
        if s.parent_span_id and (s.trace_id, s.parent_span_id) in ids:
            kids[(s.trace_id, s.parent_span_id)].append(s)
        else:
            roots.append(s)
    out = []
    for root in roots:
        by: dict = defaultdict(list)
        seen, todo = {id(root)}, list(kids[(root.trace_id, root.span_id)])
        while todo:
            s = todo.pop()
            if id(s) not in seen:
                seen.add(id(s))
                if stage_of(s):
                    by[stage_of(s)].append((max(s.start_ns, root.start_ns), min(s.end_ns, root.end_ns)))
                todo += kids[(s.trace_id, s.span_id)]
        out.append((root.span_id, {st: _union(iv) for st, iv in by.items()}))
    return out


def test_request_stages_of_well_formed_traces_and_repeated_exports_are_the_span_walk_s():
    """Bounding the walk over repeated ids changes nothing where ids are unique in their trace, nor
    where a whole trace was exported twice (roots sharing an id share its descendants)."""
    import random

    rng = random.Random(11)
    names = ("queue", "tokenize", "generate", "serialize_response", "db.query", "misc")
    for _ in range(60):
        spans: list[Span] = []
        for t in range(rng.randint(1, 6)):
            tid, t0 = f"{t:032x}", 10**18 + rng.randint(0, 10**9)
            tree = [_span(tid, f"{t}r", rng.choice((None, "gone")), "POST /x", t0, t0 + rng.randint(1, 10**6))]
            for n in range(rng.randint(0, 12)):
                a = t0 + rng.randint(-10**5, 10**6)
                tree.append(_span(tid, f"{t}s{n}", rng.choice(tree).span_id, rng.choice(names), a,
                                  a + rng.randint(0, 5 * 10**5)))
            spans += tree * rng.choice((1, 1, 2))  # now and then a retried export: every span twice
        rng.shuffle(spans)
        got = [(r.span.span_id, r.stage_ns) for r in parse_spans(spans).requests]
        assert got == _walked_stages(spans)


@pytest.mark.timeout(60)
def test_spans_repeating_a_few_ids_cost_time_linear_in_the_spans(monkeypatch):
    """A target writes the SPANS stream: 4,000 roots sharing one id over 4,000 children, a chain of
    roots each also the child of the previous one, spans naming their own id as parent. Walking
    every root's descendants span by span read each span once per root (14 s for 8,000 spans, hours
    for 100,000; found by the break-it review); now each span's stage is read once in all."""
    import tracemalloc

    from diagnose.signals.spans import analytics

    calls = [0]
    stage_of = analytics.stage_of

    def counted(s: Span) -> str | None:
        calls[0] += 1
        return stage_of(s)

    monkeypatch.setattr(analytics, "stage_of", counted)
    t, n = 10**18, 4_000
    shared = [_span("T", "A", None, "POST /x", t + i, t + i + 10**6) for i in range(n)]
    shared += [_span("T", f"c{i}", "A", "generate", t + i, t + i + 10) for i in range(n)]
    chain = [_span("T", f"R{i}", None, "POST /x", t, t + 10**6) for i in range(n)]
    chain += [_span("T", f"R{i}", f"R{i - 1}", "generate", t, t + 10) for i in range(1, n)]
    loop = [_span("T", "L", None, "POST /x", t, t + 10**6)] + [_span("T", "L", "L", "generate", t, t + 10)] * n
    for spans in (shared, chain, loop):
        calls[0] = 0
        tracemalloc.start()
        parse_spans(spans)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert calls[0] <= len(spans)
        assert peak < 8 << 20  # the self-parented walk pushed n * n spans on its stack
    shared_ss = parse_spans(shared)
    assert len(shared_ss.requests) == n  # each root clipped to its own time: the family is 10 ns wide
    assert {r.stage_ns["model"] for r in shared_ss.requests} <= set(range(0, n + 11))
    assert shared_ss.requests[0].stage_ns["model"] == 10 + n - 1


def test_spans_that_repeat_an_id_are_stated_in_the_data_quality(tmp_path):
    """A target whose exporter sent a batch twice (or whose id generator repeats): the report says how
    many spans repeat another's (trace id, span id), on the first screen with the other warnings."""
    from diagnose.verdict.data_quality import warnings

    t0, ms = 1_700_000_000 * 10**9, 10**6
    w = BundleWriter(tmp_path)
    for i in range(30):
        a = t0 + i * 20 * ms
        for _ in range(2 if i < 5 else 1):  # the first 5 requests exported twice: 10 spans repeated
            w.stream(SPANS.name).write({"trace_id": f"{i:032x}", "span_id": "1" * 16, "name": "POST /x",
                                        "kind": "server", "start_ns": a, "end_ns": a + 10 * ms})
            w.stream(SPANS.name).write({"trace_id": f"{i:032x}", "span_id": "2" * 16, "parent_span_id": "1" * 16,
                                        "name": "generate", "start_ns": a, "end_ns": a + 5 * ms})
    w.write_manifest({"schema_version": 1, "started_ns": t0, "ended_ns": t0 + 10**9, "collectors": []})
    w.close()
    a = analyze(Bundle.open(tmp_path))
    note = a.data_quality.spans.repeated_ids
    assert note is not None and note.startswith("10 of 70 spans repeat the (trace id, span id) of another")
    assert any(wn.text == note for wn in warnings(a.data_quality))
    assert a.signals["spans.p50_ms"].value == pytest.approx(10.0)  # the analysis goes on
    unique = tmp_path / "unique"
    unique.mkdir(mode=0o700)
    w = BundleWriter(unique)
    w.stream(SPANS.name).write({"trace_id": "1" * 32, "span_id": "1" * 16, "name": "POST /x", "kind": "server",
                                "start_ns": t0, "end_ns": t0 + ms})
    w.write_manifest({"schema_version": 1, "started_ns": t0, "ended_ns": t0 + 10**9, "collectors": []})
    w.close()
    assert analyze(Bundle.open(unique)).data_quality.spans.repeated_ids is None
