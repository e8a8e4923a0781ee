"""What a capture parsed ahead (diagnose/bundle/ahead.py) is used only while its file is the one
parsed: on a recorded GPU bundle (py-spy windows, torch traces) the findings are the same bytes with
and without it, a rewritten file is parsed again, and another bundle's results are never used."""
from __future__ import annotations

import os
import shutil

import pytest

from diagnose.bundle import Bundle
from diagnose.bundle.ahead import Ahead
from diagnose.capture.ahead_child import Poller
from diagnose.pipeline import analyse, documents
from helpers import REPO

FIXTURE = REPO / "fixtures" / "gpu" / "compute-bf16-matmul"


@pytest.fixture
def bundle_dir(tmp_path):
    return shutil.copytree(FIXTURE, tmp_path / "bundle")


def parsed_ahead(path) -> Ahead:
    """What the capture's parsing child sends for this bundle (its own code, run here)."""
    ahead = Ahead(path)
    for parsed in Poller(path, {}).poll():
        ahead.add(parsed)
    return ahead


def findings(path, ahead: Ahead | None = None) -> bytes:
    bundle = Bundle.open(path)
    bundle.ahead = ahead
    return documents(analyse(bundle))["findings.json"].encode()


def test_everything_parsed_ahead_gives_the_same_findings(bundle_dir):
    ahead = parsed_ahead(bundle_dir)
    kinds = sorted(k[0] for k in ahead.parsed)
    windows, traces = len(list((bundle_dir / "pyspy").iterdir())), len(list((bundle_dir / "torch").iterdir()))
    assert kinds == ["pyspy.window"] * windows + ["torch.outcome"] * traces and windows and traces
    assert findings(bundle_dir, ahead) == findings(bundle_dir)
    assert ahead.used == windows + traces and ahead.stale == 0 and not ahead.parsed


def test_a_file_rewritten_after_it_was_parsed_is_parsed_again(bundle_dir):
    ahead = parsed_ahead(bundle_dir)
    window = sorted((bundle_dir / "pyspy").iterdir())[0]
    events = window.read_bytes()
    window.write_bytes(events.replace(b'"ts":', b'"ts" :', 1))  # the same events, another file
    before = findings(bundle_dir)
    assert findings(bundle_dir, ahead) == before
    assert ahead.stale == 1 and ahead.used == len(list((bundle_dir / "torch").iterdir())) + \
        len(list((bundle_dir / "pyspy").iterdir())) - 1


def test_a_value_for_a_changed_file_is_never_used(bundle_dir):
    ahead = parsed_ahead(bundle_dir)
    key = next(k for k in ahead.parsed if k[0] == "pyspy.window")
    ahead.parsed[key] = ahead.parsed[key].__class__(key, ahead.parsed[key].member, ahead.parsed[key].stamp, ())
    os.utime(bundle_dir / ahead.parsed[key].member)  # same bytes, touched: its stamp changed
    assert findings(bundle_dir, ahead) == findings(bundle_dir)  # the empty stacks were refused
    assert ahead.stale == 1


def test_results_for_another_bundle_path_are_not_used(bundle_dir, tmp_path):
    other = shutil.copytree(bundle_dir, tmp_path / "other")
    ahead = parsed_ahead(other)
    assert findings(bundle_dir, ahead) == findings(bundle_dir)
    assert ahead.used == 0


def test_the_analysis_runs_with_fewer_gc_passes_and_gives_the_threshold_back(bundle_dir, monkeypatch):
    import gc

    from diagnose.signals import cpu

    seen = []
    real = cpu.load_profile

    def watching(*args, **kw):  # the CPU source's profile, read inside the analysis
        seen.append(gc.get_threshold()[0])
        return real(*args, **kw)

    monkeypatch.setattr(cpu, "load_profile", watching)
    before = gc.get_threshold()
    findings(bundle_dir)
    assert seen and set(seen) == {100_000} and gc.get_threshold() == before
