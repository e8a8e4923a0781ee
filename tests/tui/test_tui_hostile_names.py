"""Names from the target (its command line, thread names, function names, the agent's counts)
never reach the terminal as escape sequences: the dashboard and the results view write control
characters out as \\xNN (found by the break-it review: an OSC title set and a screen clear went
through byte for byte)."""
from __future__ import annotations

from diagnose.bundle.records.manifest import manifest_info, target_info
from diagnose.tui.live.adapt import cpu_panel, header_view
from diagnose.tui.live.frames import FrameShare, FrameWindow
from diagnose.tui.live.series import Buckets, CpuSnapshot, ThreadCpu
from diagnose.tui.results.adapt import title_line
from diagnose.tui.text import printable

OSC, CLEAR, SGR = "\x1b]0;PWNED\x1b\\", "\x1b[2J", "\x1b[5;31m"


def _no_controls(text: str) -> bool:
    return not any(ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 for c in text)


def test_printable_writes_controls_out_and_keeps_the_rest():
    assert printable(f"a{CLEAR}b\x9bc\x7f é ☃") == "a\\x1b[2Jb\\x9bc\\x7f é ☃"
    assert printable(printable(OSC)) == printable(OSC)


def test_header_and_title_carry_no_escape_from_the_command_line_or_counts():
    target = {"pid": 7, "cmdline": ["python", OSC, CLEAR], "exe": "/usr/bin/python3"}
    vm = header_view(target_info(target), 1.0, 9.0, {"agent": {"note": SGR}}, {"agent": "running"})
    texts = [vm.target, *(c.counts for c in vm.collectors)]
    assert all(_no_controls(t) for t in texts), texts
    assert "PWNED" in vm.target  # shown, written out
    assert _no_controls(title_line(manifest_info({"target": target}), "b"))


def test_cpu_panel_thread_and_frame_names_carry_no_escape():
    empty = Buckets((), ())
    cpu = CpuSnapshot(3, empty, empty, (ThreadCpu(11, f"w{CLEAR}", 80.0),), 2.0, 2)
    frames = FrameWindow((FrameShare(f"f{OSC}", "compute", 60.0),), True, 1.0)
    panel = cpu_panel(cpu, None, frames)
    labels = [line.label for line in (*panel.lines, *panel.more)]
    assert any("w\\x1b" in x for x in labels) and all(_no_controls(x) for x in labels), labels
