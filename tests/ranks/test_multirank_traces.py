"""`diagnose analyze` over rank traces derived from a real one: the per-rank table, the straggler
table and the job verdict find exactly the rank made late, with the lag and skew it was given."""
from __future__ import annotations

import json

import jsonschema
import pytest
from rank_traces import derive_ranks

from diagnose.pipeline import analyse, documents
from diagnose.ranks.fanout import Fanout
from diagnose.render.findings_json import findings_schema
from kineto_helpers import NCCL, load

LAG_US = 20_000.0


@pytest.fixture(scope="module")
def job_bundle(tmp_path_factory):
    from diagnose.bundle.importers import import_files

    d = tmp_path_factory.mktemp("ranks")
    paths = derive_ranks(load(NCCL), d, world=8, straggler=5, lag_us=LAG_US)
    out = d / "out"
    out.mkdir()
    return import_files(paths, out)


@pytest.fixture(scope="module")
def report(job_bundle):
    return analyse(job_bundle, None, Fanout(workers=1))


def test_straggler_table_names_exactly_the_late_rank_with_its_lag(report):
    job = report.analysis.details.ranks
    assert job["world"] == 8 and [r["rank"] for r in job["ranks"]] == list(range(8))
    late = [s for s in job["stragglers"] if s["straggler"]]
    assert [s["rank"] for s in late] == [5]
    s5 = late[0]
    assert s5["collective_lag_ns"] == pytest.approx(LAG_US * 1e3, abs=50_000)  # +/- 50 us (the jitter)
    assert s5["step_lag_ns"] == pytest.approx(LAG_US * 1e3, abs=1_000)
    assert s5["last_arrivals"] == s5["collectives_matched"] == 21
    assert all(s["wait_ns"] > 20 * LAG_US * 1e3 for s in job["stragglers"] if s["rank"] != 5)
    assert job["verdict"]["bound"] == "straggler" and job["verdict"]["ranks"] == [5]
    assert job["verdict"]["headline"].startswith("rank 5 holds the job back")


def test_straggler_finding_and_signals(report):
    sig = report.analysis.signals
    assert sig["gpu.straggler_lag_ms"].value == pytest.approx(LAG_US / 1e3, abs=0.05)
    assert sig["gpu.sync_skew_pct"].value > 80
    assert "secondary.straggler_rank" in {f.rule_id for f in report.analysis.findings}


def test_skew_is_separated_from_true_communication(report):
    c = report.analysis.details.ranks["collectives"]
    assert c["matched_by"] == "occurrence" and c["collectives"] == 21 and c["unmatched"] == 0
    # every collective: the waiting ranks' kernels last LAG longer; that is skew, not data moving
    assert c["skew_ns"] / c["collectives"] == pytest.approx(LAG_US * 1e3, rel=0.01)
    assert c["true_comm_ns"] < 0.2 * c["comm_ns"]


def test_per_rank_breakdown_adds_up_and_has_a_verdict(report):
    for r in report.analysis.details.ranks["ranks"]:
        assert r["compute_ns"] + r["communication_ns"] + r["memcpy_ns"] + r["other_ns"] + r["idle_ns"] == r["span_ns"]
        assert r["verdict"] in ("compute", "communication", "memcpy", "idle") and r["collectives"] == 21


def test_text_markdown_and_json_carry_the_job(report):
    from diagnose.render.ranks import rank_lines

    lines = rank_lines(report.analysis.details.ranks)
    assert lines[0].startswith("job of 8 ranks: straggler: rank 5 holds the job back")
    assert any(line.split()[:2] == ["5", "yes"] for line in lines)
    docs = documents(report)
    assert "## Ranks" in docs["report.md"] and "rank 5 holds the job back" in docs["report.md"]
    doc = json.loads(docs["findings.json"])
    jsonschema.validate(doc, findings_schema())
    assert doc["details"]["ranks"]["verdict"]["ranks"] == [5]


def test_sequence_numbers_match_collectives_when_present(tmp_path):
    from diagnose.bundle.importers import import_files

    paths = derive_ranks(load(NCCL), tmp_path, world=3, straggler=1, lag_us=5_000.0, seq=True)
    (tmp_path / "out").mkdir()
    job = analyse(import_files(paths, tmp_path / "out"), None, Fanout(workers=1)).analysis.details.ranks
    assert job["collectives"]["matched_by"] == "seq" and job["collectives"]["collectives"] == 21
    assert [s["rank"] for s in job["stragglers"] if s["straggler"]] == [1]


@pytest.mark.slow  # a live CLI run (~5 s on 2 cores); fast siblings: the tests above, test_trace_dir_*
def test_cli_analyzes_a_directory_of_rank_traces_in_a_pool(tmp_path):
    from helpers import run_diagnose

    d = tmp_path / "traces"
    d.mkdir()
    derive_ranks(load(NCCL), d, world=3, straggler=2, lag_us=8_000.0)
    (d / "rank-9.pt.trace.json.gz").symlink_to(d / "rank-0.pt.trace.json.gz")  # never followed
    (tmp_path / "out").mkdir()
    r = run_diagnose("analyze", str(d), "--out", str(tmp_path / "out"), "--workers", "2")
    assert r.returncode == 0, r.stderr
    assert "job of 3 ranks: straggler: rank 2 holds the job back" in r.stdout
    assert "stragglers (lag: start after the median rank's):" in r.stdout


def test_trace_dir_lists_regular_traces_only_and_a_bundle_stays_a_bundle(tmp_path):
    from diagnose.bundle.importers import ImportFailed, is_bundle_input, trace_dir_files

    (tmp_path / "rank-1.json.gz").write_bytes(b"x")
    (tmp_path / "rank-0.json").write_bytes(b"x")
    (tmp_path / "notes.txt").write_bytes(b"x")
    (tmp_path / "rank-2.json.gz").symlink_to(tmp_path / "rank-1.json.gz")
    assert not is_bundle_input([tmp_path])
    assert [p.name for p in trace_dir_files(tmp_path)] == ["rank-0.json", "rank-1.json.gz"]
    (tmp_path / "manifest.json").write_text("{}")
    assert is_bundle_input([tmp_path])
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "x.json").symlink_to(tmp_path / "rank-0.json")
    with pytest.raises(ImportFailed, match="no regular"):
        trace_dir_files(empty)


def test_a_clock_shift_is_an_offset_caveat_not_a_straggler(tmp_path):
    # every timestamp of rank 2 moved by 20 ms and nothing else: the others' collective kernels
    # (0.01-6 ms) end before rank 2 "arrives", so nobody waited for it: its host clock is ahead
    from diagnose.bundle.importers import import_files

    paths = derive_ranks(load(NCCL), tmp_path, world=3, straggler=2, clock_shift_us=LAG_US)
    (tmp_path / "out").mkdir()
    a = analyse(import_files(paths, tmp_path / "out"), None, Fanout(workers=1)).analysis
    job = a.details.ranks
    assert not any(s["straggler"] for s in job["stragglers"]) and job["verdict"]["bound"] != "straggler"
    s2 = next(s for s in job["stragglers"] if s["rank"] == 2)
    assert s2["clock_offset_ns"] == pytest.approx(LAG_US * 1e3, abs=50_000)
    assert abs(s2["collective_lag_ns"]) < 100_000 and abs(s2["step_lag_ns"]) < 100_000  # aligned before comparing
    assert any(n.startswith("clock offset between ranks: rank 2 +20.0 ms") for n in job["notes"])
    # no rank's wait exceeds what its collective kernels ran (46.9 ms over 21 in this trace)
    kernels_ns = sum(e["dur"] for e in load(NCCL)["traceEvents"]
                     if e.get("cat") == "kernel" and str(e.get("name", "")).startswith("nccl")) * 1e3
    assert all(s["wait_ns"] <= kernels_ns + 1_000 for s in job["stragglers"])
    assert a.signals["gpu.straggler_lag_ms"].value == 0.0
    assert "secondary.straggler_rank" not in {f.rule_id for f in a.findings}


def test_explicit_traces_from_different_jobs_form_no_job(tmp_path):
    # a V100 training rank from April and a CPU-only rank from July of another year: given as
    # files (not a directory), they still do not belong together, so there is no job of 2 ranks
    from diagnose.bundle.importers import import_files
    from kineto_helpers import CPU_ONLY, RANK0, shared

    a = analyse(import_files([shared(RANK0), shared(CPU_ONLY)], tmp_path), None, Fanout(workers=1)).analysis
    assert a.details.ranks is None
    warning = a.data_quality.torch.traces_apart
    assert "do not belong together" in warning and "window from Unix 1721065960 s" in warning
    assert warning.endswith(f"left apart: trace-0002.json.gz ({CPU_ONLY})")
    assert f"reads trace-0001.json.gz ({RANK0})" in warning
