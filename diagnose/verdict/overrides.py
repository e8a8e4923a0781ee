"""``--thresholds`` overrides -> analysis parameters + rule thresholds, with one error for any bad key.

The file mixes two kinds of keys: ``<source>:<name>_<unit>`` analysis parameters
(diagnose/signals/params.py: what the signals measure) and ``<rule_id>:<signal>`` rule thresholds
(when a finding fires). Both are checked before any stream is read.
"""
from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable
from pathlib import Path

from diagnose.bundle.files import read_regular_file
from diagnose.rules import Rule
from diagnose.signals.params import DEFAULT_PARAMS, PARAM_KEYS, AnalysisParams, ParamError, is_param_key, with_overrides
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
        raise ThresholdError(f"threshold {_short(bad[0])} is not a finite number")
    try:
        params = with_overrides({k: v for k, v in overrides.items() if is_param_key(k)}, DEFAULT_PARAMS)
    except ParamError as exc:
        raise ThresholdError(str(exc)) from None
    return params, {k: v for k, v in overrides.items() if not is_param_key(k)}


def _short(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: an error stays one readable line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _unknown_message(key: str, known_rules: list[str]) -> str:
    near = difflib.get_close_matches(key, known_rules, n=EXAMPLES, cutoff=0.4) or known_rules[:EXAMPLES]
    return (f"unknown threshold {_short(key)}; known: analysis parameters "
            f"{', '.join(p.key for p in PARAM_KEYS)}; {len(known_rules)} rule thresholds "
            f"<rule_id>:<signal>, e.g. {', '.join(near)}")


THRESHOLDS_MAX_BYTES = 1 << 20
EXPECTED = '{"<rule_id>:<signal>" or "timeline:<parameter>_us": number}'


def load_overrides_file(path: Path, rules: Iterable[Rule] | None = None) -> dict[str, float]:
    """The overrides in the JSON file ``path`` (a flat object of numbers, at most 1 MiB), checked
    against ``rules`` (default: the registry) and the analysis parameters. Raises ThresholdError
    with one line naming the file, the cause and the expected shape."""
    from diagnose.rules import RULES

    try:
        data = json.loads(read_regular_file(path, THRESHOLDS_MAX_BYTES, follow_symlinks=True).decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        wrong = next((k for k, v in data.items() if type(v) not in (int, float)), None)
        if wrong is not None:
            raise ValueError(f"the value of {_short(wrong)} is {_short(data[wrong])}, not a number")
        overrides = {str(k): float(v) for k, v in data.items()}
    except RecursionError:
        raise ThresholdError(f"cannot read thresholds {path}: nested too deeply; expected a flat JSON object") from None
    except OSError as exc:
        raise ThresholdError(f"cannot read thresholds {path}: {exc.strerror or exc}; expected {EXPECTED}") from None
    except (ValueError, TypeError, OverflowError) as exc:
        raise ThresholdError(f"cannot read thresholds {path}: {str(exc)[:200]}; expected {EXPECTED}") from None
    try:
        split_overrides(overrides, RULES if rules is None else rules)
    except ThresholdError as exc:
        raise ThresholdError(f"{path}: {exc}") from None
    return overrides


__all__ = ["load_overrides_file", "rule_keys", "split_overrides"]
