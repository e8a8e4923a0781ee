"""The report's serving-engine rows: what the engine's own /metrics said over the capture window
(in-flight, queue share, TTFT/ITL/TPOT P50/P99, KV cache, preemptions, GPU overlap wait), and the
line that states the TTFT/ITL/TPOT definitions. Pure: reads ``details.serving``
(diagnose/results/serving.py ServingDetails)."""
from __future__ import annotations

from typing import Any

from diagnose.results.details import Details, ServingDetails

LATENCY_ROWS = (("ttft", "TTFT"), ("itl", "ITL"), ("tpot", "TPOT"), ("e2e", "end-to-end latency"),
                ("queue", "engine queue time"))


def _ms(v: float | None) -> str:
    return "unknown" if v is None else f"{v * 1e3:.1f}"


def _src(s: ServingDetails, metric: str, how: str) -> str:
    return f"{s.engine or 'engine'} /metrics {metric}, {how}, {s.scrapes} scrapes"


def _scraped(details: Details) -> ServingDetails | None:
    s = details.serving
    return s if s is not None and s.scrapes else None


def serving_rows(details: Details) -> list[list[Any]]:
    """[label, value, source] rows, only for what the engine exposed."""
    s = _scraped(details)
    if s is None:
        return []
    rows: list[list[Any]] = []
    g, r, h = s.gauges, s.rates, s.histograms
    if "in_flight" in g:
        parts = " / ".join(f"{k} {g[k].mean:.1f}" for k in ("running", "waiting") if k in g)
        rows.append(["engine in-flight requests (running + waiting), mean / max",
                     f"{g['in_flight'].mean:.1f} / {g['in_flight'].max:.0f} ({parts})",
                     _src(s, g["in_flight"].metric, "mean of scrapes")])
    if s.queue_share_pct is not None:
        rows.append(["engine queue time, share of end-to-end latency", f"{s.queue_share_pct:.0f}%",
                     f"{s.engine} /metrics queue / e2e time summed over the window's requests"])
    for key, label in LATENCY_ROWS:
        d = h.get(key)
        if d is not None and d.count:
            rows.append([f"{label} P50 / P99 (bucket-interpolated)", f"{_ms(d.p50_s)} / {_ms(d.p99_s)} ms",
                         _src(s, d.metric, f"{d.count:.0f} observations in the window")])
    if "kv_usage" in g:
        rows.append(["KV-cache usage, mean / max", f"{g['kv_usage'].mean:.0f}% / {g['kv_usage'].max:.0f}%",
                     _src(s, g["kv_usage"].metric, "scrapes")])
    if "preemptions" in r:
        rows.append(["preemptions in the window", f"{r['preemptions'].increase:.0f}",
                     _src(s, r["preemptions"].metric, "counter increase")])
    if "overlap_wait" in r and s.window_s:
        pct = 100.0 * r["overlap_wait"].increase / s.window_s
        rows.append(["GPU idle waiting for the CPU scheduler (SGLang overlap wait)", f"{pct:.0f}% of the window",
                     _src(s, r["overlap_wait"].metric, "counter increase, mean over ranks")])
    for key, label in (("requests", "engine QPS (requests finished)"), ("output_tokens", "engine output tokens/s")):
        if key in r:
            rows.append([label, f"{r[key].per_s:.1f}/s", _src(s, r[key].metric, "counter increase / window")])
    return rows


def serving_lines(details: Details) -> list[str]:
    """The serving rows as plain terminal lines (``analyze`` and ``attach`` print them after the
    account): a heading, then ``  LABEL: VALUE``; none without ``--metrics`` scrapes."""
    rows = serving_rows(details)
    return (["serving engine /metrics (see report.md for sources):"] if rows else []) + \
        [f"  {label}: {value}" for label, value, _src in rows]


def serving_notes(details: Details) -> list[str]:
    """The definitions line, and what the scrapes left out (failed scrapes, malformed lines)."""
    s = _scraped(details)
    if s is None:
        return []
    out = [f"Serving-engine metrics ({s.engine}, {s.scrapes} scrapes over {s.window_s:.1f} s). {s.definitions}."]
    if s.scrape_errors:
        out.append(f"{s.scrape_errors} scrape(s) failed, first: {(s.errors or ['?'])[0]}.")
    if s.garbage_lines:
        out.append(f"{s.garbage_lines} malformed line(s) of engine metrics skipped, first: "
                   f"{(s.garbage_examples or ['?'])[0]}.")
    return out


__all__ = ["serving_notes", "serving_rows"]
