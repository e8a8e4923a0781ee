"""A torch trace with one malformed event keeps every other event: the reader drops and counts the
broken one, names its byte offset, and restarts at the next event; backslashes that start no JSON
escape (Windows paths in with_stack names) are escaped and the event kept."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from diagnose.bundle.importers import import_files
from diagnose.traces import reader as reader_mod
from diagnose.traces import stream as stream_mod
from diagnose.traces.reader import read_trace
from diagnose.traces.tolerant import next_event, parse_event

BASE_NS = 1_700_000_000_000_000_000
WINDOWS_NAME = r"C:\Users\x\model.py(12): forward"


def kernel(i: int, name: str = "k") -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 10 * i, "dur": 5,
            "args": {"stream": 7, "device": 0, "correlation": i}}


def trace(texts: list[str]) -> tuple[bytes, list[int]]:
    """The document and the byte offset where each event opens."""
    head = b'{"baseTimeNanoseconds":%d,"traceEvents":[' % BASE_NS
    out, offsets = bytearray(head), []
    for i, t in enumerate(texts):
        if i:
            out += b", "
        offsets.append(len(out))
        out += t.encode()
    return bytes(out + b"]}"), offsets


def agent(bundle: Path) -> dict:
    m = json.loads((bundle / "manifest.json").read_text())
    return next(c for c in m["collectors"] if c["name"] == "agent")


BREAKS = {  # one broken key, as a hand edit or a crashed writer leaves it
    "opening quote lost": ('"dur"', 'dur"'),
    "closing quote lost": ('"dur"', '"dur'),
    "colon lost": ('"dur":', '"dur"'),
    "key cut short": ('"dur": 5, ', '"du'),
}


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
@pytest.mark.parametrize("brk", list(BREAKS))
def test_one_broken_key_drops_one_event_and_keeps_the_140_after_it(tmp_path, brk, gz):
    texts = [json.dumps(kernel(i)) for i in range(149)]
    old, new = BREAKS[brk]
    texts[9] = texts[9].replace(old, new)
    data, offsets = trace(texts)
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    tr = read_trace(path)
    assert tr.report.error is None and tr.report.truncated_at_byte is None  # not "file truncated"
    assert tr.report.kept == 148 and tr.report.unparsable == 1
    assert tr.report.damage.first_dropped_byte == offsets[9]
    assert sorted(tr.gpu["correlation"].tolist()) == [i for i in range(149) if i != 9]
    status = agent(import_files([path], tmp_path / "out"))
    assert status["counts"]["torch_events"] == 148 and status["counts"]["torch_events_dropped"] == 1
    assert f"1 malformed event(s) dropped, the first at byte {offsets[9]}" in status["reason"]
    assert "truncated" not in status["reason"]


def test_broken_events_across_chunks_resume_at_the_next_event(tmp_path, monkeypatch):
    """Streaming in small chunks (the path a multi-GB trace takes): three broken events, one of
    them longer than a chunk, one the last, each costs only itself."""
    monkeypatch.setattr(stream_mod, "CHUNK_BYTES", 1500)
    monkeypatch.setattr(stream_mod, "RESYNC_BYTES", 4000)
    monkeypatch.setattr(reader_mod, "WHOLE_DOC_BYTES", 0)
    texts = [json.dumps(kernel(i, name="x" * (i % 7) + "[k]")) for i in range(400)]
    bad = (3, 150, 398)
    for i in bad:
        texts[i] = texts[i].replace('"dur"', 'dur"')
    texts[150] = texts[150].replace('"name": "', '"name": "' + "q" * 3000)  # broken, longer than a chunk
    data, offsets = trace(texts)
    path = tmp_path / "t.json"
    path.write_bytes(data)
    tr = reader_mod.read_trace(path)
    assert tr.report.error is None, tr.report
    assert sorted(tr.gpu["correlation"].tolist()) == [i for i in range(400) if i not in bad]
    assert tr.report.unparsable == 3 and tr.report.damage.first_dropped_byte == offsets[3]


def test_windows_paths_in_names_are_repaired_counted_and_kept(tmp_path):
    texts = [json.dumps(kernel(i)) for i in range(20)]
    texts[4] = texts[4].replace('"name": "k"', f'"name": "{WINDOWS_NAME}"')  # backslashes not escaped
    texts[5] = texts[5].replace('"name": "k"', '"name": "D:\\\\ok\\\\escaped"')  # valid JSON: untouched
    data, offsets = trace(texts)
    path = tmp_path / "win.json"
    path.write_bytes(data)
    tr = read_trace(path)
    assert tr.report.kept == 20 and tr.report.unparsable == 0 and tr.report.damage.backslashes == 1
    assert WINDOWS_NAME in tr.names and r"D:\ok\escaped" in tr.names
    status = agent(import_files([path], tmp_path / "out"))
    assert status["counts"]["torch_events"] == 20
    assert (f"1 event(s) with unescaped backslashes (e.g. Windows paths in names) repaired by escaping "
            f"them and kept, the first at byte {offsets[4]}") in status["reason"]


def test_backslash_repair_keeps_valid_escapes():
    ev, _ = parse_event(rb'{"name": "a\\b \u00e9 \n \"q\" C:\x\users\u12"}')
    assert ev == {"name": 'a\\b \u00e9 \n "q" C:\\x\\users\\u12'}
    assert parse_event(b'{"name": "x" "y"}') == (None, None)


def test_next_event_skips_objects_that_are_not_events():
    buf = b'{"ph":"X", args": {"a": [{"b": 1}, {"c": 2}]}}, {"ph": "X", "ts": 1}'
    assert next_event(buf, 0, 1 << 20) == buf.rindex(b'{"ph"')
    assert next_event(buf[:-3], 0, 1 << 20) is None  # the next event is not complete yet

