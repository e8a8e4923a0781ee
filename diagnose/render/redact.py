"""``--redact``: the rendered document with host and user names, home directories, IP addresses
and the target's command-line arguments replaced by stable placeholders (``{host-1}``,
``{user-1}``, ``{home-1}``, ``{ip-1}``, ``{arg-1}``: the same value always gets the same one, and
they are inert in GFM and JSON).

What is replaced: the target's host name (manifest ``target.host``) and user (``target.user``, when
not a system account, uid < 1000); home directories (``/home/NAME``, ``/Users/NAME`` and the
target user's passwd home); IPv4/IPv6 addresses other than loopback and the unspecified address;
the target's arguments (``target.cmdline[1:]``) wherever the command line is shown, and any
argument holding a path or ``key=value`` wherever it appears. Markdown is redacted as text (its
GFM-escaped forms too); JSON documents string by string after parsing, so escapes cannot hide a
value. Pure: reads the report's manifest only.
"""
from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from typing import Any

from diagnose.model import Report
from diagnose.render.markdown.gfm import code, text

_HOME = re.compile(r"(?<![\w.])(/home|/Users)/([^/\s`'\"|\\<>]+)")
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])")
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
SYSTEM_UID_MAX = 999
TITLE_CMD_CHARS = 80  # diagnose/render/markdown/report.py cuts the title's command line there


@dataclass
class Redactor:
    literals: list[tuple[str, str]] = field(default_factory=list)  # (value, placeholder), longest first
    argv: tuple[list[str], list[str]] | None = None  # the target's command line and its redacted form
    counters: dict[str, dict[str, str]] = field(default_factory=dict)

    def placeholder(self, kind: str, value: str) -> str:
        seen = self.counters.setdefault(kind, {})
        return seen.setdefault(value, f"{{{kind}-{len(seen) + 1}}}")

    def add(self, value: str, replacement: str) -> None:
        if value and value != replacement and (value, replacement) not in self.literals:
            self.literals.append((value, replacement))

    def _ip(self, m: re.Match[str]) -> str:
        try:
            ip = ipaddress.ip_address(m.group())
        except ValueError:
            return m.group()
        if ip.is_loopback or ip.is_unspecified or (ip.version == 6 and m.group().count(":") < 2):
            return m.group()
        if ip.version == 6 and sum(1 for g in m.group().split(":") if g) < 3:
            return m.group()  # "c10::add" reads as IPv6; a real address has more groups
        return self.placeholder("ip", str(ip))

    def apply(self, s: str) -> str:
        for value, repl in sorted(self.literals, key=lambda vr: -len(vr[0])):
            s = s.replace(value, repl) if not value.isidentifier() else re.sub(
                rf"(?<![\w-]){re.escape(value)}(?![\w-])", repl.replace("\\", "\\\\"), s)
        s = _HOME.sub(lambda m: f"{m.group(1)}/{self.placeholder('user', m.group(2))}", s)
        s = _IPV4.sub(self._ip, s)
        return _IPV6.sub(self._ip, s)


def _forms(value: str) -> tuple[str, ...]:
    """A value as it appears in the documents: raw, GFM text-escaped, inside a code span."""
    return (value, str(text(value)), str(code(value))[1:-1])


def redactor_for(report: Report) -> Redactor:
    r = Redactor()
    raw = report.manifest.get("target")
    t: dict[str, Any] = raw if isinstance(raw, dict) else {}
    argv = [str(a) for a in t.get("cmdline") or [] if isinstance(a, str)]
    if len(argv) > 1:
        args = [r.placeholder("arg", a) for a in argv[1:]]
        r.argv = (argv, [argv[0], *args])
        cmd, red = " ".join(argv), " ".join([argv[0], *args])
        short = cmd[:TITLE_CMD_CHARS - 1] + "…" if len(cmd) > TITLE_CMD_CHARS else cmd
        for a, b in ((cmd, red), (cmd[:120], red), (short, red)):
            for fa, fb in zip(_forms(a), _forms(b)):
                r.add(fa, fb)
        for a, p in zip(argv[1:], args):
            if len(a) >= 6 and ("/" in a or "=" in a):
                for fa in _forms(a):
                    r.add(fa, p)
    host = t.get("host")
    if isinstance(host, str) and len(host) >= 2:
        for name in {host, host.split(".")[0]}:
            for fa in _forms(name):
                r.add(fa, r.placeholder("host", host))
    user, uid = t.get("user"), t.get("uid")
    if isinstance(user, str) and user and not (isinstance(uid, int) and uid <= SYSTEM_UID_MAX):
        for fa in _forms(user):
            r.add(fa, r.placeholder("user", user))
    if isinstance(uid, int):
        _add_passwd_home(r, uid)
    return r


def _add_passwd_home(r: Redactor, uid: int) -> None:
    import pwd

    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        return
    if home and home not in ("/", "/root") and not _HOME.match(home):
        r.add(home, r.placeholder("home", home))


def _walk(doc: Any, r: Redactor) -> Any:
    if isinstance(doc, str):
        return r.apply(doc)
    if isinstance(doc, list):
        if r.argv is not None and doc == r.argv[0]:
            return [r.apply(a) for a in r.argv[1]]
        return [_walk(x, r) for x in doc]
    if isinstance(doc, dict):
        return {r.apply(k): _walk(v, r) for k, v in doc.items()}
    return doc


def redact(body: str | bytes, report: Report, is_json: bool) -> str | bytes:
    """``body`` (a rendered document of ``report``) redacted; JSON stays valid JSON."""
    r = redactor_for(report)
    if not is_json:
        return r.apply(body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body)
    raw = body.decode("utf-8") if isinstance(body, bytes) else body
    out = json.dumps(_walk(json.loads(raw), r), indent=None if "\n" not in raw.strip() else 2) + "\n"
    return out.encode("utf-8") if isinstance(body, bytes) else out


__all__ = ["Redactor", "redact", "redactor_for"]
