"""A trace without distributedInfo beside ranked ones is named as left out of the job (data
quality, report.md and the terminal), never dropped silently."""
from __future__ import annotations

import json
from pathlib import Path

from helpers import run_diagnose


def _traces(d: Path) -> None:
    for r in (0, 1, 7):  # the late one (5 ms behind) has no rank
        ev = [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 7,
               "ts": 1000.0 + (5000 if r == 7 else 0), "dur": 50.0,
               "args": {"device": 0, "stream": 7, "Collective name": "allreduce", "Process Group Name": "0", "Seq": 0}},
              {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100.0, "dur": 800.0,
               "args": {"device": 0, "stream": 7}}]
        doc: dict = {"schemaVersion": 1, "baseTimeNanoseconds": 1700000000000000000, "traceEvents": ev}
        if r != 7:
            doc["distributedInfo"] = {"rank": r, "world_size": 3, "backend": "nccl"}
        (d / f"rank-{r}.json").write_text(json.dumps(doc))


def test_a_rankless_trace_is_named_not_silently_left_out(tmp_path):
    from diagnose.bundle.importers import import_files
    from diagnose.pipeline import analyse

    (tmp_path / "t").mkdir()
    (tmp_path / "out").mkdir()
    _traces(tmp_path / "t")
    bundle = import_files(sorted((tmp_path / "t").iterdir()), tmp_path / "out")
    a = analyse(bundle, None).analysis
    assert a.details.ranks["world"] == 2
    note = a.data_quality.torch.ranks_not_compared
    assert note.endswith(".json.gz (rank-7.json): no rank (distributedInfo.rank missing from the trace): left out "
                         "of the comparison of the 2 ranked trace(s); its lags and waits are not measured "
                         "(profile every rank with torch.distributed initialised, or leave the file out)"), note
    r = run_diagnose("analyze", str(bundle))
    assert r.returncode == 0, r.stderr
    assert "(rank-7.json): no rank" in r.stderr and "diagnose: warning: trace-" in r.stderr
    assert "(rank-7.json): no rank" in (bundle / "report.md").read_text()
