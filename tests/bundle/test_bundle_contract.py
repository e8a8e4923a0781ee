"""The bundle contract: one Manifest constructor, one directory naming, streams parsed once per
bundle (py-spy windows too, though two signal sources read them), one reading of the process
counters for the report and the live view."""
from __future__ import annotations

import json
import shutil
import stat
from datetime import datetime, timezone
from pathlib import Path

import pytest

import diagnose.signals.cpu as cpu_source
from diagnose.bundle import (
    IMPORT_LABEL,
    Bundle,
    BundleError,
    BundleWriter,
    CollectorState,
    CollectorStatus,
    Manifest,
    bundle_dir_name,
)
from diagnose.bundle.counters import cpu_since, host_cpu, thread_cpu_s
from diagnose.bundle.records.process import ProcessReading, process_reading
from diagnose.bundle.streams import PROCESS, PYSPY, PYSPY_WINDOWS
from diagnose.signals import extract
from diagnose.signals.process import process_signals, summarize
from diagnose.tui.live.series import ProcessSeries

REPO = Path(__file__).resolve().parents[2]
CPU_FIXTURE = REPO / "fixtures" / "cpu" / "service-json"
WHEN = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def _manifest(**kw) -> Manifest:
    base = dict(target={"pid": 42, "cmdline": ["python", "app.py"]}, started_ns=10**18, ended_ns=10**18 + 5,
                end_reason="duration reached", partial=False, options={"duration_s": 5.0}, command=["diagnose"],
                collectors=[CollectorStatus("process", CollectorState.OK, None, {"records": 3}, [PROCESS.name])])
    return Manifest.build(**{**base, **kw})


def test_manifest_round_trips_through_its_json(tmp_path):
    m = _manifest()
    w = BundleWriter.create(tmp_path, 42, WHEN)
    w.write_manifest(m)
    b = Bundle.open(w.path)
    assert b.typed_manifest == m and b.manifest == m.to_json()
    assert b.collectors["process"].counts == {"records": 3}
    assert m.tool["name"] == "diagnose" and m.schema_version == 1 and "imported_at_ns" not in m.to_json()
    assert stat.S_IMODE((w.path / "manifest.json").stat().st_mode) == 0o600


def test_the_manifest_is_strict_json_when_an_agent_sends_nan_or_infinity(tmp_path):
    """An agent's reply is the target's word: Python's json parses NaN and Infinity in it, and they
    reached the counts as floats. The manifest writes them as null, never as bare tokens."""
    counts = json.loads('{"spans_cpu_pct": NaN, "nested": [1.5, -Infinity, {"x": Infinity}]}')
    m = _manifest(collectors=[CollectorStatus("agent", CollectorState.OK, None, counts, [])])
    w = BundleWriter.create(tmp_path, 42, WHEN)
    w.write_manifest(m)

    def refuse(token):
        raise ValueError(f"not strict JSON: {token}")

    doc = json.loads((w.path / "manifest.json").read_text(), parse_constant=refuse)
    assert doc["collectors"][0]["counts"] == {"spans_cpu_pct": None, "nested": [1.5, None, {"x": None}]}
    assert Bundle.open(w.path).collectors["agent"].counts["nested"][0] == 1.5


def test_manifest_validation_is_the_one_check(tmp_path):
    assert _manifest(started_ns=-1).problem() == "'started_ns' is not a Unix time in ns"
    with pytest.raises(BundleError, match="unknown state"):
        Manifest.from_json({"collectors": [{"name": "x", "state": "sleeping"}]})
    old = Manifest.from_json({"collectors": [], "future_key": 1})
    assert old.command == () and old.to_json()["future_key"] == 1  # lenient, and unknown keys kept
    with pytest.raises(BundleError, match="'command' is not a list of strings"):  # renderers join it
        Manifest.from_json({"collectors": [], "command": "not a list"})


def test_bundle_directories_are_named_in_one_place(tmp_path):
    first = BundleWriter.create(tmp_path, 42, WHEN).path
    second = BundleWriter.create(tmp_path, 42, WHEN).path
    imported = BundleWriter.create(tmp_path, IMPORT_LABEL, WHEN).path
    assert first.name == bundle_dir_name(42, WHEN) == "diagnose-42-20250102T030405Z"
    assert second.name == first.name + "-2" and imported.name == "diagnose-import-20250102T030405Z"
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in (first, second, imported))


def test_a_stream_is_parsed_once_and_torn_lines_counted_once(tmp_path):
    w = BundleWriter.create(tmp_path, 1, WHEN)
    w.write_manifest(_manifest())
    (w.path / PROCESS.name).write_text('{"t_ns": 1}\n{"t_ns": 2}\n{"t_ns": 3, "cpu\n')
    b = Bundle.open(w.path)
    first = b.stream(PROCESS)
    (w.path / PROCESS.name).write_text("")  # the cache, not the file, answers from now on
    assert b.stream(PROCESS) is first and [r["t_ns"] for r in first] == [1, 2]
    assert list(b.records(PROCESS.name)) == list(first)
    assert b.torn_lines == {PROCESS.name: 1}
    with pytest.raises(ValueError):
        b.stream(PYSPY_WINDOWS)


def test_pyspy_windows_are_parsed_once_per_analysis(tmp_path, monkeypatch):
    b = Bundle.open(shutil.copytree(CPU_FIXTURE, tmp_path / "b"))
    windows = b.stream(PYSPY)
    assert windows
    calls = []
    real = cpu_source.segments_from_chrometrace
    monkeypatch.setattr(cpu_source, "segments_from_chrometrace", lambda ev: calls.append(1) or real(ev))
    out = extract(b)  # the cpu and timeline sources both read the windows
    assert len(calls) == len(windows)
    assert out.data_quality.pyspy.stack_segments > 0 and out.signals["stacks.sampled_s"].value > 0


def _record(t_s: float, cpu_s: float, threads: list[list], sys_cpu: dict[str, float]) -> ProcessReading:
    rec = process_reading({"t_ns": int(t_s * 1e9) + 1, "cpu_user_s": cpu_s, "cpu_system_s": 0.0, "threads": threads,
                           "sys_cpu_s": sys_cpu, "ncpu": 2, "rss_bytes": 1})
    assert rec is not None
    return rec


def test_host_busy_leaves_out_guest_time_counted_in_user():
    a = {"user": 10.0, "nice": 0.0, "system": 5.0, "idle": 80.0, "iowait": 5.0, "steal": 0.0,
         "guest": 0.0, "guest_nice": 0.0}
    b = {**a, "user": 30.0, "idle": 100.0, "guest": 20.0}  # 20 s of user time was a guest's
    h = host_cpu(a, b)
    assert h.busy_pct == pytest.approx(50.0) and h.iowait_pct == 0.0 and h.steal_pct == 0.0
    assert host_cpu(a, a) is None


def test_live_series_and_signals_read_the_counters_alike():
    """Host busy and per-thread CPU: the sparkline and the report use the same formulas; a thread
    born between two readings counts from zero in both."""
    sys0 = {"user": 0.0, "system": 0.0, "idle": 0.0, "iowait": 0.0, "steal": 0.0, "guest": 0.0}
    sys1 = {**sys0, "user": 0.9, "idle": 1.0, "guest": 0.5}
    records = [_record(0.0, 1.0, [[1, 1.0, 0.0, "S", None]], sys0),
               _record(0.5, 1.6, [[1, 1.1, 0.0, "S", None], [2, 0.45, 0.05, "R", None]], sys1)]
    series = ProcessSeries(busiest_window_s=1.0)
    for r in records:
        series.add(r)
    snap = series.snapshot()
    signals = process_signals(summarize(records, []), "", None)
    assert snap.host_pct == (pytest.approx(signals["sys.cpu_util_pct"].value),)
    assert snap.process_pct == (pytest.approx(signals["cpu.process_util_pct"].value),)
    assert (snap.busiest_tid, snap.busiest_pct) == (2, pytest.approx(100.0))
    assert signals["cpu.max_thread_util_pct"].value == pytest.approx(100.0)
    assert cpu_since(thread_cpu_s(records[0]), thread_cpu_s(records[1])) == pytest.approx({1: 0.1, 2: 0.5})


def test_importer_manifest_comes_from_the_same_constructor(tmp_path):
    from diagnose.bundle.importers import import_files

    trace = tmp_path / "spans.json"
    trace.write_text(json.dumps({"resourceSpans": []}))
    path = import_files([trace], tmp_path / "out")
    m = Bundle.open(path).typed_manifest
    assert path.name.startswith(f"diagnose-{IMPORT_LABEL}-") and m.end_reason == "imported"
    assert m.imported_at_ns is not None and m.tool["name"] == "diagnose"
