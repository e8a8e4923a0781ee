"""Account fixes the demo's scenarios showed: a thread's own consumer loop waiting on its queue waits
for work (not on another thread), and an event loop awaiting an unbatched model worker is its queue."""
from __future__ import annotations

import pytest

from diagnose.account.pieces import _in_work_loop
from diagnose.account.threads import AWAITED_MIN, QUEUED_MIN, _queued
from diagnose.model import Quadrant
from diagnose.signals.stacks import Frame

ROOT = (Frame("Thread._bootstrap", "/usr/lib/python3.11/threading.py", 1002),
        Frame("Thread._bootstrap_inner", "/usr/lib/python3.11/threading.py", 1045),
        Frame("Thread.run", "/usr/lib/python3.11/threading.py", 982))
GET = (Frame("Queue.get", "/usr/lib/python3.11/queue.py", 171),
       Frame("Condition.wait", "/usr/lib/python3.11/threading.py", 327))


def test_a_threads_own_loop_waiting_on_its_queue_waits_for_work():
    target = Frame("ModelWorker._run", "/srv/worker.py", 49)
    assert _in_work_loop((*ROOT, target, *GET))


def test_a_wait_on_another_threads_result_or_deeper_in_the_code_is_not_waiting_for_work():
    target = Frame("ModelWorker._run", "/srv/worker.py", 49)
    event = (Frame("Event.wait", "/usr/lib/python3.11/threading.py", 629),
             Frame("Condition.wait", "/usr/lib/python3.11/threading.py", 327))
    assert not _in_work_loop((*ROOT, target, *event))  # waiting for a result: a handoff
    helper = Frame("fetch_next", "/srv/worker.py", 80)
    assert not _in_work_loop((*ROOT, target, helper, *GET))  # not the thread's own loop
    assert not _in_work_loop((Frame("<module>", "/srv/main.py", 3), Frame("main", "/srv/main.py", 9), *GET))


def test_a_timer_waiting_for_its_time_waits_for_work():
    timer = (Frame("Timer.run", "/usr/lib/python3.11/threading.py", 1399),
             Frame("Event.wait", "/usr/lib/python3.11/threading.py", 629),
             Frame("Condition.wait", "/usr/lib/python3.11/threading.py", 331))
    assert _in_work_loop((*ROOT[:2], *timer))


def test_an_event_loop_awaiting_half_the_model_time_is_a_queue_handler_threads_need_two_workers_worth():
    assert _queued("await", AWAITED_MIN * 10, 10) and not _queued("await", AWAITED_MIN * 10 - 0.1, 10)
    assert _queued("handoff", QUEUED_MIN * 10, 10) and not _queued("handoff", AWAITED_MIN * 10, 10)
    assert not _queued("lock", 100, 10)


def test_cpu_op_time_mostly_below_one_flop_per_byte_is_bandwidth_not_compute():
    from diagnose.account.threads import CPU_MEMORY_BOUND_TIME_PCT, _model_kinds
    from diagnose.model import Signal

    def sig(v, gpu=None):
        return {"kernels.low_intensity_time_pct": Signal("kernels.low_intensity_time_pct", v, "%", "t"),
                "kernels.group_share_pct[compute]": Signal("kernels.group_share_pct[compute]", gpu, "%", "t")}

    assert _model_kinds(sig(95.0))["cpu.compute"].quadrant == Quadrant.BANDWIDTH  # elementwise adds, batch-1 decode
    assert _model_kinds(sig(CPU_MEMORY_BOUND_TIME_PCT - 1)) == {}  # mostly batched matmuls: compute, as before
    assert _model_kinds(sig(95.0, gpu=70.0)) == {}  # a GPU kernel timeline: its own account decides
    assert _model_kinds({}) == {}  # no torch trace: unchanged


def test_the_llm_verdict_names_the_phase_that_leads():
    import msgspec

    from diagnose.model import Layer, Verdict
    from diagnose.results.spans import LlmDetail, LlmPhases, TokenLatency
    from diagnose.verdict.llm_phases import with_llm_phases

    v = Verdict(Quadrant.BANDWIDTH, Layer.MODEL, {}, 0.7, "bandwidth-bound: act on the model layer first.")
    llm = LlmDetail(phases=LlmPhases(generation_s=5.0, ttft_share_pct=50.0, queue_share_pct=35.0,
                                     prefill_share_pct=15.0, decode_share_pct=50.0),
                    ttft=TokenLatency(count=9, p50_ms=20.0, p99_ms=80.0),
                    tpot=TokenLatency(count=9, p50_ms=6.5, p99_ms=9.0),
                    output_tokens=90.0, output_tokens_per_s=None)
    head = with_llm_phases(v, llm).headline
    assert "queue 35%, prefill 15%" in head and "decode 50% (TPOT P50 6.5 ms" in head
    assert "decode leads" in head  # 50 of the model's 65%: the queue before them is apart
    first = msgspec.structs.replace(llm, phases=LlmPhases(generation_s=5.0, ttft_share_pct=70.0, queue_share_pct=0.0,
                                                          prefill_share_pct=70.0, decode_share_pct=30.0))
    assert "prefill leads" in with_llm_phases(v, first).headline and "queue" not in with_llm_phases(v, first).headline
    assert with_llm_phases(v, msgspec.structs.replace(llm, phases=None)) is v and with_llm_phases(v, None) is v
    unknown = Verdict(Quadrant.UNKNOWN, None, {}, 0.0, "No verdict.")
    assert with_llm_phases(unknown, llm) is unknown


def test_an_event_loop_awaits_only_while_a_request_span_is_open():
    """A healthy service's loop waited in epoll with 8 idle keep-alive connections: the accepted
    connections said "requests open" all the time and the whole wait read as IO. Spans say when."""
    from diagnose.account.pieces import OpenRequests, _split_open

    spans = OpenRequests([100, 300], [150, 320])  # two requests' union: [100, 150) and [300, 320)
    assert _split_open(0, 400, spans) == [(0, 100, "idle.work"), (100, 150, "await"), (150, 300, "idle.work"),
                                          (300, 320, "await"), (320, 400, "idle.work")]
    assert _split_open(120, 130, spans) == [(120, 130, "await")]
    assert _split_open(160, 290, spans) == [(160, 290, "idle.work")]
    assert _split_open(310, 500, spans) == [(310, 320, "await"), (320, 500, "idle.work")]


def test_with_spans_sampled_an_idle_loop_awaits_the_sampled_out_requests_by_their_in_flight():
    """The demo's service scenario read as IO once the agent sampled its spans 1 in 2: with the spans
    set aside, the accepted (keep-alive) connections said "a request open" all the time. Now the kept
    traces say when one was open, and the sampled-out ones' in-flight the share of the rest."""

    from diagnose.account.pieces import OpenRequests, _split_open

    half = OpenRequests([100], [200], unseen=0.25)
    assert _split_open(0, 400, half) == [(0, 25, "await"), (25, 100, "idle.work"), (100, 200, "await"),
                                         (200, 250, "await"), (250, 400, "idle.work")]
    assert _split_open(0, 400, OpenRequests([100], [200])) == [(0, 100, "idle.work"), (100, 200, "await"),
                                                               (200, 400, "idle.work")]


def test_open_requests_of_a_sampled_bundle_are_the_kept_traces_and_the_rest_by_littles_law(tmp_path):
    import math
    import random

    from diagnose.agent.inproc.spanbudget import hex_kept
    from diagnose.bundle import Bundle, BundleWriter
    from diagnose.signals.thread_time import open_requests

    rng, t0 = random.Random(5), 1_700_000_000 * 10**9
    w = BundleWriter(tmp_path)
    kept = []
    for i in range(2000):  # a request every 5 ms, each open 1.5 ms: 0.3 in flight
        tid = f"{rng.getrandbits(128):032x}"
        start = t0 + i * 5_000_000
        w.stream("spans.jsonl").write({"trace_id": tid, "span_id": f"{i + 1:016x}", "parent_span_id": None,
                                       "name": "POST /predict", "kind": "server", "start_ns": start,
                                       "end_ns": start + 1_500_000, "status": "unset", "attributes": {},
                                       "events": [], "source": "agent"})
        if hex_kept(tid, 1 / 4):
            kept.append(start)
    w.write_manifest({"schema_version": 1, "started_ns": t0, "ended_ns": t0 + 10**10, "collectors": [
        {"name": "agent", "state": "ok", "counts": {"spans_keep_fraction": 0.25,
                                                     "spans_keep_history": [[t0, 0.25]]}}]})
    w.close()
    o = open_requests(Bundle.open(tmp_path))
    assert o is not None and o.starts == kept  # only the final sample's traces, each its own interval
    # the kept quarter is 0.075 in flight, the other three quarters 0.225: P(one open) = 1 - e^-0.225
    assert o.unseen == pytest.approx(1 - math.exp(-0.225), rel=0.1)


def test_a_thread_read_in_a_futex_whose_cpu_time_covers_it_ran_through_those_readings():
    """The compute scenario read as service about one run in three: its model worker was read asleep in
    a futex (a GIL handoff between two ops) at 45% of its instants inside ``Linear.forward``, while /proc
    said it used 11.9 s of CPU against 6.5 s of sampled running: the futex readings were instants."""
    from diagnose.account.corrections import ran_through_futex
    from diagnose.account.pieces import Piece
    from diagnose.signals.threads import Reading, ThreadUsage

    s = 10**9
    worker = [Piece(1, 0, 6 * s, "cpu.compute"), Piece(1, 6 * s, 11 * s, "wait.gil", "cpu.compute"),
              Piece(1, 11 * s, 20 * s, "idle.work")]
    readings = [Reading(0, "running", None, None), Reading(20 * s, "lock_wait", "futex_do_wait", None)]
    out, n = ran_through_futex(worker, {1: ThreadUsage(1, cpu_s=11.9, readings=readings)})
    assert n == 1 and [(p.start_ns, p.end_ns, p.kind) for p in out] == [
        (0, 6 * s, "cpu.compute"), (6 * s, 11 * s, "cpu.compute"), (11 * s, 20 * s, "idle.work")]
    # two Python threads taking turns on the GIL: each used only the CPU of its running half
    turns = [Piece(2, 0, 5 * s, "cpu.python"), Piece(2, 5 * s, 10 * s, "wait.gil", "cpu.python")]
    out, n = ran_through_futex(turns, {2: ThreadUsage(2, cpu_s=5.05, readings=readings)})
    assert n == 0 and out == turns
    # in between: 2 of the 5 waiting seconds ran
    out, _ = ran_through_futex(turns, {2: ThreadUsage(2, cpu_s=7.0, readings=readings)})
    assert [(p.start_ns, p.end_ns, p.kind) for p in out] == [
        (0, 5 * s, "cpu.python"), (5 * s, 7 * s, "cpu.python"), (7 * s, 10 * s, "wait.gil")]


def test_the_agents_profiler_holds_are_cut_out_of_the_target_threads_time(tmp_path):
    """The llm scenario read as service: its model worker's GIL and lock waits fell, 75% of them, inside
    the agent's own torch window stop and export (a 745 ms hold): the observer's cost, not the service's."""
    from diagnose.account.corrections import outside
    from diagnose.account.pieces import Piece
    from diagnose.agent.inproc.torchwin import YIELD_S
    from diagnose.bundle import Bundle, BundleWriter
    from diagnose.signals.thread_time import profiler_holds

    ms = 1_000_000
    w = BundleWriter(tmp_path)
    w.stream("torch.jsonl").write({"file": "torch/trace-0001.json", "start_ns": 100 * ms, "stopping_ns": 200 * ms,
                                   "end_ns": 300 * ms, "export_wall_s": 0.1})
    w.stream("torch.jsonl").write({"file": "torch/imported.json", "start_ns": 0, "end_ns": 900 * ms})  # no hold said
    w.write_manifest({"schema_version": 1, "collectors": []})
    w.close()
    holds = profiler_holds(Bundle.open(tmp_path))
    lo = 300 * ms + int(YIELD_S * 1e9)
    assert holds == [(200 * ms, 300 * ms), (lo, lo + 100 * ms)]
    out, cut = outside([Piece(1, 0, 1000 * ms, "wait.gil", "cpu.compute"), Piece(2, 500 * ms, 600 * ms, "lock")],
                        holds)
    assert cut == 200 * ms
    assert [(p.tid, p.start_ns, p.end_ns, p.kind) for p in out] == [
        (1, 0, 200 * ms, "wait.gil"), (1, 300 * ms, lo, "wait.gil"), (1, lo + 100 * ms, 1000 * ms, "wait.gil"),
        (2, 500 * ms, 600 * ms, "lock")]


def test_unbatched_is_requests_queueing_for_the_worker_at_least_as_long_as_it_serves_them():
    """The unbatched scenario at 3.2 in flight (70% queue, 25% model) read as the model's own time under
    the in-flight bound of 4; the batch-1 LLM (24% queue, 74% model) is decode, not a queue."""
    from diagnose.account.threads import UNBATCHED_MIN_IN_FLIGHT, _unbatched
    from diagnose.model import Signal

    def sig(queue=None, model=None, in_flight=3.2, batch=1.0):
        vals = {"cpu.model_workers": 1.0, "torch.model_batch_p50": batch, "spans.in_flight_mean": in_flight,
                "spans.stage_share_pct[queue]": queue, "spans.stage_share_pct[model]": model}
        return {k: Signal(k, v, "", "test") for k, v in vals.items()}

    assert _unbatched(sig(70.0, 25.0)) and not _unbatched(sig(24.0, 74.0, in_flight=9.0))
    assert not _unbatched(sig(70.0, 25.0, batch=8.0))  # batched: a queue, but not for want of batching
    assert not _unbatched(sig()) and _unbatched(sig(in_flight=UNBATCHED_MIN_IN_FLIGHT))  # no stage spans


def test_an_event_loop_whose_cpu_goes_to_socket_calls_still_awaits_its_upstream():
    """The event loop awaiting a slow upstream (a new connection per request) read no load in CI: py-spy
    saw it running in 0.4% of its samples (the socket system calls read as idle), under the 0.5% that
    marks a loop serving nobody, while /proc said it used 9% of a core. Its /proc CPU counts as ran."""
    from diagnose.account.corrections import idle_loops
    from diagnose.account.pieces import Piece
    from diagnose.signals.threads import Reading, ThreadUsage

    s = 10**9
    loop = [Piece(1, 0, s // 250, "cpu.python"), Piece(1, s // 250, 4 * s, "await")]
    readings = [Reading(0, "sleeping", "ep_poll", None), Reading(4 * s, "sleeping", "ep_poll", None)]
    assert [p.kind for p in idle_loops(loop)] == ["cpu.python", "idle.work"]  # py-spy alone: serves nobody
    busy = {1: ThreadUsage(1, cpu_s=0.36, readings=readings)}
    assert [p.kind for p in idle_loops(loop, busy)] == ["cpu.python", "await"]
    idle = {1: ThreadUsage(1, cpu_s=0.004, readings=readings)}  # a keep-alive loop that ran nothing
    assert [p.kind for p in idle_loops(loop, idle)] == ["cpu.python", "idle.work"]
