"""A checker for the Trace Event Format, written from Google's "Trace Event Format" document
(docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU), the format
chrome://tracing and ui.perfetto.dev read.

``check_trace(doc)`` returns one line per problem ([] when ``doc`` follows the format):

- the document is the JSON array format (a list of events) or the object format (an object whose
  ``traceEvents`` is a list); ``displayTimeUnit``, where given, is "ms" or "ns";
- every event is an object with a known phase ``ph`` and a string ``name`` (optional on ``E``);
  ``ts`` (µs) is a finite number on every event but metadata ``M``; ``pid`` is an int, and so is
  ``tid`` wherever it is given (it must be on thread-scoped events: B, E, X, thread instants,
  thread metadata); ``args``, where given, is an object;
- duration events ``B``/``E`` are balanced and properly nested per thread, in file order, ``E``
  matching the name of the innermost open ``B``, with timestamps non-decreasing on a thread;
- complete events ``X`` have a finite ``dur`` >= 0, and the slices of one thread (X and B/E pairs)
  nest: two of them either do not overlap or one holds the other;
- counter events ``C`` have a non-empty ``args`` whose values are all numbers;
- instant events ``i``/``I`` have a scope ``s`` of "g", "p" or "t" where given;
- async events (nestable ``b``/``n``/``e``, legacy ``S``/``T``/``p``/``F``) and flow events
  (``s``/``t``/``f``) carry an ``id`` (or ``id2``); nestable ones also a ``cat``; per (cat, id)
  every ``b`` is closed by an ``e`` and they nest (by ts, then file order); ``S``/``F`` balance per
  (cat, id, name);
- metadata events ``M`` are process_name, process_labels, process_sort_index, thread_name or
  thread_sort_index with the argument each takes (``name``, ``labels``: a string; ``sort_index``:
  an int).

Times are compared in integer ns (``round(µs * 1000)``), as a viewer stores them.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

PHASES = frozenset("BEXiICbneSTpFstfPNODMVvRc()")
NESTABLE_ASYNC = frozenset("bne")
LEGACY_ASYNC = frozenset("STpF")
FLOW = frozenset("stf")
METADATA = {"process_name": ("name", str), "process_labels": ("labels", str),
            "process_sort_index": ("sort_index", int), "thread_name": ("name", str),
            "thread_sort_index": ("sort_index", int)}
SCOPES = frozenset("gpt")
TIME_UNITS = ("ms", "ns")
MAX_PROBLEMS = 50


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _ns(us: float) -> int:
    return round(us * 1000)


def _events(doc: Any, problems: list[str]) -> list[Any]:
    if isinstance(doc, list):
        return doc
    if not isinstance(doc, dict):
        problems.append(f"top level is a {type(doc).__name__}, not an object or an array of events")
        return []
    if "displayTimeUnit" in doc and doc["displayTimeUnit"] not in TIME_UNITS:
        problems.append(f"displayTimeUnit {doc['displayTimeUnit']!r} is not one of {TIME_UNITS}")
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        problems.append("the object has no traceEvents array")
        return []
    return events


def _thread_scoped(ev: dict[str, Any]) -> bool:
    ph = ev["ph"]
    return ph in "BEX" or (ph in "iI" and ev.get("s", "t") == "t") or (
        ph == "M" and str(ev.get("name", "")).startswith("thread_"))


def _common(i: int, ev: Any) -> list[str]:
    """Problems of one event on its own (fields, types); [] for a well-formed one."""
    if not isinstance(ev, dict):
        return [f"event {i}: not an object"]
    ph = ev.get("ph")
    if not isinstance(ph, str) or ph not in PHASES:
        return [f"event {i}: unknown phase {ph!r}"]
    out = []
    if not isinstance(ev.get("name"), str) and not (ph == "E" and "name" not in ev):
        out.append(f"event {i} ({ph}): name is not a string")
    if ph != "M" or "ts" in ev:
        if not _number(ev.get("ts")):
            out.append(f"event {i} ({ph}): ts {ev.get('ts')!r} is not a finite number of µs")
    if not _int(ev.get("pid")):
        out.append(f"event {i} ({ph}): pid {ev.get('pid')!r} is not an int")
    if ("tid" in ev or _thread_scoped(ev)) and not _int(ev.get("tid")):
        out.append(f"event {i} ({ph}): tid {ev.get('tid')!r} is not an int")
    if "args" in ev and not isinstance(ev["args"], dict):
        out.append(f"event {i} ({ph}): args is not an object")
    return out + _by_phase(i, ph, ev)


def _by_phase(i: int, ph: str, ev: dict[str, Any]) -> list[str]:
    out = []
    where = f"event {i} ({ph} {ev.get('name')!r})"
    if ph == "X" and not (_number(ev.get("dur")) and ev["dur"] >= 0):
        out.append(f"{where}: dur {ev.get('dur')!r} is not a finite number >= 0")
    if ph == "C":
        args = ev.get("args")
        if not isinstance(args, dict) or not args:
            out.append(f"{where}: a counter needs its values in args")
        else:
            out += [f"{where}: counter value {k}={v!r} is not a number" for k, v in args.items() if not _number(v)]
    if ph in "iI" and "s" in ev and ev["s"] not in SCOPES:
        out.append(f"{where}: instant scope s={ev['s']!r} is not g, p or t")
    if ph in NESTABLE_ASYNC | LEGACY_ASYNC | FLOW and "id" not in ev and "id2" not in ev:
        out.append(f"{where}: an async or flow event needs an id")
    if ph in NESTABLE_ASYNC and not isinstance(ev.get("cat"), str):
        out.append(f"{where}: a nestable async event needs a cat")
    if ph == "M":
        spec = METADATA.get(ev["name"]) if isinstance(ev.get("name"), str) else None
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        if spec is None:
            out.append(f"{where}: unknown metadata event")
        elif not isinstance(args.get(spec[0]), spec[1]) or isinstance(args.get(spec[0]), bool):
            out.append(f"{where}: args.{spec[0]} must be a {spec[1].__name__}")
    return out


def _durations(events: list[tuple[int, dict[str, Any]]], problems: list[str]
               ) -> dict[tuple[int, int], list[tuple[int, int, str]]]:
    """B/E balance per thread in file order; returns every thread's slices (X and B/E pairs)."""
    slices: dict[tuple[int, int], list[tuple[int, int, str]]] = defaultdict(list)
    open_: dict[tuple[int, int], list[tuple[int, str]]] = defaultdict(list)
    last: dict[tuple[int, int], int] = {}
    for i, ev in events:
        key, ts, name = (ev["pid"], ev["tid"]), _ns(ev["ts"]), str(ev.get("name", ""))
        if ev["ph"] == "X":
            slices[key].append((ts, ts + _ns(ev["dur"]), name))
            continue
        if ts < last.get(key, ts):
            problems.append(f"event {i} ({ev['ph']} {name!r}): ts goes back on pid {key[0]} tid {key[1]}")
        last[key] = max(ts, last.get(key, ts))
        if ev["ph"] == "B":
            open_[key].append((ts, name))
        elif not open_[key]:
            problems.append(f"event {i} (E {name!r}): no open B on pid {key[0]} tid {key[1]}")
        else:
            start, opened = open_[key].pop()
            if "name" in ev and name != opened:
                problems.append(f"event {i} (E {name!r}): closes {opened!r}, the innermost open B")
            slices[key].append((start, ts, opened))
    for key, stack in open_.items():
        problems += [f"B {name!r} on pid {key[0]} tid {key[1]} is never closed" for _, name in stack]
    return slices


def _nesting(slices: dict[tuple[int, int], list[tuple[int, int, str]]], problems: list[str]) -> None:
    for (pid, tid), items in slices.items():
        held: list[tuple[int, int, str]] = []
        for start, end, name in sorted(items, key=lambda s: (s[0], -s[1])):
            while held and held[-1][1] <= start:
                held.pop()
            if held and end > held[-1][1]:
                outer = held[-1]
                problems.append(f"slices overlap without nesting on pid {pid} tid {tid}: {outer[2]!r} "
                                f"[{outer[0]}, {outer[1]}] ns and {name!r} [{start}, {end}] ns")
            held.append((start, end, name))


def _async(events: list[tuple[int, dict[str, Any]]], problems: list[str]) -> None:
    """Nestable async trees per (cat, scope, id): b/e nest by time; S/F balance per name too."""
    trees: dict[tuple[str, str, str], list[tuple[int, str]]] = defaultdict(list)
    legacy: dict[tuple[str, str, str], int] = defaultdict(int)
    for i, ev in sorted(events, key=lambda x: _ns(x[1]["ts"])):  # stable: file order at equal ts
        ident = repr(ev.get("id", ev.get("id2")))
        key, name = (str(ev.get("cat")), str(ev.get("scope", "")), ident), str(ev.get("name", ""))
        if ev["ph"] == "b":
            trees[key].append((i, name))
        elif ev["ph"] == "e":
            if not trees[key]:
                problems.append(f"event {i} (e {name!r}): no open b with cat {key[0]!r} id {ident}")
            elif trees[key].pop()[1] != name and "name" in ev:
                problems.append(f"event {i} (e {name!r}): does not close the innermost open b of id {ident}")
        elif ev["ph"] in "SF":
            legacy[(key[0], ident, name)] += 1 if ev["ph"] == "S" else -1
    for key, stack in trees.items():
        problems += [f"event {i} (b {name!r}) with cat {key[0]!r} id {key[2]} is never closed" for i, name in stack]
    problems += [f"S/F of cat {c!r} id {ident} name {n!r} do not balance ({v:+d})"
                 for (c, ident, n), v in legacy.items() if v]


def check_trace(doc: Any) -> list[str]:
    """Every way ``doc`` departs from the Trace Event Format (at most MAX_PROBLEMS, then a count)."""
    problems: list[str] = []
    good_durations, good_async = [], []
    for i, ev in enumerate(_events(doc, problems)):
        mine = _common(i, ev)
        problems += mine
        if mine:
            continue  # a malformed event is reported once, and kept out of the pairing checks
        if ev["ph"] in "BEX":
            good_durations.append((i, ev))
        elif ev["ph"] in NESTABLE_ASYNC | LEGACY_ASYNC:
            good_async.append((i, ev))
    _nesting(_durations(good_durations, problems), problems)
    _async(good_async, problems)
    if len(problems) > MAX_PROBLEMS:
        problems = problems[:MAX_PROBLEMS] + [f"... and {len(problems) - MAX_PROBLEMS} more"]
    return problems


__all__ = ["check_trace"]
