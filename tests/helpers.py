"""Plain helpers for tests (tests/ is on pytest's pythonpath)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
WORKLOADS = HERE / "workloads"
REPO = HERE.parent
SHARED_DATA = REPO.parent / "shared" / "data"


def run_diagnose(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "diagnose", *args], capture_output=True, text=True,
        timeout=timeout, env={**os.environ, **(env or {})},
    )


def only_bundle(out: Path) -> Path:
    bundles = [p for p in out.iterdir() if p.name.startswith("diagnose-")]
    assert len(bundles) == 1, bundles
    return bundles[0]


def findings(bundle: Path) -> dict:
    return json.loads((bundle / "findings.json").read_text())
