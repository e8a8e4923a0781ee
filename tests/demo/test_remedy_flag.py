"""``diagnose demo --remedy``: each remedied scenario differs from its plain one in what its first
remedy changes and nothing else; a scenario without a remedy is a usage error before anything starts."""
from __future__ import annotations

from dataclasses import fields

import pytest
from click.testing import CliRunner

from diagnose.cli import EXIT_USAGE, main
from diagnose.demo.scenarios import REMEDIES, SCENARIOS, remedied


@pytest.mark.parametrize("name", sorted(REMEDIES))
def test_a_remedy_changes_only_what_it_names(name):
    plain, fixed = SCENARIOS[name], remedied(SCENARIOS[name])
    changed = {f.name for f in fields(plain) if getattr(plain, f.name) != getattr(fixed, f.name)}
    assert changed == set(REMEDIES[name][1]) and REMEDIES[name][0]


def test_a_scenario_without_a_remedy_is_refused_before_it_starts(tmp_path):
    res = CliRunner().invoke(main, ["demo", "--scenario", "healthy", "--remedy", "--out", str(tmp_path)])
    assert res.exit_code == EXIT_USAGE and "scenario healthy has no --remedy" in res.output
    assert not list(tmp_path.iterdir())
    with pytest.raises(KeyError):
        remedied(SCENARIOS["healthy"])
