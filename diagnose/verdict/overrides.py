"""``--thresholds`` overrides -> analysis parameters + rule thresholds, with one error for any bad key.

The file mixes two kinds of keys: ``<source>:<name>_<unit>`` analysis parameters
(diagnose/signals/params.py: what the signals measure) and ``<rule_id>:<signal>`` rule thresholds
(when a finding fires). Both are checked before any stream is read.
"""
from __future__ import annotations

import difflib
import math
from typing import Iterable

from diagnose.rules import Rule
from diagnose.signals.params import (DEFAULT_PARAMS, PARAM_KEYS, AnalysisParams, ParamError, is_param_key,
                                     with_overrides)
from diagnose.verdict.evaluate import ThresholdError

EXAMPLES = 3  # rule keys named in an "unknown threshold" message


def rule_keys(rules: Iterable[Rule]) -> list[str]:
    return sorted({f"{r.id}:{c.signal}" for r in rules for c in r.conditions})


def split_overrides(overrides: dict[str, float], rules: Iterable[Rule]) -> tuple[AnalysisParams, dict[str, float]]:
    """(analysis parameters, rule-threshold overrides). Raises ThresholdError (one line) for an
    unknown key, a non-finite value, or a non-positive analysis parameter."""
    known_rules = rule_keys(rules)
    unknown = sorted(k for k in overrides if not is_param_key(k) and k not in known_rules)
    if unknown:
        raise ThresholdError(_unknown_message(unknown[0], known_rules))
    bad = sorted(k for k, v in overrides.items() if not math.isfinite(v))
    if bad:
        raise ThresholdError(f"threshold {bad[0]!r} is not a finite number")
    try:
        params = with_overrides({k: v for k, v in overrides.items() if is_param_key(k)}, DEFAULT_PARAMS)
    except ParamError as exc:
        raise ThresholdError(str(exc)) from None
    return params, {k: v for k, v in overrides.items() if not is_param_key(k)}


def _unknown_message(key: str, known_rules: list[str]) -> str:
    near = difflib.get_close_matches(key, known_rules, n=EXAMPLES, cutoff=0.4) or known_rules[:EXAMPLES]
    return (f"unknown threshold {key!r}; known: analysis parameters "
            f"{', '.join(p.key for p in PARAM_KEYS)}; {len(known_rules)} rule thresholds "
            f"<rule_id>:<signal>, e.g. {', '.join(near)}")


__all__ = ["rule_keys", "split_overrides"]
