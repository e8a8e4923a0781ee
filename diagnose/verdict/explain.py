"""The rule catalogue as text: ``diagnose rules`` (one line a rule) and ``diagnose explain RULE``
(what it checks, on which signals from which collector, when it stands down, what to try, and the
``--thresholds`` keys that move it). Pure: rules and the signal catalogue in, lines out."""
from __future__ import annotations

import difflib
from collections.abc import Iterable

from diagnose.render.units import fmt_value
from diagnose.rules import Condition, Rule
from diagnose.signals.catalog import spec_for


class UnknownRule(KeyError):
    """No rule of that id; the message names the closest ones."""

    def __str__(self) -> str:
        return str(self.args[0])


def find_rule(rule_id: str, rules: Iterable[Rule]) -> Rule:
    """The rule ``rule_id``. Raises UnknownRule naming close matches."""
    by_id = {r.id: r for r in rules}
    if rule_id in by_id:
        return by_id[rule_id]
    near = difflib.get_close_matches(rule_id, list(by_id), n=3, cutoff=0.6)  # 0.4 matched "nope.rule"
    hint = f"; did you mean {', '.join(near)}?" if near else "; `diagnose rules` lists them"
    raise UnknownRule(f"no rule {rule_id[:80]!r}{hint}")


def _role(rule: Rule) -> str:
    return rule.quadrant.value if rule.quadrant is not None else "secondary"


def condition_text(c: Condition) -> str:
    """``cpu.python_busy_pct >= 80.0%``: a condition with its threshold in the signal's unit."""
    spec = spec_for(c.signal)
    return f"{c.signal} {c.op} {fmt_value(c.threshold, spec.unit if spec else '')}"


def rules_table(rules: Iterable[Rule]) -> list[str]:
    """One line per rule: id, quadrant (or secondary), layer, severity and its conditions."""
    rows = [(r.id, _role(r), r.layer.value, r.severity.value, " and ".join(condition_text(c) for c in r.conditions))
            for r in rules]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return [" ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4] for row in rows]


def explain(rule: Rule) -> list[str]:
    """What ``rule`` checks and why, in plain lines."""
    out = [f"{rule.id}: {rule.title}",
           f"quadrant {_role(rule)} · act on the {rule.layer.value} layer · severity {rule.severity.value}"
           + (" · when it fires no quadrant is named" if rule.blocks_verdict else ""), "",
           "Fires when all of these hold:"]
    for c in rule.conditions:
        spec = spec_for(c.signal)
        where = spec.description if spec else "not declared in the signal catalogue"
        out.append(f"  - {condition_text(c)}  (certain {fmt_value(c.scale, spec.unit if spec else '')} past it)")
        out.append(f"      {where}")
    if rule.unless:
        out += ["", "Kept as context, not a verdict, when any of these holds:"]
        own = dict(rule.unless_reasons)
        for entry in rule.unless:
            conds = entry if isinstance(entry, tuple) else (entry,)
            why = own.get(conds[0].signal, rule.unless_reason)
            out.append("  - " + " and ".join(condition_text(c) for c in conds) + f" ({why})")
    out += ["", "What to try, in order:"] + [f"  {i}. {s}" for i, s in enumerate(rule.suggestions, 1)]
    if rule.training_suggestions:
        out += ["", "In a training loop instead:"]
        out += [f"  {i}. {s}" for i, s in enumerate(rule.training_suggestions, 1)]
    keys = ", ".join(f'"{rule.id}:{c.signal}"' for c in rule.conditions)
    return out + ["", f"Override its thresholds with --thresholds FILE, keys {keys}."]
