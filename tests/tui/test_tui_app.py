"""The results browser driven with Textual's pilot: keys, widget state, files written."""
from __future__ import annotations

import asyncio
import io
import json
import stat

import pytest
from rich.console import Console
from textual.widgets import TabbedContent

from diagnose.pipeline import analyse
from diagnose.render import RENDERERS
from diagnose.tui.app import make_app
from diagnose.tui.help import HelpScreen
from diagnose.tui.live.screen import LiveScreen
from diagnose.tui.results.screen import ResultsScreen
from diagnose.tui.widgets.findings import FindingsList
from diagnose.tui.widgets.quadrant import QuadrantGrid
from diagnose.tui.widgets.stacks import StacksTree
from diagnose.tui.widgets.table import TableView
from helpers import REPO, is_report
from tui_helpers import FIXTURE_DIRS, FIXTURE_IDS, expected

SERVICE = REPO / "fixtures" / "cpu" / "service-json"


def run(coro):
    return asyncio.run(coro)


def _text(widget) -> str:
    return str(widget.render())


def _plain(renderable) -> str:
    """What a rich renderable (text, tables) shows, as plain text."""
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def _evidence(screen) -> str:
    return str(screen.query_one("#evidence-body").render())


@pytest.mark.parametrize("bundle", FIXTURE_DIRS, ids=FIXTURE_IDS)
def test_results_screen_shows_verdict_findings_and_stacks(bundle, tmp_path):
    exp = expected(bundle)

    async def go():
        app = make_app(analyse(bundle), export_dir=tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, ResultsScreen)
            primary = screen.query_one(QuadrantGrid).query(".-primary")
            assert [w.id for w in primary] == [f"quadrant-{exp['quadrant']}"]
            assert "▶" in _text(primary.first())  # marked in text, not only by colour
            findings = screen.query_one(FindingsList)
            assert findings.option_count == len(app.results.analysis.findings) > 0
            assert findings.shown[0].title in _evidence(screen)
            await pilot.press("2")
            assert screen.query_one(TabbedContent).active == "tab-stacks"
            tree = screen.query_one(StacksTree)
            labels = []
            stack = [tree.root]
            while stack:
                node = stack.pop()
                labels.append(str(node.label))
                stack.extend(node.children)
            assert any(exp["hot_function"] in lab for lab in labels)
            await pilot.press("3")
            assert "not captured" in _text(screen.query_one("#gaps").query_one(".table-title"))
            await pilot.press("q")
        assert not app.is_running

    run(go())


def test_drill_down_shows_the_evidence_of_the_highlighted_finding(tmp_path):
    async def go():
        app = make_app(analyse(SERVICE), export_dir=tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            screen = app.screen
            findings = screen.query_one(FindingsList)
            assert len(findings.shown) >= 2
            await pilot.press("down")
            second = findings.shown[1]
            assert findings.current() == second
            text = _evidence(screen)
            assert second.title in text and second.summary in text
            for e in second.evidence:
                assert e.signal in text and e.value in text and e.threshold in text and e.source[:40] in text
            assert "window: whole capture" in text and "What to try" in text

    run(go())


def test_filter_narrows_the_findings_and_escape_restores_them(tmp_path):
    async def go():
        app = make_app(analyse(SERVICE), export_dir=tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            screen = app.screen
            findings = screen.query_one(FindingsList)
            every = findings.shown
            needle = every[-1].rule_id
            await pilot.press("slash", *needle)
            await pilot.pause()
            assert screen.query_one("#filter").has_focus
            assert findings.shown == tuple(f for f in every if f.matches(needle))
            assert 0 < findings.option_count < len(every)
            assert every[-1].title in _evidence(screen)
            signals = screen.query_one("#signals", TableView)
            assert signals.rows_shown < len(screen.vm.signals.rows)
            await pilot.press("enter")  # keeps the filter, back to the list
            assert findings.has_focus and findings.option_count < len(every)
            await pilot.press("escape")
            assert findings.shown == every and signals.rows_shown == len(screen.vm.signals.rows)
            await pilot.press("slash", *"no-such-thing-anywhere")
            await pilot.pause()
            assert findings.option_count == 0 and "No finding matches" in _evidence(screen)

    run(go())


def test_export_keys_write_private_files(tmp_path):
    async def go():
        app = make_app(analyse(SERVICE), export_dir=tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await pilot.press(*(r.tui_key for r in RENDERERS.values() if r.tui_key))
            await pilot.pause()
            return app

    app = run(go())
    md = tmp_path / "service-json-md.md"
    js = tmp_path / "service-json-json.json"
    assert is_report(md.read_text())
    assert json.loads(js.read_text())["verdict"]["quadrant"] == "service"
    for p in (md, js):
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    keyed = [fmt for fmt, r in RENDERERS.items() if r.tui_key]
    assert sorted(p.name for p in app.exported) == sorted(f"service-json-{fmt}{RENDERERS[fmt].extension}"
                                                         for fmt in keyed)
    for p in app.exported:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600


def test_export_to_an_unwritable_directory_is_reported_not_raised(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")

    async def go():
        app = make_app(analyse(SERVICE), export_dir=blocked / "sub")
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await pilot.press("e")
            await pilot.pause()
            assert app.is_running and not app.exported
            assert any("export md failed" in str(n.message) for n in app._notifications)

    run(go())


def test_help_lists_the_keys_and_closes(tmp_path):
    async def go():
        app = make_app(analyse(SERVICE), export_dir=tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            text = " ".join(_plain(w.content) for w in app.screen.query("Static"))
            for key in ("filter", *(f"export {r.title} ({fmt} renderer)" for fmt, r in RENDERERS.items()
                                    if r.tui_key)):
                assert key in text
            await pilot.press("escape")
            assert isinstance(app.screen, ResultsScreen)

    run(go())


def test_small_terminal_degrades_without_errors(tmp_path):
    async def go():
        app = make_app(analyse(SERVICE), export_dir=tmp_path)
        async with app.run_test(size=(60, 16)) as pilot:
            await pilot.pause()
            screen = app.screen
            assert screen.has_class("-narrow") and screen.has_class("-small")
            assert not screen.query_one(QuadrantGrid).display
            assert "SERVICE-BOUND" in _text(screen.query_one("#verdict-text"))
            await pilot.resize_terminal(120, 40)
            await pilot.pause()
            assert not screen.has_class("-small") and screen.query_one(QuadrantGrid).display

    run(go())


def test_no_color_is_respected(tmp_path, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")

    async def go():
        app = make_app(analyse(SERVICE), export_dir=tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            assert app.no_color
            assert "CRIT" in str(app.screen.query_one(FindingsList).get_option_at_index(0).prompt)

    run(go())


def test_replayed_live_view(tmp_path):
    async def go():
        app = make_app(analyse(SERVICE), live=True, export_dir=tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, LiveScreen) and screen.updates == 1
            cpu = str(screen.query_one("#cpu-panel .metric-lines").render())
            assert "process" in cpu and "serialization" in cpu
            assert "not captured" in str(screen.query_one("#gpu-panel .metric-note").render())
            assert "SERVICE-BOUND" in str(screen.query_one("#live-verdict-text").render())
            await pilot.press("q")
        assert not app.is_running

    run(go())


def test_make_app_needs_one_source():
    with pytest.raises(ValueError):
        make_app()
