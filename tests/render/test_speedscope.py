"""The speedscope export on the recorded fixtures: valid against the file-format schema that the
speedscope npm package publishes (fetched by .ci/run into .cache/, never committed), one sampled
profile per thread whose weights add up to the thread-time py-spy sampled."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from diagnose.pipeline import analyse
from diagnose.render import render
from helpers import REPO

FIXTURES = sorted(p for p in (REPO / "fixtures" / "cpu").iterdir() if (p / "manifest.json").is_file())
SCHEMA = Path(os.environ.get("DIAGNOSE_SPEEDSCOPE_SCHEMA",
                             REPO / ".cache" / "speedscope" / "file-format-schema.json"))


@pytest.mark.parametrize("bundle", FIXTURES, ids=[p.name for p in FIXTURES])
def test_profiles_cover_the_sampled_thread_time_root_first(bundle):
    report = analyse(bundle)
    doc = json.loads(render(report, "speedscope"))
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    frames = doc["shared"]["frames"]
    total = sum(p["endValue"] for p in doc["profiles"])
    assert total == pytest.approx(report.analysis.signals["stacks.sampled_s"].value, rel=0.01)
    for p in doc["profiles"]:
        assert p["type"] == "sampled" and p["unit"] == "seconds"
        assert len(p["samples"]) == len(p["weights"]) and sum(p["weights"]) == pytest.approx(p["endValue"])
        assert all(0 <= i < len(frames) for stack in p["samples"] for i in stack)
        roots = {frames[stack[0]]["name"] for stack in p["samples"]}
        assert roots <= {"<module>", "Thread._bootstrap", "_bootstrap"}, roots  # root first, as py-spy saw


@pytest.mark.skipif(not SCHEMA.is_file(), reason=f"speedscope's schema not fetched ({SCHEMA}): .ci/run "
                    "fetches it with `npm pack speedscope`")
@pytest.mark.parametrize("bundle", FIXTURES, ids=[p.name for p in FIXTURES])
def test_validates_against_speedscopes_published_schema(bundle):
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    jsonschema.validate(json.loads(render(analyse(bundle), "speedscope")), schema)


@pytest.mark.parametrize("bundle", FIXTURES, ids=[p.name for p in FIXTURES])
def test_opens_on_the_thread_that_used_the_most_cpu(bundle):
    """Every thread is sampled for the whole window, so the old order by sampled time opened on any
    thread, diagnose's own agent thread once (new-user trial): the first profile is the busiest."""
    from diagnose.signals.threads import bundle_thread_usage

    report = analyse(bundle)
    doc = json.loads(render(report, "speedscope"))
    cpu = {tid: tu.cpu_s for tid, tu in bundle_thread_usage(report.bundle).items()}
    tids = [int(p["name"].rsplit("(", 1)[1].rstrip(")")) for p in doc["profiles"]]
    assert doc["activeProfileIndex"] == 0 and cpu.get(tids[0], 0.0) == max(cpu.get(t, 0.0) for t in tids)
