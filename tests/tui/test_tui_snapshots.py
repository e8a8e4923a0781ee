"""Snapshots (pytest-textual-snapshot) of the results and live views on the fixture bundles.

After an intended change to a screen, or when new rules/signals change what a fixture shows,
review and accept the new pictures with::

    .venv/bin/python -m pytest tests/tui/test_tui_snapshots.py --snapshot-update
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from diagnose.bundle import Bundle
from diagnose.bundle.records.manifest import target_info
from diagnose.bundle.streams import PROCESS, THREADS
from diagnose.collectors import COLLECTORS
from diagnose.pipeline import analyse
from diagnose.tui.app import DiagnoseApp, make_app
from diagnose.tui.live.adapt import header_view, live_view
from diagnose.tui.live.feed import replay_view
from diagnose.tui.live.series import ProcessSeries
from tui_helpers import FIXTURE_DIRS, FIXTURE_IDS

SIZES = [(80, 24), (120, 40)]
SIZE_IDS = ["80x24", "120x40"]


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize("bundle", FIXTURE_DIRS, ids=FIXTURE_IDS)
def test_results_view(bundle, size, snap_compare, tmp_path):
    assert snap_compare(make_app(analyse(bundle), export_dir=tmp_path), terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize("bundle", FIXTURE_DIRS, ids=FIXTURE_IDS)
def test_live_view(bundle, size, snap_compare, tmp_path):
    """The live dashboard as it looked when the fixture's capture ended (same adapters and widgets
    as during a capture, fed from the finished bundle)."""
    assert snap_compare(make_app(analyse(bundle), live=True, export_dir=tmp_path), terminal_size=size)


SERVICE = next(b for b in FIXTURE_DIRS if b.name == "service-json")
COLLECTING_S = 1.2  # the first paint: this much of the fixture's capture read, no analysis yet


def _collecting_app(tmp_path) -> DiagnoseApp:
    """The dashboard 1.2 s into the fixture's capture: its first process records, every
    collector's state in the header, no analysis yet."""
    bundle = Bundle.open(SERVICE)
    m = bundle.manifest
    cpu = ProcessSeries()
    for name in bundle.typed(THREADS):
        cpu.add_name(name)
    t0 = None
    for rec in bundle.typed(PROCESS):
        t0 = rec.t_ns if t0 is None else t0
        if rec.t_ns - t0 <= COLLECTING_S * 1e9:
            cpu.add(rec)
    # an attach's first paint: every default collector, those the fixture lacks unavailable
    ran = {c["name"] for c in m["collectors"]}
    states = {c.name: "running" if c.name in ran else "unavailable" for c in COLLECTORS}
    states["otlp"] = "running"
    header = header_view(target_info(m["target"]), COLLECTING_S, 60.0 - COLLECTING_S,
                         {"process": {"records": 12}, "otlp": {"listen": "127.0.0.1:4318", "requests": 0}}, states)
    vm = live_view(None, bundle.info, cpu.snapshot(), {}, None, elapsed_s=COLLECTING_S, first_verdict_s=5.0)
    return DiagnoseApp(replay=(header, vm), export_dir=tmp_path)


def _replay(tmp_path, status: str = "captured") -> DiagnoseApp:
    header, vm = replay_view(analyse(SERVICE))
    return DiagnoseApp(replay=(replace(header, status=status), vm), export_dir=tmp_path)


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_live_first_paint_while_collecting(size, snap_compare, tmp_path):
    assert snap_compare(_collecting_app(tmp_path), terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize("state,keys", [("drill-down", ("enter",)), ("filter", ("slash", *"json")),
                                        ("help", ("question_mark",)), ("stopping", ())],
                         ids=["drill-down", "filter", "help", "stopping"])
def test_live_interaction_states(state, keys, size, snap_compare, tmp_path):
    """Enter opens the focused (CPU) panel with its whole lists; / filters the list rows; ? is the
    help; after q the header says "stopping…" until the results replace the dashboard."""
    app = _replay(tmp_path, "stopping…" if state == "stopping" else "captured")
    assert snap_compare(app, press=keys, terminal_size=size)
