"""The live dashboard's pieces, pure: history buckets, sparkline width, distinct names, collector
chips, the collecting note, the newest samples' frames, filter and drill-down rows."""
from __future__ import annotations

import orjson
import pytest

from diagnose.bundle.records.manifest import ManifestInfo, manifest_info
from diagnose.model import StackShare
from diagnose.tui.live.adapt import live_view, request_trends, service_panel
from diagnose.tui.live.frames import window_frames
from diagnose.tui.live.series import Buckets, ProcessSeries, RequestSeries, TimeBuckets
from diagnose.tui.live.tail import JsonlTail
from diagnose.tui.text import HISTORY_MIN_S, distinct_short
from diagnose.tui.viewmodels import CollectorChip, MetricLine, PanelVM, Trend
from diagnose.tui.widgets.live_panels import chip_lines, panel_lines, trend_text

COLLECTORS = (
    CollectorChip("pyspy", "running", "samples 3412, errors 0, windows 5"),
    CollectorChip("process", "running", "records 242"),
    CollectorChip("nvml", "unavailable", ""), CollectorChip("gpm", "unavailable", ""),
    CollectorChip("dcgm", "unavailable", ""), CollectorChip("agent", "unavailable", ""),
    CollectorChip("otlp", "running", "listen 127.0.0.1:36093, requests 120, bytes 901234, spans 4410"),
)


def test_history_spans_the_panel_width_and_at_least_a_minute():
    """10 Hz readings for 5 min -> 1 s buckets; a 31-column sparkline spans >= 60 s, every column
    drawn (the old view drew the last 16 readings: 1.6 s)."""
    buckets = TimeBuckets()
    for i in range(1, 3001):
        buckets.add(i / 10, 50.0 if (i // 600) % 2 else 100.0, 0.1)
    snap = buckets.snapshot()
    assert len(snap) == 300 and sum(snap.weights_s) == pytest.approx(300.0)
    text, step_s = trend_text(Trend(snap.values, snap.weights_s), 31)
    assert len(text) == 31 and " " not in text
    assert step_s * 31 >= HISTORY_MIN_S and step_s == 2
    assert set(text) == {"█", "▅"}  # the 60 s halves survive the downsampling


def test_history_memory_is_bounded_and_keeps_the_newest():
    buckets = TimeBuckets(max_buckets=10)
    for t in range(1, 101):
        buckets.add(float(t), float(t))
    assert buckets.snapshot().values == tuple(float(t) for t in range(91, 101))
    filled = TimeBuckets()
    filled.fill(0.5, 3.0, 40.0)  # an interval mean covers every bucket it overlaps
    assert filled.snapshot() == Buckets((40.0, 40.0, 40.0), (0.5, 1.0, 1.0))


def test_short_history_is_drawn_at_the_right_edge():
    text, _ = trend_text(Trend((100.0, 100.0), (1.0, 1.0)), 20)
    assert text == " " * 19 + "█"  # 2 s at 3 s/column: one column, the newest at the edge


@pytest.mark.parametrize("width", [5, 8, 12, 40])
def test_shortened_names_stay_distinct(width):
    names = ["preprocess", "postprocess", "llm.generate.decode_step", "llm.generate.prefill_step",
             "llm.generate.prefill_step_2", "a"]
    short = distinct_short(names, width)
    assert len(set(short.values())) == len(names)
    assert all(len(s) <= width for s in short.values())
    if width >= 8:
        assert short["preprocess"].startswith("pre") and short["postprocess"].startswith("pos")


def test_stage_rows_stay_distinct_in_a_narrow_panel():
    lines = (MetricLine("stages", "", kind="heading"), MetricLine("preprocess", "33%", kind="item"),
             MetricLine("postprocess", "10%", kind="item"))
    text = panel_lines(PanelVM("Service", lines), 14)[0].plain.splitlines()
    assert text[1] != text[2].replace("10%", "33%") and "…process" not in text[1] + text[2]


@pytest.mark.parametrize("width", [78, 118])
def test_every_collector_state_is_shown_at_80_and_120_columns(width):
    lines = chip_lines(COLLECTORS, width)
    assert len(lines) <= 2 and all(len("  ".join(line)) <= width for line in lines)
    shown = " ".join(" ".join(line) for line in lines)
    for c in COLLECTORS:
        assert f"{c.name} {c.state}" in shown


def test_collecting_note_instead_of_unknown_before_the_first_window():
    early = live_view(None, ManifestInfo(), ProcessSeries().snapshot(), {}, None, elapsed_s=1.2, first_verdict_s=5.0)
    assert early.verdict is None and early.verdict_note == "collecting: first verdict in 4 s"
    late = live_view(None, ManifestInfo(), ProcessSeries().snapshot(), {}, None, elapsed_s=9.0, first_verdict_s=5.0)
    assert late.verdict_note == "collecting: analysing the first samples…"


def _stack(frame: str, secs: float, share: float, cat: str = "python") -> StackShare:
    return StackShare("MainThread", ("main", frame), cat, share, secs)


def test_top_frames_of_the_newest_samples():
    """Between two analyses: 10 s -> 20 s of active thread-time; f gained 9 s, g 1 s."""
    prev = (_stack("f", 2.0, 20.0), _stack("g", 8.0, 80.0))
    cur = (_stack("f", 11.0, 55.0), _stack("g", 9.0, 45.0, ))
    w = window_frames(prev, cur)
    assert w is not None and w.newest and w.active_s == pytest.approx(10.0)
    assert [(r.frame, round(r.pct)) for r in w.rows] == [("f", 90), ("g", 10)]
    assert window_frames(cur, cur) is None  # no new samples: the feed keeps the last window
    first = window_frames((), cur)
    assert first is not None and not first.newest and first.rows[0].pct == pytest.approx(55.0)


def test_filter_keeps_matching_rows_and_their_heading_and_drill_down_shows_more():
    vm = PanelVM("CPU", (MetricLine("process", "50%"), MetricLine("threads", "", kind="heading"),
                         MetricLine("101 python", "90%", kind="item"),
                         MetricLine("frames", "", kind="heading"), MetricLine("json · dumps", "60%", kind="item")),
                 more=(MetricLine("frames (more)", "", kind="heading"), MetricLine("json · loads", "5%", kind="item")))
    text = panel_lines(vm, 40, needle="JSON")[0].plain
    assert "process" in text and "frames" in text and "dumps" in text
    assert "threads" not in text and "python" not in text and "loads" not in text
    zoomed = panel_lines(vm, 40, zoomed=True, needle="json")[0].plain
    assert "loads" in zoomed and "dumps" in zoomed
    assert "loads" in panel_lines(vm, 40, rows=7)[0].plain  # spare rows show more of the lists
    assert "loads" not in panel_lines(vm, 40, rows=5)[0].plain


def test_service_panel_without_spans_says_why():
    vm = service_panel(None, manifest_info({"collectors": [{"name": "otlp", "state": "unavailable",
                                                      "reason": "not requested"}]}))
    assert not vm.lines and "otlp unavailable: not requested" in vm.note


def _span(end_s: float, dur_ms: float, parent: str | None = None) -> dict:
    end = int(1_700_000_000e9 + end_s * 1e9)
    return {"trace_id": "t", "span_id": "s", "parent_span_id": parent, "name": "handle",
            "start_ns": end - int(dur_ms * 1e6), "end_ns": end}


def test_request_rate_and_p99_per_second_from_root_spans():
    """3 requests/s for 4 s (the last second slow), a child span and an open span that are not
    requests, a gap of 2 s without requests, one late arrival and one from a broken clock."""
    series = RequestSeries()
    now = int(1_700_000_000e9 + 100e9)
    for sec in range(4):
        for k in range(3):
            series.add(_span(sec + 0.2 + 0.3 * k, 500.0 if sec == 3 else 10.0 + k), now)
    series.add(_span(1.5, 999.0, parent="s"), now)
    series.add({**_span(1.5, 1.0), "end_ns": None}, now)
    series.add(_span(6.5, 20.0), now)
    series.add(_span(5e6, 1.0), now)  # ends two months ahead of the wall clock: skipped
    for sec in range(7, 20):
        series.add(_span(sec + 0.5, 20.0), now)
    series.add(_span(0.5, 1.0), now)  # 19 s behind the newest: its second is closed
    snap = series.snapshot()
    assert snap.requests == 12 + 1 + 13 and snap.late == 1
    assert snap.qps.values[:7] == (3.0, 3.0, 3.0, 3.0, 0.0, 0.0, 1.0)
    assert snap.p99_ms.values[:4] == pytest.approx((12.0, 12.0, 12.0, 500.0))
    assert snap.p99_ms.weights_s[4:6] == (0.0, 0.0)  # no request ended: no P99, not a zero
    trends = request_trends(snap)
    text, _ = trend_text(trends["spans.p99_ms"], 20)
    assert text.strip()[:2] == "▁█"  # 3 s columns: the slow second survives as its column's P99


def test_service_panel_shows_live_requests_before_the_first_analysis():
    series = RequestSeries()
    for i in range(50):
        series.add(_span(i / 10, 30.0))
    vm = service_panel(None, ManifestInfo(), series.snapshot())
    lines = {ln.label: ln for ln in vm.lines}
    assert lines["QPS"].value == "10 1/s" and lines["QPS"].trend is not None
    assert lines["P99"].value == "30 ms" and "50 requests so far" in vm.note


def test_tail_reads_a_flooded_stream_in_bounded_chunks(tmp_path):
    path = tmp_path / "spans.jsonl"
    rows = [{"i": i, "pad": "x" * 50} for i in range(100)]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows[:50]) + b'{"huge": "' + b"y" * 5000
                     + b'"}\n' + b"".join(orjson.dumps(r) + b"\n" for r in rows[50:]))
    tail = JsonlTail(path, max_bytes=1000)
    got: list[dict] = []
    for _ in range(40):
        got += list(tail.read())
    assert got == rows and tail.bad_lines == 1 and not tail.behind


def test_drill_down_and_filter_keys_on_the_dashboard(tmp_path):
    """tab moves to the account panel, enter opens it alone, esc closes it; / filters list rows in
    every panel and esc clears the filter."""
    import asyncio

    from diagnose.pipeline import analyse
    from diagnose.tui.app import make_app
    from helpers import REPO

    async def go():
        app = make_app(analyse(REPO / "fixtures" / "cpu" / "service-json"), live=True, export_dir=tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            screen = app.screen
            await pilot.press("tab", "tab", "enter")
            assert screen.zoomed == "account"
            assert screen.panels["account"].display and not screen.panels["cpu"].display
            await pilot.press("escape")
            assert screen.zoomed is None and screen.panels["cpu"].display
            await pilot.press("slash", *"iterencode")
            cpu = str(screen.panels["cpu"]._lines.render())
            assert "iterencode" in cpu and "raw_decode" not in cpu and "process" in cpu
            await pilot.press("escape")
            assert screen.needle == "" and "raw_decode" in str(screen.panels["cpu"]._lines.render())

    asyncio.run(go())


def test_history_survives_a_clock_jump_without_walking_the_gap():
    buckets = TimeBuckets(max_buckets=5)
    buckets.add(1.0, 10.0)
    buckets.add(1e12, 20.0)  # a jump of ~30,000 years: one bucket kept, not 1e12 appended
    assert buckets.snapshot().values == (20.0,)


def test_service_panel_shows_the_engine_while_no_span_arrives(tmp_path):
    """``--metrics`` scrapes flow, no span does: the panel showed only "no spans yet"; it shows the
    engine's running / waiting and KV cache (newest scrape), TTFT and the queue share (the vLLM
    recording of fixtures/serving-metrics, read through the feed's bounded tail)."""
    from types import SimpleNamespace

    from diagnose.bundle.streams import SERVING
    from diagnose.tui.live.feed import LiveFeed
    from serving_sim import recording

    records, _ = recording("vllm")
    (tmp_path / SERVING.name).write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    feed = LiveFeed(SimpleNamespace(capture=SimpleNamespace(bundle_path=tmp_path)))  # type: ignore[arg-type]
    feed.drain()
    feed.close()
    vm = service_panel(None, ManifestInfo(), None, feed.engine.snapshot())
    lines = {ln.label: ln.value for ln in vm.lines}
    # the recording's last scrape: running 6, waiting 4, KV 0.98; its window: TTFT P50 62.5 ms, queue 40%
    assert lines == {"running / waiting": "6 / 4", "KV cache": "98%", "TTFT P50 / P99": "62 / 242 ms",
                     "queue share": "40%"}, lines
    assert vm.note.startswith("no spans yet: serving engine /metrics (4 scrapes")
    assert service_panel(None, ManifestInfo()).note.startswith("no spans yet: ")  # without scrapes: as before
