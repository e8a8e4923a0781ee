"""The process collector's readings as ProcessReading (diagnose/bundle/records/process.py): read
leniently, so a hand-edited or hostile field costs only itself; a reading without a usable time or
with CPU times that are not numbers is dropped and counted, a line that is not an object is torn."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import msgspec

from diagnose.bundle import Bundle, BundleWriter
from diagnose.bundle.records.process import ProcessReading, ThreadRow, process_reading
from diagnose.bundle.streams import PROCESS
from diagnose.tui.live.series import ProcessSeries

WHEN = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
T0 = 1_700_000_000_000_000_000
GOOD = {"t_ns": T0, "cpu_user_s": 1.5, "cpu_system_s": 0.5, "rss_bytes": 10, "ncpu": 4, "period_s": 0.1,
        "threads": [[7, 1.0, 0.5, "S", "futex_do_wait", 10, 20, 3]], "connections": 2,
        "tcp": {"listening_ports": [8080], "accepted": 1}, "sys_cpu_s": {"user": 1.0, "idle": 2.0},
        "children": [{"pid": 9, "name": "w", "cpu_user_s": 1, "cpu_system_s": 0}]}


def test_a_well_formed_reading_is_read_in_one_pass():
    r = process_reading(GOOD)
    assert r == msgspec.convert(GOOD, ProcessReading)
    assert r.threads == (ThreadRow(7, 1.0, 0.5, "S", "futex_do_wait", 10, 20, 3),)
    assert r.accepted == 1 and r.tcp.listening_ports == [8080] and r.children[0].cpu_s == 1.0
    assert (r.ncpu, r.period_s, r.sys_cpu_s) == (4, 0.1, {"user": 1.0, "idle": 2.0})


def test_a_malformed_field_gets_its_default_and_costs_nothing_else():
    bad = {**GOOD, "rss_bytes": "big", "ncpu": 0, "period_s": -1, "sys_cpu_s": [1], "children": "x",
           "tcp": {"listening_ports": [80, "x", 70000, True], "accepted": 10**9}, "connections": -3,
           "threads": [[7, 1.0, 0.5, 3, ["w"]], [8, "1", 0], "row", [True, 0, 0], [9, 0.1, 0.2, "R", None, 1, None, 2]]}
    r = process_reading(bad)
    assert (r.rss_bytes, r.ncpu, r.period_s, r.children, r.connections) == (None, None, None, None, None)
    assert r.sys_cpu_s == {}
    assert r.tcp.listening_ports == [80] and r.accepted is None
    # a wrong state or wchan is unknown; the schedstat counters are read together or not at all
    assert r.threads == (ThreadRow(7, 1.0, 0.5), ThreadRow(9, 0.1, 0.2, "R"))
    assert (r.cpu_user_s, r.cpu_system_s) == (1.5, 0.5)
    assert process_reading({**GOOD, "threads": "abc"}).threads == ()


def test_a_reading_without_a_time_or_with_wrong_cpu_times_is_not_one():
    for bad in ({**GOOD, "t_ns": "soon"}, {**GOOD, "t_ns": 0}, {**GOOD, "t_ns": 2**62}, {**GOOD, "t_ns": 1.5},
                {**GOOD, "cpu_user_s": [1]}, {**GOOD, "cpu_system_s": True}, {**GOOD, "cpu_user_s": float("nan")},
                {k: v for k, v in GOOD.items() if k != "t_ns"}, [GOOD], "x"):
        assert process_reading(bad) is None, bad
    assert process_reading({"t_ns": T0}).cpu_user_s is None  # no CPU times: a reading all the same


def test_the_stream_drops_and_counts_what_is_not_a_reading(tmp_path):
    w = BundleWriter.create(tmp_path, 1, WHEN)
    lines = [json.dumps(GOOD), json.dumps({**GOOD, "t_ns": "x"}), "[1, 2]", '{"t_ns": 3, "cpu',
             json.dumps({**GOOD, "t_ns": T0 + 1, "rss_bytes": None}), json.dumps({**GOOD, "cpu_user_s": "1"})]
    (w.path / PROCESS.name).write_text("\n".join(lines) + "\n")
    b = Bundle(w.path, {})
    got = b.typed(PROCESS)
    assert [r.t_ns for r in got] == [T0, T0 + 1] and got[1].rss_bytes is None
    assert b.invalid_records == {PROCESS.name: 2} and b.torn_lines == {PROCESS.name: 2}
    assert b.typed(PROCESS) is got


def test_the_live_series_reads_the_tail_as_the_analysis_does():
    series = ProcessSeries()
    for raw in (GOOD, {**GOOD, "t_ns": "x"}, {"t_ns": T0 + 5}, {**GOOD, "t_ns": T0 + 10**9, "cpu_user_s": 2.5}):
        series.add_raw(raw)
    series.add_raw_name({"tid": 7, "comm": "worker"})
    series.add_raw_name({"tid": [7]})
    assert (series.records, series.skipped) == (2, 3)
    assert series.snapshot().process_pct == (100.0,)
