"""--redact: host and user names, home directories, IP addresses and the target's arguments
become stable placeholders in every format, and the documents stay valid (GFM renders, JSON parses)."""
from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from diagnose.cli import main
from diagnose.pipeline import analyse
from diagnose.render import RENDERERS, render
from diagnose.render.redact import redact, redactor_for
from helpers import REPO, gfm_text

SECRETS = ("alice", "build-host-7", "s3cr3t-token", "10.20.30.40", "2001:db8:85a3::8a2e:370:7334", "secret-model")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    b = tmp_path_factory.mktemp("redact") / "b"
    shutil.copytree(REPO / "fixtures/cpu/service-json", b)
    m = json.loads((b / "manifest.json").read_text())
    m["target"].update(user="alice", uid=1001, host="build-host-7.corp.example",
                       exe="/home/alice/venv/bin/python3",
                       cmdline=["/home/alice/venv/bin/python3", "serve.py", "--token=s3cr3t-token",
                                "--model", "/data/secret-model/weights.pt", "--peer", "10.20.30.40",
                                "--peer6", "2001:db8:85a3::8a2e:370:7334"])
    m["command"] = ["diagnose", "attach", "614", "--out", "/home/alice/bundles"]
    (b / "manifest.json").write_text(json.dumps(m))
    return b


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_every_format_loses_the_secrets_and_stays_valid(bundle, fmt):
    rep = analyse(bundle)
    plain = render(rep, fmt)
    plain_s = plain.decode() if isinstance(plain, bytes) else plain
    is_json = RENDERERS[fmt].extension.endswith(".json")
    out = redact(plain, rep, is_json)
    out_s = out.decode() if isinstance(out, bytes) else out
    for s in SECRETS:
        assert s not in out_s, (fmt, s)
    if is_json:
        json.loads(out_s)
    else:
        assert "alice" in plain_s  # the unredacted report did name them
        shown = gfm_text(out_s)
        assert "{host-1}" in shown and "{arg-2}" in shown and "{user-1}" in shown


def test_placeholders_are_stable_and_leave_vocabulary_alone(bundle):
    rep = analyse(bundle)
    r = redactor_for(rep)
    once = r.apply("alice on build-host-7 from 10.20.30.40 and 10.20.30.40; /home/bob/x.py; at::c10::add")
    assert once == "{user-1} on {host-1} from {ip-1} and {ip-1}; /home/{user-2}/x.py; at::c10::add"
    assert r.apply("compute-bound; root span; 127.0.0.1; driver 580.159.04; ::1") == (
        "compute-bound; root span; 127.0.0.1; driver 580.159.04; ::1")


def test_cli_report_redact(bundle, tmp_path):
    res = CliRunner().invoke(main, ["report", str(bundle), "--redact"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("# ") and "{arg-1}" in res.output
    assert not any(s in res.output for s in SECRETS)


def test_redaction_never_removes_an_escape(tmp_path):
    """A target argument ending in a backslash, and frame names holding HTML and a link: the
    redacted Markdown renders them as text, never as HTML or a link."""
    b = tmp_path / "b"
    shutil.copytree(REPO / "fixtures/cpu/service-json", b)
    m = json.loads((b / "manifest.json").read_text())
    m["target"]["cmdline"] = ["python", "serve.py", "--x=y\\"]
    (b / "manifest.json").write_text(json.dumps(m))
    hostile = "--x=y<img src=https://evil.example/p.png> --x=y[click](https://evil.example/login)"
    for w in (b / "pyspy").glob("*.json"):
        w.write_text(w.read_text().replace('"name":"dumps"', json.dumps({"name": hostile})[1:-1]))
    out = redact(render(analyse(b), "md-full"), analyse(b), False)
    html = __import__("cmarkgfm").github_flavored_markdown_to_html(out)
    assert "<img" not in html and "evil.example/login\"" not in html and "{arg-2}" in out


@pytest.mark.parametrize(("raw", "want"), [
    ("thread alice-worker and alice_2", "thread {user-1}-worker and {user-1}_2"),
    ("/var/home/bob/x.py and /gpfs/home/bob_smith/y", "/var/home/{user-2}/x.py and /gpfs/home/{user-3}/y"),
    ("peer 10.20.30.40. then fd00::5 and fe80::1%eth0", "peer {ip-1}. then {ip-2} and {ip-3}"),
])
def test_names_next_to_separators_paths_and_addresses(bundle, raw, want):
    assert redactor_for(analyse(bundle)).apply(raw) == want


def test_a_host_or_user_named_like_a_verdict_word_keeps_the_verdict(bundle, tmp_path):
    b = tmp_path / "b"
    shutil.copytree(bundle, b)
    m = json.loads((b / "manifest.json").read_text())
    m["target"].update(user="service", uid=1001, host="compute")
    (b / "manifest.json").write_text(json.dumps(m))
    rep = analyse(b)
    doc = json.loads(redact(render(rep, "json"), rep, True))
    assert doc["verdict"]["quadrant"] == rep.verdict.quadrant.value and doc["verdict"]["layer"] == "service"


def test_arguments_a_shell_would_quote_are_redacted_in_their_quoted_form_too(tmp_path):
    """Break-it review: `--api-key 'sk_live!Zx9'` survived --redact in the Reproduce block, which writes
    the command as shlex.join does."""
    b = tmp_path / "b"
    shutil.copytree(REPO / "fixtures/cpu/service-json", b)
    m = json.loads((b / "manifest.json").read_text())
    argv = ["python", "app.py", "--api-key", "sk_live!Zx9", "--pass", "hunter2 horse"]
    m["target"]["cmdline"] = argv
    m["command"] = ["diagnose", "run", "--capture", "5", "--", *argv]
    (b / "manifest.json").write_text(json.dumps(m))
    report = analyse(b)
    for fmt in sorted(RENDERERS):
        body = render(report, fmt)
        text = redact(body, report, fmt in ("json", "perfetto", "speedscope"))
        text = text.decode() if isinstance(text, bytes) else text
        assert "sk_live" not in text and "hunter2" not in text, fmt
