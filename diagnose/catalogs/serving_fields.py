"""Serving engines' Prometheus metrics that diagnose reads, and the tolerant page reader.

``TABLE``: engine -> canonical signal -> the metric names the engine exposes (renamed older names
after the current one), the metric's kind, how the canonical unit is reached and how series with
different labels (models, ranks) combine. Names were checked against the engines' sources:
vLLM ``vllm/v1/metrics/loggers.py``, SGLang ``sglang/srt/metrics/collector.py``, Triton
``src/metrics.cc``, TGI ``router/src/server.rs`` (``metrics::histogram!`` names).

Counters: prometheus_client's parser gives a counter sample the name ``<family>_total`` whether the
page wrote the suffix (vLLM, SGLang) or not (Triton, TGI), so names are matched without ``_total``.
Histograms are named by their base; their ``_bucket``/``_sum``/``_count`` samples are read.

``read_page`` parses only the lines of metrics in the table (``# TYPE`` lines and samples whose
name, less ``_total`` or a histogram suffix, is one of them; no HELP or ``_created`` lines) with
prometheus_client's text parser, in chunks; a
chunk that does not parse is parsed line by line and the lines it rejects are reported as garbage.
Everything on the page is the target's hostile input: lines parsed, malformed lines, series,
buckets and labels are capped (prometheus_client's parser takes ~0.1 ms a line). A line longer than
MAX_PARSE_LINE_CHARS or with more than MAX_PARSE_LABELS labels never reaches the parser (its label
parser is superlinear: one 340 KB line of 32k labels costs 2 s of CPU, a 4 MiB line minutes): it
is counted as garbage. The series kept per metric (MAX_SERIES_PER_METRIC) are the first by sorted
labels, not by page order, so a reordered page keeps the same series.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Engine(str, Enum):
    VLLM = "vllm"
    SGLANG = "sglang"
    TRITON = "triton"
    TGI = "tgi"


class Kind(str, Enum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


class Combine(str, Enum):
    """How series of one metric with different labels (models, engines, ranks) combine per scrape."""

    SUM = "sum"  # requests, tokens, seconds: add up
    MAX = "max"  # a usage ratio: the fullest engine
    MEAN = "mean"  # a per-GPU share of time (SGLang overlap wait per rank)


@dataclass(frozen=True)
class ServingMetric:
    """One canonical signal of one engine: ``names`` newest first; value x ``factor`` is in ``unit``."""

    signal: str
    names: tuple[str, ...]
    kind: Kind
    unit: str
    factor: float = 1.0
    combine: Combine = Combine.SUM


G, C, H = Kind.GAUGE, Kind.COUNTER, Kind.HISTOGRAM
US = 1e-6  # Triton's cumulative durations are microseconds

TABLE: dict[Engine, tuple[ServingMetric, ...]] = {
    Engine.VLLM: (
        ServingMetric("running", ("vllm:num_requests_running",), G, "requests"),
        ServingMetric("waiting", ("vllm:num_requests_waiting",), G, "requests"),
        # a 0..1 fraction despite "perc"; gpu_cache_usage_perc before vLLM V1
        ServingMetric("kv_usage", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), G, "%", 100.0,
                      Combine.MAX),
        ServingMetric("preemptions", ("vllm:num_preemptions_total",), C, "preemptions"),
        ServingMetric("requests", ("vllm:request_success_total",), C, "requests"),
        ServingMetric("prompt_tokens", ("vllm:prompt_tokens_total",), C, "tokens"),
        ServingMetric("output_tokens", ("vllm:generation_tokens_total",), C, "tokens"),
        ServingMetric("ttft", ("vllm:time_to_first_token_seconds",), H, "s"),
        # one observation per output-token gap; time_per_output_token_seconds is its older name
        ServingMetric("itl", ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"), H, "s"),
        ServingMetric("tpot", ("vllm:request_time_per_output_token_seconds",), H, "s"),
        ServingMetric("queue", ("vllm:request_queue_time_seconds",), H, "s"),
        ServingMetric("prefill", ("vllm:request_prefill_time_seconds",), H, "s"),
        ServingMetric("decode", ("vllm:request_decode_time_seconds",), H, "s"),
        ServingMetric("e2e", ("vllm:e2e_request_latency_seconds",), H, "s"),
    ),
    Engine.SGLANG: (
        ServingMetric("running", ("sglang:num_running_reqs",), G, "requests"),
        ServingMetric("waiting", ("sglang:num_queue_reqs",), G, "requests"),
        ServingMetric("kv_usage", ("sglang:token_usage",), G, "%", 100.0, Combine.MAX),
        ServingMetric("requests", ("sglang:num_requests_total",), C, "requests"),
        ServingMetric("prompt_tokens", ("sglang:prompt_tokens_total",), C, "tokens"),
        ServingMetric("output_tokens", ("sglang:generation_tokens_total",), C, "tokens"),
        # GPU forward stream idle while the CPU scheduler prepares the next batch (seconds, per rank)
        ServingMetric("overlap_wait", ("sglang:gpu_overlap_wait_seconds_total",), C, "s", 1.0, Combine.MEAN),
        ServingMetric("ttft", ("sglang:time_to_first_token_seconds",), H, "s"),
        ServingMetric("itl", ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"), H, "s"),
        ServingMetric("tpot", ("sglang:request_time_per_output_token_seconds",), H, "s"),
        ServingMetric("queue", ("sglang:queue_time_seconds",), H, "s"),
        ServingMetric("e2e", ("sglang:e2e_request_latency_seconds",), H, "s"),
    ),
    Engine.TRITON: (
        ServingMetric("waiting", ("nv_inference_pending_request_count",), G, "requests"),
        ServingMetric("requests", ("nv_inference_request_success",), C, "requests"),
        ServingMetric("inferences", ("nv_inference_count",), C, "inferences"),
        ServingMetric("executions", ("nv_inference_exec_count",), C, "executions"),
        # cumulative durations (microseconds) summed over requests: means and shares, no quantiles
        ServingMetric("queue_total", ("nv_inference_queue_duration_us",), C, "s", US),
        ServingMetric("compute_input_total", ("nv_inference_compute_input_duration_us",), C, "s", US),
        ServingMetric("compute_infer_total", ("nv_inference_compute_infer_duration_us",), C, "s", US),
        ServingMetric("compute_output_total", ("nv_inference_compute_output_duration_us",), C, "s", US),
        ServingMetric("e2e_total", ("nv_inference_request_duration_us",), C, "s", US),
    ),
    Engine.TGI: (
        ServingMetric("running", ("tgi_batch_current_size",), G, "requests"),
        ServingMetric("waiting", ("tgi_queue_size",), G, "requests"),
        ServingMetric("requests", ("tgi_request_success",), C, "requests"),
        # per request: mean time per output token (TPOT), not per-token gaps
        ServingMetric("tpot", ("tgi_request_mean_time_per_token_duration",), H, "s"),
        ServingMetric("queue", ("tgi_request_queue_duration",), H, "s"),
        ServingMetric("inference", ("tgi_request_inference_duration",), H, "s"),
        ServingMetric("batch_inference", ("tgi_batch_inference_duration",), H, "s"),
        ServingMetric("e2e", ("tgi_request_duration",), H, "s"),
    ),
}

HIST_SUFFIXES = ("_bucket", "_sum", "_count", "_created")
MAX_SERIES_PER_METRIC = 32  # label sets of one metric kept per scrape (models x ranks)
MAX_SERIES = 512  # series kept per scrape in all
MAX_BUCKETS = 64  # buckets kept per histogram series
MAX_LABELS = 8  # labels kept per series
MAX_LABEL_CHARS = 128
MAX_GARBAGE_KEPT = 5  # rejected lines quoted in the stream (all are counted)
MAX_GARBAGE = 50  # rejected lines after which the rest of a page is left
MAX_PARSED_LINES = 10_000  # lines of engine metrics parsed per page (vLLM: ~300 per model and engine)
CHUNK_LINES = 200
MAX_LINE_CHARS = 160
MAX_PARSE_LINE_CHARS = 4096  # a longer engine line is garbage, never parsed (vLLM's longest: ~300)
MAX_PARSE_LABELS = 64  # an engine line with more labels (counted as '=' signs) is garbage, never parsed
INF = "+Inf"  # the +Inf bucket's bound as the stream writes it (JSON has no infinity)


def _stem(name: str) -> str:
    return name.removesuffix("_total")


METRICS: dict[str, tuple[Engine, ServingMetric]] = {
    _stem(n): (engine, m) for engine, ms in TABLE.items() for m in ms for n in m.names}


def _sample_names() -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for stem, (_engine, m) in METRICS.items():
        if m.kind is Kind.HISTOGRAM:
            out.update({stem + suffix: (stem, suffix[1:]) for suffix in HIST_SUFFIXES})
        else:
            out.update({stem: (stem, "value"), stem + "_total": (stem, "value"), stem + "_created": (stem, "created")})
    return out


SAMPLES: dict[str, tuple[str, str]] = _sample_names()


def metric_of(sample_name: str) -> tuple[str, str] | None:
    """(metric stem, part) for a sample of a metric in the table: part is ``value`` (gauge,
    counter) or ``bucket``/``sum``/``count``/``created`` (histogram); None for other metrics."""
    return SAMPLES.get(sample_name)


def _line_name(line: str) -> str | None:
    """The metric name a sample line or a ``# TYPE`` line is about; None for HELP and other
    comments and blank lines (the parser does not need them: ~0.1 ms a line saved). Only used to
    pick which lines the parser sees."""
    s = line.strip()
    if not s:
        return None
    if s.startswith("#"):
        parts = s.split(None, 3)
        return parts[2] if len(parts) >= 3 and parts[1] == "TYPE" else None
    return s.split("{", 1)[0].split(None, 1)[0]


def _relevant(line: str) -> bool:
    name = _line_name(line)
    hit = SAMPLES.get(name) if name is not None else None
    return hit is not None and hit[1] != "created"


@dataclass
class Page:
    """What one scrape yields: ``series`` as stream records, and what was left out."""

    series: list[dict[str, Any]] = field(default_factory=list)
    garbage: int = 0  # lines of known metrics the parser rejected
    garbage_lines: list[str] = field(default_factory=list)  # the first few, cut to MAX_LINE_CHARS
    other_lines: int = 0  # lines of metrics not in the table (not parsed)
    dropped: int = 0  # series, buckets or values left out (caps, NaN, bad le)

    def engine_counts(self) -> dict[str, int]:
        """{engine: series of its metrics on this page}."""
        out: dict[str, int] = {}
        for s in self.series:
            engine = METRICS[s["name"]][0].value
            out[engine] = out.get(engine, 0) + 1
        return out


def _parse(text: str) -> list[Any]:
    from prometheus_client.parser import text_string_to_metric_families

    return list(text_string_to_metric_families(text))


def _families(lines: list[str], page: Page) -> list[Any]:
    """Parse the relevant lines CHUNK_LINES at a time; a chunk that fails is parsed line by line and
    the lines the parser rejects are reported (samples are read by name, so a family whose TYPE
    line fell in another chunk reads the same). After MAX_GARBAGE rejected lines the rest of the
    page is left (counted in ``dropped``): a page of garbage costs a bounded number of parses."""
    out: list[Any] = []
    for start in range(0, len(lines), CHUNK_LINES):
        chunk = lines[start:start + CHUNK_LINES]
        try:
            out.extend(_parse("\n".join(chunk) + "\n"))
            continue
        except ValueError:
            pass  # some line of it is malformed: find which below, keep the rest
        for n, line in enumerate(chunk, start + 1):
            if page.garbage >= MAX_GARBAGE:
                page.dropped += len(lines) - n + 1
                page.garbage_lines.append(f"more than {MAX_GARBAGE} malformed lines: the rest of the page was left")
                return out
            try:
                out.extend(_parse(line + "\n"))
            except ValueError:
                page.garbage += 1
                if len(page.garbage_lines) < MAX_GARBAGE_KEPT:
                    page.garbage_lines.append(f"{n}: {line[:MAX_LINE_CHARS]}")
    return out


def _too_long(line: str) -> bool:
    """A line the parser must not see: over MAX_PARSE_LINE_CHARS, or more than MAX_PARSE_LABELS
    labels (an upper bound: every '=' counted, those inside label values too)."""
    return len(line) > MAX_PARSE_LINE_CHARS or line.count("=") > MAX_PARSE_LABELS


def _screen(lines: list[str], page: Page) -> list[str]:
    """``lines`` less those ``_too_long`` for the parser, each counted and quoted as garbage."""
    kept = []
    for n, line in enumerate(lines, 1):
        if not _too_long(line):
            kept.append(line)
            continue
        page.garbage += 1
        if len(page.garbage_lines) < MAX_GARBAGE_KEPT:
            page.garbage_lines.append(f"{n}: {line[:MAX_LINE_CHARS]} ... ({len(line)} chars, over "
                                      f"{MAX_PARSE_LINE_CHARS} chars or {MAX_PARSE_LABELS} labels: not parsed)")
    return kept


def _labels(labels: dict[str, str]) -> dict[str, str]:
    items = sorted((k, v) for k, v in labels.items() if k != "le")[:MAX_LABELS]
    return {k[:MAX_LABEL_CHARS]: v[:MAX_LABEL_CHARS] for k, v in items}


def _le(value: str | None) -> float | None:
    try:
        le = float(value) if value is not None else None
    except ValueError:
        return None
    return None if le is None or math.isnan(le) else le


_Key = tuple[str, tuple[tuple[str, str], ...]]


class _Builder:
    """Series of one page, keyed by (metric, labels); the caps are applied by ``kept`` once the
    page is read, in sorted label order (the same series whatever the page's order)."""

    def __init__(self, page: Page):
        self.page = page
        self.series: dict[_Key, dict[str, Any]] = {}

    def get(self, name: str, labels: dict[str, str]) -> dict[str, Any]:
        lab = _labels(labels)
        key = (name, tuple(lab.items()))
        rec = self.series.get(key)
        if rec is None:
            rec = self.series[key] = {"name": name, "labels": lab}
        return rec

    def add(self, sample: Any) -> None:
        hit = metric_of(sample.name)
        if hit is None or hit[1] == "created":
            return
        name, part = hit
        value = float(sample.value)
        le = _le(sample.labels.get("le")) if part == "bucket" else 0.0
        if not math.isfinite(value) or le is None or (value < 0 and part != "value"):
            self.page.dropped += 1
            return
        rec = self.get(name, sample.labels)
        if part == "bucket":
            buckets = rec.setdefault("buckets", [])
            if len(buckets) >= MAX_BUCKETS:
                self.page.dropped += 1
                return
            buckets.append([le if math.isfinite(le) else INF, value])
        else:
            rec[part] = value

    def kept(self) -> list[dict[str, Any]]:
        """The series under the caps: per metric the first MAX_SERIES_PER_METRIC by sorted labels,
        then the first MAX_SERIES by (metric, labels); the rest counted in ``dropped``."""
        out: list[dict[str, Any]] = []
        per_metric: dict[str, int] = {}
        for key in sorted(self.series):
            name = key[0]
            if len(out) >= MAX_SERIES or per_metric.get(name, 0) >= MAX_SERIES_PER_METRIC:
                self.page.dropped += 1
                continue
            per_metric[name] = per_metric.get(name, 0) + 1
            out.append(self.series[key])
        return out


def read_page(text: str) -> Page:
    """A /metrics page -> the series of the metrics in TABLE (histograms with sorted buckets).

    Never raises on content: malformed lines become ``garbage``, over-cap series ``dropped``."""
    page = Page()
    lines = text.splitlines()
    relevant = [ln for ln in lines if _relevant(ln)]
    page.other_lines = sum(1 for ln in lines if ln.strip() and not ln.lstrip().startswith("#")
                           and SAMPLES.get(_line_name(ln) or "") is None)
    if len(relevant) > MAX_PARSED_LINES:
        page.dropped += len(relevant) - MAX_PARSED_LINES
        page.garbage_lines.append(f"{len(relevant)} lines of engine metrics: only the first {MAX_PARSED_LINES} read")
        relevant = relevant[:MAX_PARSED_LINES]
    builder = _Builder(page)
    for family in _families(_screen(relevant, page), page):
        for sample in family.samples:
            builder.add(sample)
    for rec in builder.kept():
        if "buckets" in rec:
            rec["buckets"].sort(key=lambda b: float(b[0]))
        if "value" in rec or "buckets" in rec or "count" in rec:
            page.series.append(rec)
    return page


def engine_of(counts: dict[str, int]) -> Engine | None:
    """The engine most of a page's series belong to (Engine order breaks a tie); None for none."""
    best = max((counts.get(e.value, 0), -i) for i, e in enumerate(Engine))
    return list(Engine)[-best[1]] if best[0] > 0 else None


__all__ = ["Combine", "Engine", "Kind", "METRICS", "Page", "ServingMetric", "TABLE", "engine_of", "metric_of",
           "read_page"]
