"""Collector threads and the py-spy children they start run at the host's lowest CPU priority
(collectors/priority.py), and the manifest says so: a saturated target keeps its cores."""
from __future__ import annotations

import os
import subprocess
import threading

import pytest

from diagnose.collectors import priority


def _policy_and_nice(tid: int) -> tuple[int, int]:
    fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[38]), int(fields[16])  # policy (field 41), nice (field 19)


def test_a_lowered_thread_and_its_child_run_at_nice_19():
    got: dict[str, object] = {}

    def collector() -> None:
        got["how"] = priority.lower_this_thread()
        got["self"] = _policy_and_nice(threading.get_native_id())
        child = subprocess.run(["python3", "-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"],
                               capture_output=True, text=True, check=True)
        got["child"] = int(child.stdout)

    priority.reset()
    t = threading.Thread(target=collector, name="diagnose-test-lowered")
    t.start()
    t.join(30)
    assert got["how"] == priority.NICE_19
    assert got["self"] == (os.SCHED_OTHER, 19) and got["child"] == 19  # fork copies the thread's nice value
    assert priority.applied() == {"diagnose-test-lowered": priority.NICE_19}
    # the calling (main) thread keeps its own priority: the analysis and the live view are not slowed
    assert _policy_and_nice(threading.get_native_id()) == (os.SCHED_OTHER, 0)


def test_a_stopping_capture_gives_lowered_threads_their_priority_back():
    """On a saturated host a nice-19 thread would wait its turn to write its last window."""
    lowered, resume = threading.Event(), threading.Event()
    seen: dict[str, tuple[int, int]] = {}

    def collector() -> None:
        priority.lower_this_thread()
        lowered.set()
        resume.wait(30)
        seen["after"] = _policy_and_nice(threading.get_native_id())

    priority.reset()
    t = threading.Thread(target=collector, name="diagnose-test-restored")
    t.start()
    lowered.wait(30)
    priority.restore_all()
    resume.set()
    t.join(30)
    assert seen["after"] == (os.SCHED_OTHER, 0)


def _imports_in_a_thread(lowered: list[int], then_restore: bool) -> dict[str, tuple[int, int]]:
    from diagnose import pipeline

    done, resume = threading.Event(), threading.Event()
    seen: dict[str, tuple[int, int]] = {}

    def imports() -> None:
        pipeline._import_analysis(lowered)
        seen["imports"] = _policy_and_nice(threading.get_native_id())
        done.set()
        resume.wait(30)
        seen["after"] = _policy_and_nice(threading.get_native_id())

    t = threading.Thread(target=imports, name="analysis-imports")
    t.start()
    done.wait(60)
    if then_restore:
        for tid in lowered:  # what the capture's finish does before it analyses
            priority.restore(tid)
    resume.set()
    t.join(30)
    return seen


def test_as_root_the_analysis_imports_run_at_nice_19_until_the_analysis_needs_them():
    if os.geteuid() != 0:
        pytest.skip("only root can give a thread nice 0 back (the branch other users take is tested below)")
    lowered: list[int] = []
    seen = _imports_in_a_thread(lowered, then_restore=True)
    assert len(lowered) == 1
    assert seen["imports"] == (os.SCHED_OTHER, 19) and seen["after"] == (os.SCHED_OTHER, 0)
    assert "analysis-imports" not in priority.applied()  # not a sampler: not in the manifest's list


def test_as_another_user_the_analysis_imports_keep_their_priority(monkeypatch):
    """nice 19 cannot be undone without privilege: the analysis would wait on a starved import."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    lowered: list[int] = []
    seen = _imports_in_a_thread(lowered, then_restore=False)
    assert lowered == [] and seen["imports"] == (os.SCHED_OTHER, 0)
