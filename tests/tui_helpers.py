"""Shared by the TUI tests: the fixture bundles and their expectations."""
from __future__ import annotations

import json
from pathlib import Path

from helpers import REPO

FIXTURE_DIRS = sorted(p.parent for p in (REPO / "fixtures" / "cpu").glob("*/expected.json"))
FIXTURE_IDS = [p.name for p in FIXTURE_DIRS]


def expected(bundle: Path) -> dict:
    return json.loads((bundle / "expected.json").read_text())
