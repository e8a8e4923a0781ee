"""``--redact``: the rendered document with host and user names, home directories, IP addresses
and the target's command-line arguments replaced by stable placeholders (``{host-1}``,
``{user-1}``, ``{home-1}``, ``{ip-1}``, ``{arg-1}``: the same value always gets the same one, and
they are inert in GFM and JSON).

What is replaced: the target's host name (manifest ``target.host``, and its first label) and user
(``target.user``, when not a system account, uid < 1000); home directories (``/home/NAME`` and
``/Users/NAME`` anywhere in a path, and the target user's passwd home); IPv4/IPv6 addresses other
than loopback and the unspecified address (a four-part version number reads as one too); the
target's arguments (``target.cmdline[1:]``, and a target command after ``--`` in diagnose's own
command line) wherever the command line is shown, and any argument holding a path or
``key=value`` wherever it appears. A host or user name that is one of diagnose's own words (a
quadrant, a layer, "python"...) is replaced only inside paths: replacing the word would rewrite
the verdict. Markdown is redacted by context: a value's GFM-escaped form in text, its raw form in
code spans and fenced blocks, so a redaction can never remove an escape; JSON string values one by
one after parsing, keys too (span and thread names are keys). Pure: reads the report's manifest only.
"""
from __future__ import annotations

import ipaddress
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from diagnose.model import Layer, Quadrant, Report
from diagnose.render.markdown.gfm import text

_HOME = re.compile(r"(/home|/Users)/([^/\s`'\"|\\<>{}]+)")
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?!\.?\d)(?![A-Za-z0-9_])")
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?:%[A-Za-z0-9_.-]+)?(?![\w:])")
_FENCE = re.compile(r"^ {0,3}(`{3,})")
_TICKS = re.compile(r"`+")
SYSTEM_UID_MAX = 999
TITLE_CMD_CHARS = 80  # diagnose/render/markdown/report.py cuts the title's command line there
VOCABULARY = frozenset({q.value for q in Quadrant} | {lay.value for lay in Layer} | {
    "python", "python3", "diagnose", "cpu", "gpu", "host", "root", "target", "span", "model", "request", "torch",
    "kernel", "thread", "process", "worker", "agent", "localhost"})


@dataclass
class Redactor:
    secrets: list[tuple[str, str, bool]] = field(default_factory=list)  # (raw value, placeholder, as a word)
    argv: tuple[list[str], list[str]] | None = None  # the target's command line and its redacted form
    counters: dict[str, dict[str, str]] = field(default_factory=dict)

    def placeholder(self, kind: str, value: str) -> str:
        seen = self.counters.setdefault(kind, {})
        return seen.setdefault(value, f"{{{kind}-{len(seen) + 1}}}")

    def add(self, value: str, replacement: str, word: bool = False) -> None:
        if value and value != replacement and all(v != value for v, _, _ in self.secrets):
            self.secrets.append((value, replacement, word))
            self.secrets.sort(key=lambda s: -len(s[0]))

    def _ip(self, m: re.Match[str]) -> str:
        addr = m.group().split("%", 1)[0]
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            return m.group()
        if ip.is_loopback or ip.is_unspecified:
            return m.group()
        groups = [g for g in addr.split(":") if g]
        if ip.version == 6 and len(groups) < 3 and not (len(groups) == 2 and any(c.isdigit() for c in groups[-1])):
            return m.group()  # "c10::add" reads as IPv6; "fd00::5" is one
        return self.placeholder("ip", str(ip))

    def _patterns(self, s: str, escaped: bool) -> str:
        for value, repl, word in self.secrets:
            form = str(text(value)) if escaped else value
            if word:
                s = re.sub(rf"(?<![A-Za-z0-9]){re.escape(form)}(?![A-Za-z0-9])", _literal(repl), s)
            else:
                s = s.replace(form, repl)
        s = _HOME.sub(lambda m: f"{m.group(1)}/{self.placeholder('user', m.group(2))}", s)
        s = _IPV4.sub(self._ip, s)
        return _IPV6.sub(self._ip, s)

    def apply(self, s: str) -> str:
        """A plain string (a JSON value, a code span's or fenced block's content) redacted."""
        return self._patterns(s, escaped=False)

    def apply_markdown(self, md: str) -> str:
        """GFM redacted by context: escaped forms in text, raw forms in code spans and fences."""
        out, fence = [], ""
        for line in md.split("\n"):
            m = _FENCE.match(line)
            if fence:
                out.append(line if m and len(m.group(1)) >= len(fence) and not line.strip("` ") else self.apply(line))
                fence = "" if m and len(m.group(1)) >= len(fence) and not line.strip("` ") else fence
            elif m:
                fence = m.group(1)
                out.append(line)
            else:
                out.append(self._line(line))
        return "\n".join(out)

    def _line(self, line: str) -> str:
        """Text and code spans of one line (a code span: a backtick run up to the next run of the same length)."""
        parts, pos, runs = [], 0, list(_TICKS.finditer(line))
        i = 0
        while i < len(runs):
            opening = runs[i]
            close = next((j for j in range(i + 1, len(runs)) if len(runs[j].group()) == len(opening.group())), None)
            if close is None or (opening.start() > 0 and line[opening.start() - 1] == "\\"):
                i += 1
                continue
            parts.append(self._patterns(line[pos:opening.start()], escaped=True))
            parts.append(opening.group() + self.apply(line[opening.end():runs[close].start()]) + runs[close].group())
            pos, i = runs[close].end(), close + 1
        parts.append(self._patterns(line[pos:], escaped=True))
        return "".join(parts)


def _literal(repl: str) -> Callable[[re.Match[str]], str]:
    """A re.sub replacement that inserts ``repl`` as it is (no backslash or group processing)."""
    return lambda _m: repl


def _add_argv(r: Redactor, argv: list[str]) -> list[str]:
    args = [r.placeholder("arg", a) for a in argv[1:]]
    cmd, red = " ".join(argv), " ".join([argv[0], *args])
    short = cmd[:TITLE_CMD_CHARS - 1] + "…" if len(cmd) > TITLE_CMD_CHARS else cmd
    for a in (cmd, cmd[:120], short, shlex.join(argv)):  # the Reproduce block quotes it as a shell would
        r.add(a, red)
    for a, p in zip(argv[1:], args):
        quoted = shlex.quote(a)
        if len(a) >= 6 and ("/" in a or "=" in a) or (quoted != a and len(a) >= 4):
            r.add(quoted, p)  # 'sk_live!Zx9' as the shell line shows it, before the bare value
            r.add(a, p)
    return [argv[0], *args]


def _add_name(r: Redactor, kind: str, name: str) -> None:
    if len(name) >= 2 and name.lower() not in VOCABULARY:
        r.add(name, r.placeholder(kind, name), word=True)


def redactor_for(report: Report) -> Redactor:
    r = Redactor()
    raw = report.manifest.get("target")
    t: dict[str, Any] = raw if isinstance(raw, dict) else {}
    argv = [str(a) for a in t.get("cmdline") or [] if isinstance(a, str)]
    if len(argv) > 1:
        r.argv = (argv, _add_argv(r, argv))
    own = [str(a) for a in report.manifest.get("command") or [] if isinstance(a, str)]
    if "--" in own and len(own) > own.index("--") + 2:  # `diagnose run ... -- COMMAND ARGS`
        _add_argv(r, own[own.index("--") + 1:])
    host = t.get("host")
    if isinstance(host, str):
        for name in {host, host.split(".")[0]}:
            if name and name.lower() not in VOCABULARY and len(name) >= 2:
                r.add(name, r.placeholder("host", host), word=True)
    user, uid = t.get("user"), t.get("uid")
    if isinstance(user, str) and user and not (isinstance(uid, int) and uid <= SYSTEM_UID_MAX):
        _add_name(r, "user", user)
    if isinstance(uid, int):
        _add_passwd_home(r, uid)
    return r


def _add_passwd_home(r: Redactor, uid: int) -> None:
    import pwd

    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        return
    if home and home not in ("/", "/root") and not _HOME.search(home):
        r.add(home, r.placeholder("home", home))


def _walk(doc: Any, r: Redactor) -> Any:
    if isinstance(doc, str):
        return r.apply(doc)
    if isinstance(doc, list):
        if r.argv is not None and doc == r.argv[0]:
            return [r.apply(a) for a in r.argv[1]]
        return [_walk(x, r) for x in doc]
    if isinstance(doc, dict):
        return {r.apply(k): _walk(v, r) for k, v in doc.items()}  # keys too: some are span or thread names
    return doc


def redact(body: str | bytes, report: Report, is_json: bool) -> str | bytes:
    """``body`` (a rendered document of ``report``) redacted; JSON stays valid JSON."""
    r = redactor_for(report)
    if not is_json:
        return r.apply_markdown(body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body)
    raw = body.decode("utf-8") if isinstance(body, bytes) else body
    out = json.dumps(_walk(json.loads(raw), r), indent=None if "\n" not in raw.strip() else 2) + "\n"
    return out.encode("utf-8") if isinstance(body, bytes) else out


__all__ = ["Redactor", "redact", "redactor_for"]
