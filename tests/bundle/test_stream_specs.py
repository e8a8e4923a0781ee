"""Every stream of the bundle is declared once, in diagnose/bundle/streams.py: no other module of
the package (diagnose/, collectors/, rules/) spells a stream's file name, in code, docstrings or
comments; they name the spec (``PROCESS.name``, ``PYSPY_WINDOWS.file(n)``) instead."""
from __future__ import annotations

import ast
from pathlib import Path

from diagnose.bundle.streams import STREAMS, StreamKind, StreamSpec

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = ("diagnose", "collectors", "rules")
STREAMS_PY = REPO / "diagnose" / "bundle" / "streams.py"


def _sources() -> list[Path]:
    return sorted(p for d in PACKAGE_DIRS for p in (REPO / d).rglob("*.py") if p != STREAMS_PY)


def _text_needles() -> set[str]:
    """Text that names a stream wherever it appears: a JSON Lines file name, or the directory and
    file prefix of a numbered file (``pyspy/window-``)."""
    return {s.name if s.kind is StreamKind.JSONL else s.pattern.split("{", 1)[0] for s in STREAMS}


def _literal_heads() -> tuple[str, ...]:
    """How a string literal starts when it builds a numbered file name by hand (``window-``)."""
    return tuple(Path(s.pattern.split("{", 1)[0]).name for s in STREAMS if s.kind is StreamKind.FILES)


def _literal_dirs() -> set[str]:
    """A FILES stream's directory as the manifest lists it (``pyspy/``)."""
    return {s.name for s in STREAMS if s.kind is StreamKind.FILES}


def _offences(path: Path, root: Path = REPO) -> list[str]:
    text = path.read_text(encoding="utf-8")
    rel = path.relative_to(root)
    found = [f"{rel}:{n}: {needle!r}" for n, line in enumerate(text.splitlines(), 1)
             for needle in sorted(_text_needles()) if needle in line]
    heads, dirs = _literal_heads(), _literal_dirs()
    for node in ast.walk(ast.parse(text, str(path))):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and (node.value in dirs or node.value.startswith(heads))):
            found.append(f"{rel}:{node.lineno}: literal {node.value!r}")
    return found


def test_no_stream_name_outside_streams_py():
    offences = [o for p in _sources() for o in _offences(p)]
    assert not offences, ("stream names spelt outside diagnose/bundle/streams.py (use the StreamSpec):\n"
                          + "\n".join(offences))


def test_the_check_sees_a_literal(tmp_path):
    """The scan above is not vacuous: it flags a literal, an f-string file name and a directory."""
    bad = tmp_path / "bad.py"
    bad.write_text('A = "spans.jsonl"\nB = f"pyspy/window-{1:04d}.json"\nC = f"trace-{2}.json.gz"\nD = "torch/"\n')
    offences = _offences(bad, tmp_path)
    assert sorted(int(o.split(":")[1]) for o in offences) == [1, 2, 3, 4], offences


def test_specs_are_unique_and_well_formed():
    names = [s.name for s in STREAMS]
    assert len(names) == len(set(names))
    for s in STREAMS:
        assert isinstance(s, StreamSpec) and s.collector
        if s.kind is StreamKind.JSONL:
            assert s.name.endswith(".jsonl") and s.pattern is None and s.reader is not None
        else:
            assert s.name.endswith("/") and s.pattern.startswith(s.name)
            assert s.file(7).startswith(s.directory + "/") and "0007" in s.file(7)
