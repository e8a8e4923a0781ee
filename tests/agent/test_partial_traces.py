"""A target that dies mid-export leaves Kineto's temporary file: the host removes only the agent's
unfinished trace exports from its own bundle, never anything else (collectors/agent_staging.py)."""
from __future__ import annotations

import os

from diagnose.collectors.agent_staging import remove_partial_traces


def test_only_unfinished_trace_exports_are_removed(tmp_path):
    bundle = tmp_path / "b"
    torch_dir = bundle / "torch"
    torch_dir.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    for name in ("trace-0001.json.tmp", "trace-0002.json.tmp.tmp"):
        (torch_dir / name).write_bytes(b'{"traceEvents": [')
    (torch_dir / "trace-0003.json").write_text("{}")  # a finished trace stays
    (torch_dir / "notes.tmp").write_text("x")  # not the agent's name
    os.symlink(victim, torch_dir / "trace-0004.json.tmp")  # a link: removed neither it nor its target
    os.mkfifo(torch_dir / "trace-0005.json.tmp")
    removed = remove_partial_traces(bundle)
    assert sorted(removed) == ["torch/trace-0001.json.tmp", "torch/trace-0002.json.tmp.tmp"]
    assert sorted(os.listdir(torch_dir)) == ["notes.tmp", "trace-0003.json", "trace-0004.json.tmp",
                                             "trace-0005.json.tmp"]
    assert victim.read_text() == "keep"
    assert remove_partial_traces(tmp_path / "absent") == []
