"""Hostile or torn inputs to compare, the performance file, sweep/plan, the cost line and the
Perfetto export: each is refused with one line or read around, never a traceback (exit 1 would
read as a regression)."""
from __future__ import annotations

import json
import shutil
import sys

import pytest

from diagnose.bundle.records.spans import span_record
from diagnose.capacity.sweep import CommandDriver, SweepError, choose_rates
from diagnose.compare.diff import compare
from diagnose.compare.perf_file import MARKER, PerfFileError, read_state
from diagnose.demo.openloop import Endpoint, OpenLoopError
from diagnose.pipeline import analyse
from diagnose.render import render
from diagnose.render.markdown.environment import cost_line
from diagnose.signals.spans.analytics import parse_spans
from helpers import REPO

sys.path.insert(0, str(REPO / "tests" / "render"))
from trace_event_format import check_trace  # noqa: E402


def _span(**kw):
    return {"trace_id": "a" * 32, "span_id": "b" * 16, "parent_span_id": None, "name": "GET /", "kind": "server",
            "start_ns": 1_800_000_000_000_000_000, "end_ns": 1_800_000_000_010_000_000, **kw}


def test_spans_with_times_past_int64_or_ids_that_are_not_strings_are_counted_not_parsed():
    ss = parse_spans(map(span_record, [_span(), _span(start_ns=2**70, end_ns=2**70 + 1), _span(parent_span_id=[1]),
                                       _span(span_id={"x": 1})]))
    assert len(ss.spans) == 1 and ss.invalid == {"time_out_of_range": 1, "bad_id": 2}


@pytest.fixture
def bundle(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(REPO / "fixtures/cpu/service-json", b)
    return b


def _manifest(b, **kw):
    m = json.loads((b / "manifest.json").read_text())
    m.update(kw)
    (b / "manifest.json").write_text(json.dumps(m))


def test_a_span_stamped_at_the_epoch_and_a_cpu_counter_that_went_back(bundle):
    m = json.loads((bundle / "manifest.json").read_text())
    lo = m["started_ns"]
    good = [_span(span_id=f"{i:016x}", start_ns=lo + i * 10**7, end_ns=lo + i * 10**7 + 5 * 10**6)
            for i in range(1, 50)]
    (bundle / "spans.jsonl").write_text("\n".join(json.dumps(s) for s in [*good, _span(start_ns=1, end_ns=2)]) + "\n")
    doc = json.loads(render(analyse(bundle), "perfetto"))
    assert check_trace(doc) == [] and doc["otherData"]["events_outside_capture_dropped"] == 2  # its b and e
    recs = (bundle / "process.jsonl").read_text().splitlines()
    bad = json.loads(recs[5])
    bad["cpu_user_s"] = -1e6
    recs[5] = json.dumps(bad)
    (bundle / "process.jsonl").write_text("\n".join(recs) + "\n")
    cpu = compare(analyse(REPO / "fixtures/cpu/service-json"), analyse(bundle)).metric("cpu")
    assert cpu.band is not None and cpu.band < 20  # the torn reading is not noise of 10^8 %


@pytest.mark.parametrize("cost", [{"wall_s": 10**400, "diagnose_cpu_s": 1}, {"wall_s": float("inf")},
                                  {"wall_s": 3.0, "diagnose_cpu_s": 1.0, "max_rss_bytes": 10**400}])
def test_cost_lines_from_hostile_numbers(bundle, cost):
    _manifest(bundle, cost=cost, budget={"pct_of_core": 10**400, "changes": 5})
    rep = analyse(bundle)
    line = cost_line(rep)
    assert line.startswith("**Cost of this capture**") and len(line) < 400
    json.loads(render(rep, "json"), parse_constant=lambda c: pytest.fail(f"{c} in findings.json"))


def test_cost_line_names_the_parse_ahead_child(bundle):
    """The parsing child's CPU (manifest cost.parse_ahead_cpu_s, counted in children_cpu_s) is said in the
    cost line, not folded into "py-spy; the live view's analyses" (a --no-tui capture has no live view)."""
    _manifest(bundle, cost={"wall_s": 15.0, "diagnose_cpu_s": 0.3, "children_cpu_s": 1.14, "parse_ahead_cpu_s": 0.35})
    line = cost_line(analyse(bundle))
    assert "the parse-ahead child" in line and "0.35 s of it parsing" in line, line
    _manifest(bundle, cost={"wall_s": 15.0, "diagnose_cpu_s": 0.3, "children_cpu_s": 1.14})
    assert "of it parsing" not in cost_line(analyse(bundle))  # an older bundle without the figure


def test_the_cost_line_says_the_time_to_verdict_only_when_the_attach_measured_it(bundle):
    """Issue 24: the verdict within 1 s of the capture's end, said in each report the attach writes
    (Report.verdict_after_s, set by pipeline._attach); a later analysis of the bundle cannot know it.
    Not in findings.json, which stays byte for byte what `diagnose analyze` makes of the bundle."""
    from dataclasses import replace

    later = analyse(bundle)
    assert "verdict came" not in cost_line(later)
    rep = replace(later, verdict_after_s=0.4167)
    assert cost_line(rep).endswith(" The verdict came 0.42 s after the capture ended."), cost_line(rep)
    assert render(rep, "json") == render(later, "json")  # findings.json stays what `analyze` makes of the bundle


@pytest.mark.parametrize("block", ['{"service": "s", "history": [NaN]}', "[" * 5000 + "]" * 5000,
                                   '{"service": "s", "v": ' + "9" * 400 + "}"])
def test_performance_file_state_blocks_that_are_not_diagnose_s(tmp_path, block):
    p = tmp_path / "perf.md"
    p.write_text(f"# x\n\n{MARKER} v1\n{block}\n-->\n")
    with pytest.raises(PerfFileError):
        read_state(p)


def test_sweep_inputs_that_are_not_loads():
    for rates, lo, hi in (("1e12,1e13,1e14,1e15", None, None), (None, 0.0001, 0.0009), (None, 1e-300, 1e300)):
        with pytest.raises(SweepError):
            choose_rates(rates, lo, hi, 6)
    for url in ("http://127.0.0.1:99999/", "http://[::1/"):
        with pytest.raises(OpenLoopError):
            Endpoint.parse(url)
    for out in ('{"throughput": 1' + "0" * 400 + ', "p99_ms": 1}', "[" * 200_000, '{"throughput": 5, "p99_ms": 1, '
                '"requests": 1e308, "errors": 1e308}'):
        try:
            step = CommandDriver._parse(out, 10.0)
        except SweepError:
            continue
        assert step.requests is None  # absurd counts are not counts
