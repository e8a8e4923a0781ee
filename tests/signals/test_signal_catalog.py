"""The signal catalogue (diagnose/signals/catalog.py) against the rules that read signals and the
sources that write them, on the project's own recordings in fixtures/ (never on made-up data).

Each source of SIGNAL_SOURCES runs on its own over every fixture bundle (and over the fixture torch
traces, imported the way `diagnose analyze trace.json.gz` does), so a name two sources write, a
unit that disagrees with the catalogue or a signal no source writes fails here.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest

from diagnose.bundle import Bundle
from diagnose.bundle.importers import import_files
from diagnose.rules import RULES
from diagnose.rules.base import TRAINING
from diagnose.signals import SIGNAL_SOURCES
from diagnose.signals.catalog import (
    CATALOG,
    SPECS,
    SignalSpec,
    Worse,
    declared_names,
    spec_for,
    undeclared_rule_signals,
    unit_of,
)
from diagnose.verdict.analyze import analyze
from helpers import REPO, SHARED_DATA

FIXTURE_BUNDLES = sorted(p.parent for p in (REPO / "fixtures").glob("*/*/manifest.json"))
FIXTURE_TRACES = (REPO / "fixtures" / "torch" / "h200-train-step" / "trace.json.gz",
                  REPO / "fixtures" / "flops" / "h200-cuda" / "trace.json.gz")
OTLP_EXAMPLE = SHARED_DATA / "otlp" / "opentelemetry-proto_examples_trace.json"
NCCL_TRACE = SHARED_DATA / "torch-traces" / "nccl_data.json.gz"

# Declared signals no fixture makes a source write, and the input that would. Keep it short: a
# signal that a fixture starts producing must leave this list (test_the_not_in_fixtures_list_is_honest).
NO_SPANS = "needs request spans: no bundle in fixtures/ has spans.jsonl (the shared OTLP example has)"
NOT_IN_FIXTURES: dict[str, str] = {
    "spans.requests": NO_SPANS,
    "spans.in_flight_mean": NO_SPANS,
    "spans.in_flight_littles_law": NO_SPANS,
    "llm.ttft_p50_ms": NO_SPANS,
    "llm.ttft_p99_ms": NO_SPANS,
    "llm.tpot_p50_ms": NO_SPANS,
    "llm.tpot_p99_ms": NO_SPANS,
    "llm.output_tokens_per_s": "needs spans carrying gen_ai.usage.output_tokens (an LLM server's spans)",
    "llm.ttft_share_pct": "needs generation spans carrying a TTFT (an LLM server's spans; the demo's llm scenario)",
    "llm.decode_share_pct": "needs generation spans carrying a TTFT (an LLM server's spans; the demo's llm scenario)",
    "cpu.children_util_pct": "needs a capture with --subprocesses (process records with children)",
    "join.slow_category_share_pct[{key}]": ("needs py-spy samples inside the slowest requests or "
                                            "ProfilerSteps: no fixture has spans or profiler steps with py-spy"),
    # fixtures/serving-metrics holds /metrics pages, not bundles: tests/signals/test_serving_metrics.py
    **{s.name: "needs a serving engine's /metrics scraped into a bundle (attach --metrics)"
       for s in SPECS if s.family == "serving"},
}


def source_name(source) -> str:
    return source.__name__.removesuffix("_signals")


def produced(bundles: list[Path]) -> dict[str, dict[str, set[str]]]:
    """{signal name: {source name: {units}}}, each source run on its own over every bundle."""
    out: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in bundles:
        bundle = Bundle.open(path)
        for source in SIGNAL_SOURCES:
            for name, sig in source(bundle).signals.items():
                out[name][source_name(source)].add(sig.unit)
    return out


@pytest.fixture(scope="module")
def on_fixtures(tmp_path_factory) -> dict[str, dict[str, set[str]]]:
    tmp = tmp_path_factory.mktemp("imported")
    imported = [import_files([trace], tmp / str(i)) for i, trace in enumerate(FIXTURE_TRACES)]
    assert len(FIXTURE_BUNDLES) >= 7, FIXTURE_BUNDLES
    return produced(FIXTURE_BUNDLES + imported)


def _check_declared(seen: dict[str, dict[str, set[str]]]) -> list[str]:
    problems = []
    for name, by_source in sorted(seen.items()):
        spec = spec_for(name)
        if spec is None:
            problems.append(f"{name}: produced by {sorted(by_source)} but not declared")
            continue
        for src, units in by_source.items():
            if src != spec.source:
                problems.append(f"{name}: produced by {src}, declared as from {spec.source}")
            if units != {spec.unit}:
                problems.append(f"{name}: {src} writes unit(s) {sorted(units)}, declared {spec.unit!r}")
    return problems


# -- the rules read only declared signals ---------------------------------------------------------

def test_every_signal_a_rule_reads_is_declared():
    assert undeclared_rule_signals(RULES) == []
    assert spec_for(TRAINING.signal) is not None  # rules/base.py: picks training remedies for every rule


def _misspelt(rule_id: str, good: str, bad: str, where: str = "conditions"):
    rule = next(r for r in RULES if r.id == rule_id)
    if where == "conditions":
        copy = replace(rule, conditions=tuple(replace(c, signal=bad) if c.signal == good else c
                                              for c in rule.conditions))
    else:
        copy = replace(rule, unless=((replace(rule.unless[0], signal=bad),) + rule.unless[1:]))
    return tuple(copy if r.id == rule_id else r for r in RULES)


@pytest.mark.parametrize("rule_id, good, bad, where", [
    ("service.serialization", "cpu.category_share_pct[serialization]", "cpu.category_share_pct[serialisation]",
     "conditions"),
    ("compute.gpu_tensor_busy", "gpu.tensor_active_pct", "gpu.tensor_activ_pct", "conditions"),  # a gap family
    ("service.gil_bound", "gpu.sm_active_pct", "gpu.sm_activity_pct", "unless"),
])
def test_a_misspelt_rule_signal_fails_loudly(rule_id, good, bad, where):
    rules = _misspelt(rule_id, good, bad, where)
    assert undeclared_rule_signals(rules) == [f"{rule_id}: {bad}"]
    bundle = Bundle.open(REPO / "fixtures" / "cpu" / "service-json")
    a = analyze(bundle, rules=rules)
    named = [n for n in a.not_judged if n.what == f"{rule_id} ({bad})"]
    assert len(named) == 1 and "not declared in the signal catalogue" in named[0].reason, a.not_judged
    fired = {f.rule_id for f in a.findings}
    if where == "conditions":
        assert rule_id not in fired
    else:  # the conditions are sound: the rule is still judged, only that `unless` entry is dead
        assert "service.gil_bound" in {f.rule_id for f in analyze(bundle).findings} and rule_id in fired


def test_the_real_rules_add_no_undeclared_entry_on_a_fixture():
    a = analyze(Bundle.open(REPO / "fixtures" / "gpu" / "service-tiny-kernels"))
    assert not [n for n in a.not_judged if "not declared" in n.reason]


# -- the sources write only declared signals, each from one source --------------------------------

def test_every_produced_signal_is_declared_with_its_unit_and_source(on_fixtures):
    assert _check_declared(on_fixtures) == []


def test_no_two_sources_produce_the_same_signal(on_fixtures):
    shared = {name: sorted(by) for name, by in on_fixtures.items() if len(by) > 1}
    assert shared == {}


def test_every_declared_signal_is_produced_on_a_fixture_or_listed(on_fixtures):
    unseen = [s.name for s in SPECS if not set(s.names()) & set(on_fixtures) and s.name not in NOT_IN_FIXTURES]
    assert unseen == []


def test_the_not_in_fixtures_list_is_honest(on_fixtures):
    for name, reason in NOT_IN_FIXTURES.items():
        assert name in CATALOG and reason, name
        assert not set(CATALOG[name].names()) & set(on_fixtures), f"{name} is produced on a fixture now"


@pytest.mark.skipif(not (OTLP_EXAMPLE.is_file() and NCCL_TRACE.is_file()), reason="../shared/data absent")
def test_shared_recordings_write_declared_signals_too(tmp_path):
    """Public recordings the fixtures lack: OTLP spans (spans.*, llm.*) and an NCCL trace (gpu.comm_*)."""
    bundles = [import_files([OTLP_EXAMPLE], tmp_path / "otlp"), import_files([NCCL_TRACE], tmp_path / "nccl")]
    seen = produced(bundles)
    assert _check_declared(seen) == []
    assert {n for n, why in NOT_IN_FIXTURES.items() if why == NO_SPANS} <= set(seen)
    assert "kernels.category_share_pct[collective]" in seen


# -- the catalogue itself ---------------------------------------------------------------------------

def test_each_signal_is_declared_once_with_a_family_a_known_source_and_a_description():
    names = declared_names()
    assert len(names) == len(set(names))
    assert len(CATALOG) == len(SPECS)
    sources = {source_name(s) for s in SIGNAL_SOURCES}
    for spec in SPECS:
        assert spec.source in sources, spec.name
        assert spec.family == spec.name.split(".")[0] and spec.family, spec.name
        assert isinstance(spec.worse, Worse) and spec.unit
        assert spec.description and "\n" not in spec.description, spec.name
        assert {k for k, _ in spec.worse_by_key} <= set(spec.keys), spec.name
        assert spec.templated == spec.name.endswith("[{key}]"), spec.name


def test_templated_names_resolve_and_unknown_keys_do_not():
    s = spec_for("cpu.category_share_pct[serialization]")
    assert isinstance(s, SignalSpec) and s.template == "cpu.category_share_pct[{key}]"
    assert (s.unit, s.family, s.source, s.worse) == ("%", "cpu", "cpu", Worse.HIGHER)
    assert "serialization" in s.description and "{key}" not in s.description
    assert spec_for("cpu.category_share_pct[framework_compute]").worse == Worse.NEITHER  # the work itself
    assert spec_for("spans.stage_share_pct[queue]").worse == Worse.HIGHER
    assert spec_for("cpu.category_share_pct[idle]") is None  # parked time is not a category share
    assert spec_for("cpu.category_share_pct[{key}]") is None
    assert spec_for("spans.p99_ms").worse == Worse.HIGHER and spec_for("spans.qps").worse == Worse.LOWER
    assert spec_for("spans.requests").worse == Worse.NEITHER
    assert unit_of("kernels.launch_delay_p99_us") == "us"
    with pytest.raises(KeyError):
        unit_of("gpu.sm_activ_pct")
