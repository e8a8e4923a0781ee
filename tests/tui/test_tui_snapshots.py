"""Snapshots (pytest-textual-snapshot) of the results and live views on the fixture bundles.

After an intended change to a screen, or when new rules/signals change what a fixture shows,
review and accept the new pictures with::

    .venv/bin/python -m pytest tests/tui/test_tui_snapshots.py --snapshot-update
"""
from __future__ import annotations

import pytest

from diagnose.pipeline import analyse
from diagnose.tui.app import make_app
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
