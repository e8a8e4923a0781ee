"""CPU-only traces: time the host spends in collectives (gloo/MPI record_function labels) while no
torch op runs is communication, not Python between ops (an account term of its own, IO / engine), and
a step loop whose steps all-reduce is a training loop (its remedies in training wording)."""
from __future__ import annotations

from diagnose.bundle import Bundle
from diagnose.bundle.importers import import_files
from diagnose.verdict.analyze import analyze
from kineto_helpers import write

MS = 1000.0  # Kineto timestamps are us


def _ev(name: str, cat: str, tid: int, start_ms: float, dur_ms: float) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": 1e9 + start_ms * MS, "dur": dur_ms * MS}


def _analyze(tmp_path, events):
    trace = write(tmp_path / "t.pt.trace.json.gz", {"schemaVersion": 1, "deviceProperties": []}, events)
    return analyze(Bundle.open(import_files([trace], tmp_path / "out")))


def _events(step: bool) -> list[dict]:
    ev = [_ev("aten::mm", "cpu_op", 1, 0, 10), _ev("aten::add", "cpu_op", 1, 95, 5),
          _ev("gloo:all_reduce", "user_annotation", 2, 5, 85)]  # 5 ms of it overlaps the first op
    return ([_ev("ProfilerStep#3", "user_annotation", 1, 0, 100)] if step else []) + ev


def test_host_collectives_are_their_own_term_and_lead_a_step_loop(tmp_path):
    a = _analyze(tmp_path, _events(step=True))
    s = a.signals
    assert s["torch.op_idle_pct"].value == 85.0  # 100 ms window, 15 ms of ops
    assert s["torch.host_comm_pct"].value == 80.0  # 85 ms of all-reduce less the 5 ms inside an op
    terms = {t.kind: round(t.share, 3) for t in a.accounts[0].terms}
    assert terms == {"torch.comm": 0.8, "torch.ops": 0.15, "torch.between_ops": 0.05}
    v = a.verdict
    assert (v.quadrant.value, v.layer.value) == ("io", "engine")
    assert s["torch.training_ops_pct"].value > 0.5 and v.remedy.startswith("Overlap gradient collectives")


def test_without_steps_the_all_reduce_is_no_training_signal(tmp_path):
    a = _analyze(tmp_path, _events(step=False))
    assert a.signals["torch.training_ops_pct"].value == 0.0
    assert a.signals["torch.host_comm_pct"].value == 80.0 and a.verdict.quadrant.value == "io"
    assert not a.verdict.remedy.startswith("Overlap gradient collectives")


# Hostile traces (regressions)

def _terms(a) -> dict[str, float]:
    return {t.kind: round(t.share, 3) for t in a.accounts[0].terms}


def test_collectives_recorded_as_ops_are_communication_not_compute(tmp_path):
    # record_param_comms and c10d::allreduce_ are cpu_op events in real traces (HTA's rank-0, nccl_data)
    a = _analyze(tmp_path, [_ev("aten::mm", "cpu_op", 1, 0, 10), _ev("record_param_comms", "cpu_op", 2, 10, 40),
                            _ev("c10d::allreduce_", "cpu_op", 3, 50, 40), _ev("aten::add", "cpu_op", 1, 95, 5)])
    assert a.signals["torch.op_idle_pct"].value == 85.0 and a.signals["torch.host_comm_pct"].value == 80.0
    assert _terms(a) == {"torch.comm": 0.8, "torch.ops": 0.15, "torch.between_ops": 0.05}
    assert (a.verdict.quadrant.value, a.verdict.layer.value) == ("io", "engine")


def test_a_trace_of_collectives_only_is_all_communication(tmp_path):
    a = _analyze(tmp_path, [_ev("gloo:all_reduce", "user_annotation", 2, 0, 80),
                            _ev("gloo:broadcast", "user_annotation", 3, 10, 90)])
    assert a.signals["torch.op_idle_pct"].value == 100.0 and a.signals["torch.host_comm_pct"].value == 100.0
    assert _terms(a) == {"torch.comm": 1.0}
    assert (a.verdict.quadrant.value, a.verdict.layer.value) == ("io", "engine")


def test_absurd_names_that_start_like_a_collective_are_none(tmp_path):
    # TraceView.name_mask reads 512 characters: there the pattern's `$` would hold on a 10 kB name
    events = [_ev("aten::mm", "cpu_op", 1, 0, 10), _ev("gloo:" + "a" * 10_000 + " not a collective", "user_annotation",
                                                       2, 10, 40),
              _ev("gloo:" + "a" * 10_000, "user_annotation", 3, 50, 40), _ev("aten::add", "cpu_op", 1, 95, 5),
              _ev("ProfilerStep#1", "user_annotation", 1, 0, 100),
              _ev("c10d::allreduce_" + "x" * 10_000, "user_annotation", 4, 10, 80)]
    a = _analyze(tmp_path, events)
    assert a.signals["torch.host_comm_pct"].value == 0.0 and a.signals["torch.training_ops_pct"].value == 0.0
    assert _terms(a) == {"torch.between_ops": 0.85, "torch.ops": 0.15}


def test_overlapping_collectives_on_many_threads_count_once(tmp_path):
    events = [_ev("aten::mm", "cpu_op", 1, 0, 10), _ev("aten::add", "cpu_op", 1, 95, 5)]
    events += [_ev("gloo:all_reduce", "user_annotation", t, 5 + t, 80) for t in range(2, 8)]  # 7..92 ms
    events += [_ev("gloo:all_reduce", "user_annotation", 9, 50, 0)]  # zero duration: nothing
    a = _analyze(tmp_path, events)
    assert a.signals["torch.host_comm_pct"].value == 82.0  # 10..92 ms
    shares = _terms(a)
    assert all(0 < v <= 1 for v in shares.values()) and sum(shares.values()) <= 1.0 + 1e-9


def test_gpu_trace_steps_that_all_reduce_keep_their_serving_reading(tmp_path):
    # on a GPU trace the all-reduce names no training step (tensor-parallel serving all-reduces too)
    kernel = {"ph": "X", "cat": "kernel", "name": "void add_kernel<float>()", "pid": 0, "tid": 7,
              "ts": 1e9 + 20 * MS, "dur": 5 * MS, "args": {"device": 0, "stream": 7}}
    events = [_ev("ProfilerStep#1", "user_annotation", 1, 0, 100), _ev("aten::add", "cpu_op", 1, 10, 20),
              _ev("nccl:all_reduce", "user_annotation", 2, 30, 60), kernel]
    a = _analyze(tmp_path, events)
    assert a.signals["torch.training_ops_pct"].value == 0.0
    assert a.signals["torch.host_comm_pct"].value is None  # the CPU-only term stays off GPU traces
