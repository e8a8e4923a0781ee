"""AttachRequest.on_captured runs once, when the collection has ended and before the analysis: the
demo stops its load generator and service there, so they never compete with the analysis."""
from __future__ import annotations

from diagnose.collectors import CaptureOptions
from diagnose.pipeline import AttachRequest, attach
from diagnose.tui.runner import capture_view


def test_on_captured_runs_once_after_collection_before_findings(workload, tmp_path):
    proc = workload("json_loop")
    options = CaptureOptions(duration_s=1.0, skip=("nvml", "gpm", "dcgm", "agent", "otlp"))
    out = tmp_path / "out"
    out.mkdir()
    seen: list[tuple[bool, bool]] = []

    def captured() -> None:
        bundle = next(out.iterdir())
        seen.append(((bundle / "manifest.json").is_file(), (bundle / "findings.json").exists()))

    done = attach(AttachRequest(proc.pid, options, out, ("test",), {}, captured), capture_view(True, out, {}))
    assert seen == [(True, False)]  # the capture was finished (manifest written), the analysis not begun
    assert (done.capture.bundle_path / "findings.json").is_file()
