"""Requests as nestable async events: each root span with its descendants as ``b``/``e`` pairs under
the request's id; a child that overlaps a sibling without nesting gets a lane, i.e. an id, of its
own; children are clipped to their request."""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from diagnose.bundle.streams import SPANS
from diagnose.render.perfetto.events import REQUESTS, Event, Names

if TYPE_CHECKING:
    from diagnose.bundle import Bundle
    from diagnose.signals.spans.analytics import Span


def request_events(bundle: Bundle, names: Names, notes: dict[str, Any],
                   max_events: int) -> tuple[list[Event], Span | None]:
    """Every request (root span) with its descendants, as async events, in at most half of
    ``max_events``; (events, slowest request)."""
    from diagnose.signals.spans.analytics import parse_spans
    from diagnose.signals.spans.sampling import sampling_of

    ss = parse_spans(bundle.typed(SPANS))
    kids: dict[tuple[str, str], list[Span]] = defaultdict(list)
    for s in ss.spans:
        if s.parent_span_id:
            kids[(s.trace_id, s.parent_span_id)].append(s)
    roots = sorted((r.span for r in ss.requests), key=lambda s: s.start_ns)
    out: list[Event] = []
    budget = max_events // 4  # spans: two events each, at most half the document
    for n, root in enumerate(roots):
        family = _descendants(root, kids)
        if len(family) + 1 > budget:
            notes["requests_left_out"] = len(roots) - n
            break
        budget -= len(family) + 1
        out += _request_events(root, family)
    if out:
        names[(REQUESTS, 0)] = "requests"
    sampling = sampling_of(bundle.info)
    if sampling is not None and roots:  # every written request is shown; the analysis reads the final sample
        notes["requests_shown"] = (f"{len(roots)} requests: every one the agent wrote; the report's counts use "
                                   f"the final 1-in-{sampling.one_in} sample of traces, scaled")
    return out, max(roots, key=lambda s: s.dur_ns, default=None)


def _descendants(root: Span, kids: dict[tuple[str, str], list[Span]]) -> list[Span]:
    key = (root.trace_id, root.span_id)
    seen, out, todo, expanded = {id(root)}, [], list(kids.get(key, ())), {key}
    while todo:
        s = todo.pop()
        if id(s) not in seen:  # a hand-edited stream may repeat ids or make a span its own parent
            seen.add(id(s))
            out.append(s)
            key = (s.trace_id, s.span_id)
            if key not in expanded:  # an id's children once: spans repeating an id cost no more than others
                expanded.add(key)
                todo += kids.get(key, ())
    return out


def _request_events(root: Span, family: list[Span]) -> list[Event]:
    """Lanes of properly nested spans (lane 0 holds the request); each lane is one async id."""
    lo, hi = root.start_ns, root.end_ns
    items = [(root, lo, hi)] + sorted(((s, min(max(s.start_ns, lo), hi), max(min(s.end_ns, hi), lo)) for s in family),
                                      key=lambda x: (x[1], -x[2]))
    lanes: list[list[tuple[Span, int, int]]] = []
    open_ends: list[list[int]] = []  # per lane: the ends of the spans open at the current start
    for item in items:
        for ends in open_ends:
            while ends and ends[-1] <= item[1]:
                ends.pop()
        k = next((k for k, ends in enumerate(open_ends) if not ends or item[2] <= ends[-1]), len(lanes))
        if k == len(lanes):
            lanes.append([])
            open_ends.append([])
        lanes[k].append(item)
        open_ends[k].append(item[2])
    rid = f"{root.trace_id}:{root.span_id}"
    return [e for k, lane in enumerate(lanes) for e in _async_pairs(lane, rid if k == 0 else f"{rid}#{k}")]


def _async_pairs(lane: list[tuple[Span, int, int]], aid: str) -> list[Event]:
    """b/e events of one lane's spans, in an order that nests them (stable-sorted by ts later)."""
    from diagnose.signals.spans.analytics import stage_of

    out: list[Event] = []
    held: list[tuple[Span, int, int]] = []
    for span, start, end in lane + [(lane[0][0], 2**63, 2**63)]:  # the sentinel closes everything
        while held and held[-1][2] <= start:
            s, _, e = held.pop()
            out.append(Event("e", e, REQUESTS, 0, s.name, "request", id=aid))
        if start < 2**63:
            args = {"trace_id": span.trace_id, "span_id": span.span_id, "kind": span.kind,
                    "status": span.status, "stage": stage_of(span)}
            out.append(Event("b", start, REQUESTS, 0, span.name, "request", 0,
                             {k: v for k, v in args.items() if v is not None}, aid))
            held.append((span, start, end))
    return out

