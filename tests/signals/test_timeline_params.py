"""Analysis parameters (gap, kernel-wait and short-kernel thresholds) overridden through
``--thresholds``: they change the signals on real traces, are recorded in findings.json, and a bad
key or value is one error line with exit code 2."""
from __future__ import annotations

import json
import math

import pytest

from diagnose.rules import RULES
from diagnose.signals.kernel_timeline import trace_signals
from diagnose.signals.params import DEFAULT_PARAMS, PARAM_KEYS, ParamError, with_overrides
from diagnose.traces.reader import read_trace
from diagnose.traces.report import analyze_trace
from diagnose.verdict.evaluate import ThresholdError
from diagnose.verdict.overrides import split_overrides
from helpers import run_diagnose
from kineto_helpers import CPU_ONLY, NCCL, shared


def _json(tmp_path, name: str, doc) -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def _analyze(tmp_path, trace: str, *extra: str) -> dict:
    res = run_diagnose("analyze", trace, "--format", "json", "--out", str(tmp_path), *extra)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_params_parse_to_ns_and_report_what_changed():
    p = with_overrides({"timeline:gpu_gap_min_us": 250, "timeline:kernel_wait_max_us": 0.5})
    assert p.timeline.gap_min_ns == 250_000 and p.timeline.kernel_wait_ns == 500
    assert p.timeline.short_kernel_ns == DEFAULT_PARAMS.timeline.short_kernel_ns
    assert p.changed() == {"timeline:gpu_gap_min_us": 250.0, "timeline:kernel_wait_max_us": 0.5}
    assert DEFAULT_PARAMS.changed() == {}
    assert {k.key: DEFAULT_PARAMS.value(k.key) for k in PARAM_KEYS} == {
        "timeline:gpu_gap_min_us": 100, "timeline:torch_op_gap_min_us": 1000,
        "timeline:kernel_wait_max_us": 30, "timeline:short_kernel_max_us": 10}
    for bad in (0, -5, math.inf, math.nan, 1e-4):
        with pytest.raises(ParamError):
            with_overrides({"timeline:gpu_gap_min_us": bad})


def test_overrides_split_into_params_and_rule_thresholds():
    rule_key = "service.gpu_starved_by_host:gpu.idle_pct"
    params, rules = split_overrides({"timeline:short_kernel_max_us": 20, rule_key: 50.0}, RULES)
    assert params.timeline.short_kernel_ns == 20_000 and rules == {rule_key: 50.0}
    with pytest.raises(ThresholdError, match=r"unknown threshold 'timeline:gap_us'; known: .*timeline:gpu_gap_min_us"):
        split_overrides({"timeline:gap_us": 1}, RULES)


def test_gap_kernel_wait_and_short_kernel_overrides_change_the_nccl_signals(tmp_path):
    """The A100 DDP trace: 872 GPU idle gaps >= 100 us by default."""
    trace = str(shared(NCCL))
    base = _analyze(tmp_path / "a", trace)
    over = _json(tmp_path, "t.json", {"timeline:gpu_gap_min_us": 1000, "timeline:kernel_wait_max_us": 5,
                                      "timeline:short_kernel_max_us": 50})
    new = _analyze(tmp_path / "b", trace, "--thresholds", over)
    b, n = base["details"]["torch_traces"][0], new["details"]["torch_traces"][0]
    assert b["idle_gaps"]["count"] == 872 and b["idle_gaps"]["min_gap_us"] == 100
    assert n["idle_gaps"]["min_gap_us"] == 1000 and 0 < n["idle_gaps"]["count"] < 100
    assert new["signals"]["gpu.idle_gap_share"]["value"] < base["signals"]["gpu.idle_gap_share"]["value"]
    assert ">= 1000 us" in new["signals"]["gpu.idle_gap_share"]["source"]
    kernel_wait = [sum(s["kernel_wait_ns"] for s in t["idle_by_stream"]) for t in (b, n)]
    assert kernel_wait[1] < kernel_wait[0] and n["kernel_wait_max_us"] == 5
    short = [d["signals"]["kernels.short_kernel_pct"] for d in (base, new)]
    assert short[1]["value"] > short[0]["value"] and "shorter than 50 us" in short[1]["source"]
    assert new["data_quality"]["analysis"]["params"] == {
        "timeline:gpu_gap_min_us": 1000.0, "timeline:kernel_wait_max_us": 5.0, "timeline:short_kernel_max_us": 50.0}
    assert base["data_quality"]["analysis"]["params"] == {}


def test_torch_op_gap_override_on_a_cpu_only_trace():
    reports = [analyze_trace(read_trace(shared(CPU_ONLY)), options=o.timeline) for o in (
        DEFAULT_PARAMS, with_overrides({"timeline:torch_op_gap_min_us": 1}))]
    assert [r.gaps.min_gap_ns for r in reports] == [1_000_000, 1_000]
    assert len(reports[1].gaps.start_ns) > len(reports[0].gaps.start_ns)
    share = [trace_signals([r], "")["torch.op_idle_gap_share"].value for r in reports]
    assert share[1] > share[0]


def test_report_applies_the_same_overrides(tmp_path):
    _analyze(tmp_path, str(shared(NCCL)))
    bundle = next(p for p in tmp_path.iterdir() if p.name.startswith("diagnose-"))
    over = _json(tmp_path, "t.json", {"timeline:gpu_gap_min_us": 500})
    res = run_diagnose("report", str(bundle), "-f", "json", "--thresholds", over)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["data_quality"]["analysis"]["params"] == {"timeline:gpu_gap_min_us": 500.0}
    assert doc["details"]["torch_traces"][0]["idle_gaps"]["min_gap_us"] == 500


@pytest.mark.parametrize("content, message", [
    ({"timeline:gpu_gap_us": 200}, "unknown threshold 'timeline:gpu_gap_us'; known: analysis parameters"),
    ({"nope:x": 1}, "unknown threshold 'nope:x'; known: "),
    ({"timeline:gpu_gap_min_us": 0}, "must be a positive finite number"),
    ({"timeline:kernel_wait_max_us": -3}, "must be a positive finite number"),
    ('{"timeline:short_kernel_max_us": NaN}', "is not a finite number"),
    ('{"service.gpu_starved_by_host:gpu.idle_pct": Infinity}', "is not a finite number"),
    ({"timeline:gpu_gap_min_us": "200"}, "not a number"),
    ({"timeline:gpu_gap_min_us": 1e-6}, "below 1 ns"),
    ("[1, 2]", "expected a JSON object"),
])
def test_bad_keys_and_values_exit_2_with_one_line(tmp_path, content, message):
    bad = _json(tmp_path, "bad.json", content)
    res = run_diagnose("analyze", str(shared(CPU_ONLY)), "--out", str(tmp_path), "--thresholds", bad)
    assert res.returncode == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("diagnose: error: ") and message in lines[0], res.stderr
    assert not any(p.name.startswith("diagnose-") for p in tmp_path.iterdir())  # checked before importing


def test_attach_and_report_check_the_file_first(tmp_path):
    bad = _json(tmp_path, "bad.json", {"timeline:nope_us": 1})
    for args in (("attach", "999999999", "--duration", "1"), ("report", str(tmp_path))):
        res = run_diagnose(*args, "--thresholds", bad)
        assert res.returncode == 2 and "unknown threshold 'timeline:nope_us'" in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1


def test_help_names_every_parameter():
    text = " ".join(run_diagnose("analyze", "--help").stdout.split())
    assert all(p.key in text for p in PARAM_KEYS)
