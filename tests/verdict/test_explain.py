"""`diagnose rules` and `diagnose explain RULE`: the rule catalogue as a user reads it."""
from __future__ import annotations

import json
import re

import pytest

from diagnose.rules import RULES
from diagnose.signals.catalog import spec_for
from diagnose.verdict.explain import UnknownRule, explain, find_rule, rules_table
from diagnose.verdict.overrides import load_overrides_file
from helpers import run_diagnose


def test_rules_lists_every_rule_once_with_its_thresholds():
    lines = rules_table(RULES)
    assert [line.split()[0] for line in lines] == [r.id for r in RULES]
    for rule, line in zip(RULES, lines):
        assert all(c.signal in line and c.op in line for c in rule.conditions), line


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_explain_names_signals_sources_remedies_and_working_override_keys(rule, tmp_path):
    text = "\n".join(explain(rule))
    for c in rule.conditions:
        assert c.signal in text and spec_for(c.signal).description in text
    assert all(s in text for s in rule.suggestions)
    keys = re.findall(r'"([^"]+)"', text.rsplit("keys", 1)[1])
    assert keys == [f"{rule.id}:{c.signal}" for c in rule.conditions]
    t = tmp_path / "t.json"
    t.write_text(json.dumps({k: c.threshold for k, c in zip(keys, rule.conditions)}))
    assert load_overrides_file(t) == {k: c.threshold for k, c in zip(keys, rule.conditions)}  # keys it says work


def test_an_unknown_rule_names_the_closest_ones():
    with pytest.raises(UnknownRule, match="did you mean service.gil_bound"):
        find_rule("service.gil", RULES)
    r = run_diagnose("explain", "service.gil")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "service.gil_bound" in r.stderr
    ok = run_diagnose("explain", "service.gil_bound")
    assert ok.returncode == 0 and ok.stdout.startswith("service.gil_bound: ")
    listed = run_diagnose("rules")
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == len(RULES)
