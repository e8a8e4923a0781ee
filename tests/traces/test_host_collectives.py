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
