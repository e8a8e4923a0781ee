"""The performance file's state block read into its types (diagnose/compare/perf_file.py): what
diagnose writes reads back the same and is written again byte for byte, an older file (rows without
``against``, deltas without ``delta`` and ``unit``) still reads, and a block whose values have the
wrong types is refused with one line naming where."""
from __future__ import annotations

import json

import msgspec
import pytest

from diagnose.compare.perf_file import (
    MARKER,
    Delta,
    GainRow,
    HistoryRow,
    KeyMetric,
    PerfFileError,
    PerfState,
    Snapshot,
    read_state,
    render,
)

SNAP = Snapshot(captured="2026-12-02 00:00:00 UTC", bundle="/b/base", quadrant="service", layer="service",
                headline="h", confidence=0.8, metrics={"qps": KeyMetric(label="QPS", value=700, unit="1/s"),
                                                       "cpu": KeyMetric(label="CPU", value=87.5, unit="%")})
ROWS = (HistoryRow(captured=SNAP.captured, change="baseline set", bundle="/b/base", verdict="Service-bound"),
        HistoryRow(captured="2026-12-02 00:10:00 UTC", change="batching on", bundle="/b/new", against=SNAP.captured,
                   verdict="Compute-bound", gate="pass", findings=["appeared: x (r.x)"],
                   deltas={"qps": Delta(delta_pct=12.5, delta=87, unit="1/s", significant=True, direction="better"),
                           "cpu": Delta(delta_pct=-10.0, delta=-8.75, unit="%", significant=False,
                                        direction="within noise")}))


def _block(tmp_path, doc) -> object:
    p = tmp_path / "perf.md"
    p.write_text(f"# x\n\n{MARKER} v1\n{json.dumps(doc)}\n-->\n")
    return p


def test_what_diagnose_writes_reads_back_the_same_and_is_written_again_byte_for_byte(tmp_path):
    p = tmp_path / "perf.md"
    body = render(PerfState("svc", SNAP, SNAP, ROWS))
    p.write_text(body)
    state = read_state(p)
    assert state == PerfState("svc", SNAP, SNAP, ROWS) and render(state) == body
    doc = json.loads(body.split(f"{MARKER} v1\n")[1].removesuffix("\n-->\n"))
    assert "against" not in doc["history"][0] and doc["history"][1]["against"] == SNAP.captured
    assert '"value": 700,' in body and '"delta": 87,' in body  # an int stays an int
    row = "| batching on | Compute-bound | - | - | +12.5% | -8.8 pp (noise) | - | - | pass | appeared: x (r.x) |"
    assert row in body


def test_a_predicted_gain_is_kept_beside_the_measured_one(tmp_path):
    row = msgspec.structs.replace(ROWS[1], gain=GainRow(remedy="Dynamic batching", metric="throughput",
                                                        predicted_low=2.0, predicted_high=4.9, measured=2.57,
                                                        noise=0.3, outcome="held"))
    p = tmp_path / "perf.md"
    body = render(PerfState("svc", SNAP, SNAP, (ROWS[0], row)))
    p.write_text(body)
    assert read_state(p).history[1].gain == row.gain and render(read_state(p)) == body
    assert "| throughput: predicted 2.00-4.90x, measured 2.57x (held) | pass |" in body
    doc = json.loads(body.split(f"{MARKER} v1\n")[1].removesuffix("\n-->\n"))
    assert "gain" not in doc["history"][0] and doc["history"][1]["gain"]["outcome"] == "held"


def test_an_older_file_without_the_fields_added_since_still_reads(tmp_path):
    row = {"captured": "a", "change": "c", "bundle": "/b", "verdict": "v", "gate": None, "findings": [],
           "deltas": {"p50": {"delta_pct": 5.0, "significant": None, "direction": "worse"}}}
    state = read_state(_block(tmp_path, {"service": "svc", "baseline": None, "current": None, "history": [row]}))
    assert state.history == (HistoryRow(captured="a", change="c", bundle="/b", verdict="v",
                                        deltas={"p50": Delta(delta_pct=5.0, direction="worse")}),)
    assert "| a | - | c | v | +5.0% (noise unknown) |" in render(state)


@pytest.mark.parametrize("doc, where", [
    ({"service": "s", "history": [{"captured": 5}]}, "$.history[0].captured"),
    ({"service": "s", "history": [{"captured": "a", "gate": "maybe"}]}, "$.history[0].gate"),
    ({"service": "s", "history": {"captured": "a"}}, "$.history"),
    ({"service": "s", "baseline": {"quadrant": "io"}}, "$.baseline"),
    ({"service": "s", "current": {"captured": "a", "metrics": {"p50": {"value": True}}}}, "$.current.metrics"),
    ({"service": "s", "history": [{"captured": "a", "deltas": {"p99": {"delta_pct": "5"}}}]}, "$.history[0].deltas"),
])
def test_a_state_block_of_the_wrong_shape_is_refused_naming_where(tmp_path, doc, where):
    with pytest.raises(PerfFileError, match="not one diagnose wrote") as exc:
        read_state(_block(tmp_path, doc))
    assert where in str(exc.value) and len(str(exc.value)) < 400
