"""GitHub-Flavored-Markdown-safe text: everything taken from the target (frame and thread names,
paths, command lines, attribute values, file names) goes through here so it renders as written
(``compute.<locals>.step``, ``__init__``, ``a|b``) and cannot inject HTML, links, mentions or table
cells. Checked against a real GFM renderer (cmark-gfm) in tests/render/test_markdown_gfm.py.

CommonMark lets any ASCII punctuation be backslash-escaped; the characters escaped here are the
ones that can start inline markup (emphasis, code, links, images, raw HTML, entities, strikethrough,
table cells, mentions). GFM's extended autolinks (``www.``, ``http://``) are broken by escaping their
dot or colon; a mention is broken by an invisible word joiner after its ``@``.
"""
from __future__ import annotations

import re
from typing import Any

_MARKUP = re.compile(r"([\\`*_\[\]<|~&!#$])")
MENTION_BREAK = "\u2060"  # word joiner after "@": GitHub links @name in text nodes, escaped or not
_AUTOLINK = re.compile(r"(?i)\b(https?|ftp|mailto)(:)|\b(www)(\.)")
_BACKTICKS = re.compile(r"`+")


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # CR is a CommonMark line ending; ESC drives terminals


class Safe(str):
    """Markdown already made safe here (escaped text, a code span): ``cell`` leaves it as it is."""


def text(value: Any) -> str:
    """``value`` as literal inline text (one line: control characters, newlines too, become spaces)."""
    s = _CONTROL.sub(" ", str(value))
    s = _MARKUP.sub(r"\\\1", s).replace("@", "@" + MENTION_BREAK)
    return Safe(_AUTOLINK.sub(lambda m: f"{m.group(1)}\\:" if m.group(1) else f"{m.group(3)}\\.", s))


def cell(value: Any) -> str:
    """Literal text for a table cell (``Safe`` markdown as it is)."""
    return value if isinstance(value, Safe) else text(value)


def code(value: Any) -> str:
    """``value`` as an inline code span, whatever backticks it holds; pipes escaped so it may sit in
    a table cell (GFM splits cells on ``|`` even inside code spans)."""
    s = " ".join(_CONTROL.sub(" ", str(value)).split())
    run = max((len(m.group()) for m in _BACKTICKS.finditer(s)), default=0)
    fence = "`" * (run + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s else ""
    return Safe(f"{fence}{pad}{s}{pad}{fence}".replace("|", "\\|"))


def fenced(lines: list[str], info: str = "") -> list[str]:
    """A fenced code block holding ``lines`` verbatim: the fence is longer than any backtick run
    in them, so no line can close it."""
    body = [_CONTROL.sub(" ", ln) for ln in lines]
    run = max((len(m.group()) for ln in body for m in _BACKTICKS.finditer(ln)), default=0)
    fence = "`" * max(3, run + 1)
    return [fence + info, *body, fence]


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A GFM table (header as written, every cell through ``cell``) and the blank line after it."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows] + [""]


def join(parts: list[str], sep: str = ", ") -> Safe:
    """Safe pieces joined (each escaped unless already Safe)."""
    return Safe(sep.join(cell(p) for p in parts))


__all__ = ["Safe", "cell", "code", "fenced", "join", "table", "text"]
