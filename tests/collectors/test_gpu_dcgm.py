"""DCGM collector against a real HTTP server on 127.0.0.1 serving the shared dcgm-exporter outputs
(all of them, the MIG one and the counters CSV included), through Capture and through a real
``diagnose attach --dcgm``."""
from __future__ import annotations

import json

import pytest

from diagnose.bundle import Bundle
from diagnose.catalogs.dcgm_fields import BLANK_REASON, parse_exposition
from diagnose.collectors.dcgm import DcgmCollector, parse_dcgm_target
from diagnose.collectors.process import ProcessCollector
from diagnose.model import Report
from diagnose.render import render
from diagnose.verdict.analyze import analyze
from gpu_replay import DCGM, DCGM_FILES, DcgmServer, capture, need, t4_variant, wait_for
from helpers import findings, only_bundle, run_diagnose

WAITING = ("GPU-Util 91% while graphics-engine activity 16% and DRAM activity 9%: "
           "the GPU is mostly waiting, not busy")
RENAMES = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",
           "DCGM_FI_PROF_DRAM_ACTIVE": "DCGM_FI_PROF_DRAM_UTIL_RATIO",
           "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
           "DCGM_FI_DEV_GPU_UTIL": "DCGM_FI_DEV_GPU_UTIL_RATIO", 'Hostname="': 'hostname="'}


@pytest.fixture
def dcgm_server():
    server = DcgmServer({
        "t4-blank": t4_variant(blanks=("DCGM_FI_PROF_DRAM_ACTIVE",)),
        "t4-dcgm46": t4_variant(renames=RENAMES),
        "html": "<html><body>not an exporter</body></html>",
        "node": "# TYPE node_load1 gauge\nnode_load1 0.5\n",
    })
    yield server
    server.close()


def test_parser_reads_every_shared_sample():
    t4 = parse_exposition(need(DCGM / DCGM_FILES["t4"]).read_text())
    assert len(t4) == 1
    v = t4[0]["values"]
    assert (v["gpu_util_pct"], v["mem_copy_util_pct"]) == (91.0, 73.0)
    assert v["gr_engine_active_pct"] == pytest.approx(15.6205) and v["dram_active_pct"] == pytest.approx(9.2781)
    assert t4[0]["model"] == "Tesla T4" and t4[0]["hostname"] == "cp-bm14r7"
    l40s = parse_exposition(need(DCGM / DCGM_FILES["l40s"]).read_text())  # HELP/TYPE lines
    assert l40s[0]["values"]["gr_engine_active_pct"] == 0.0 and l40s[0]["model"] == "NVIDIA L40S"
    mig = parse_exposition(need(DCGM / DCGM_FILES["a100-mig"]).read_text())
    inst = [e for e in mig if e["gpu_instance_id"]]
    assert len(mig) == 2 and inst[0]["gpu_instance_id"] == "13" and inst[0]["gpu_instance_profile"] == "1g.5gb"
    assert inst[0]["values"]["dram_active_pct"] == pytest.approx(80.0339)


def test_new_field_names_and_lowercase_host_label():
    ent = parse_exposition(t4_variant(renames=RENAMES))[0]
    assert ent["values"]["gr_engine_active_pct"] == pytest.approx(15.6205)
    assert ent["names"]["gr_engine_active_pct"] == "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO"
    assert ent["values"]["gpu_util_pct"] == 91.0 and ent["hostname"] == "cp-bm14r7"


def test_blank_values_are_unknown_with_reason():
    ent = parse_exposition(t4_variant(blanks=("DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_DEV_GPU_UTIL")))[0]
    assert "dram_active_pct" not in ent["values"] and ent["unknown"]["dram_active_pct"] == BLANK_REASON
    assert ent["unknown"]["gpu_util_pct"] == BLANK_REASON


def test_target_url_forms():
    assert parse_dcgm_target("http://127.0.0.1:9400") == ("exporter", "http://127.0.0.1:9400/metrics")
    assert parse_dcgm_target("dcgm://gpu-node") == ("hostengine", "gpu-node:5555")
    with pytest.raises(ValueError, match="--dcgm expects"):
        parse_dcgm_target("127.0.0.1:9400")


def test_attach_with_t4_exporter_says_the_gpu_is_waiting(workload, dcgm_server, tmp_path):
    proc = workload("json_loop")
    res = run_diagnose("attach", str(proc.pid), "--duration", "3", "--out", str(tmp_path),
                       "--dcgm", dcgm_server.url("t4"))
    assert res.returncode == 0, res.stderr
    bundle = only_bundle(tmp_path)
    doc = findings(bundle)
    waiting = [f for f in doc["findings"] if WAITING in f["summary"]]
    assert len(waiting) == 1, [f["summary"] for f in doc["findings"]]
    cpu = doc["signals"]["cpu.process_util_pct"]["value"]  # which host-side rule fits what was measured
    assert waiting[0]["rule_id"] == ("service.gpu_waiting_on_host" if cpu >= 60 else "io.gpu_and_host_waiting")
    sources = {e["signal"]: e["source"] for e in waiting[0]["evidence"]}
    assert sources["gpu.gr_engine_active_pct"].startswith("DCGM DCGM_FI_PROF_GR_ENGINE_ACTIVE x100")
    assert sources["gpu.kernel_busy_pct"].startswith("DCGM DCGM_FI_DEV_GPU_UTIL")
    assert not [f for f in doc["findings"] if f["quadrant"] in ("compute", "bandwidth")]  # not "GPU busy"
    assert WAITING in (bundle / "report.md").read_text()
    sm = doc["signals"]["gpu.sm_active_pct"]
    assert sm["value"] is None and "off in dcgm-exporter's default counters" in sm["reason"]
    assert (bundle / "dcgm" / "scrape-0001.prom").read_text() == (DCGM / DCGM_FILES["t4"]).read_text()
    dcgm = [c for c in json.loads((bundle / "manifest.json").read_text())["collectors"] if c["name"] == "dcgm"][0]
    assert dcgm["state"] == "ok" and dcgm["counts"]["records"] >= 2


def test_mig_instances_make_profiling_counters_unknown(workload, dcgm_server, tmp_path):
    proc = workload("idle_parent")
    bundle = capture(proc.pid, tmp_path, (DcgmCollector(),), dcgm_url=dcgm_server.url("a100-mig"))
    a = analyze(Bundle.open(bundle))
    for name in ("gpu.gr_engine_active_pct", "gpu.dram_active_pct", "gpu.tensor_active_pct"):
        s = a.signals[name]
        assert s.value is None and "MIG instances (GPU_I_ID 13 (1g.5gb))" in s.reason, s
    busy = a.signals["gpu.kernel_busy_pct"]
    assert busy.value is None and "MIG mode" in busy.reason
    assert a.signals["gpu.temp_max_c"].value == 61.0  # device-level fields still count
    mig = a.details.gpu_mig_instances
    assert mig[0].gpu_instance_id == "13" and mig[0].values["dram_active_pct"] == pytest.approx(80.03, abs=0.01)
    assert not a.findings
    report = render(Report(Bundle.open(bundle), a), "md-full")  # the GPU table is in the full report
    assert "## GPUs" in report
    assert "| GPU-34319582-d595-d1c7-d1d2-179bcfa61660 | 13 | 1g.5gb | 100% | - | 93% | 80% |" in report


def test_blank_and_renamed_pages_through_capture(workload, dcgm_server, tmp_path):
    proc = workload("idle_parent")
    blank = analyze(Bundle.open(capture(proc.pid, tmp_path / "a", (DcgmCollector(),),
                                        dcgm_url=dcgm_server.url("t4-blank"))))
    assert blank.signals["gpu.dram_active_pct"].value is None
    assert BLANK_REASON in blank.signals["gpu.dram_active_pct"].reason
    assert blank.signals["gpu.gr_engine_active_pct"].value == pytest.approx(15.6205)
    renamed = analyze(Bundle.open(capture(proc.pid, tmp_path / "b", (DcgmCollector(), ProcessCollector()),
                                          dcgm_url=dcgm_server.url("t4-dcgm46"))))
    dram = renamed.signals["gpu.dram_active_pct"]
    assert dram.value == pytest.approx(9.2781) and "DCGM_FI_PROF_DRAM_UTIL_RATIO" in dram.source
    gpu_rules = [f.rule_id for f in renamed.findings if ".gpu" in f.rule_id]
    assert gpu_rules == ["io.gpu_and_host_waiting"]  # idle target: the GPU and the host both wait


@pytest.mark.parametrize("page, why", [("counters-csv", "is not Prometheus text format"),
                                       ("html", "is not Prometheus text format"),
                                       ("node", "exposes no DCGM GPU field"),
                                       ("missing", "HTTP 404")])
def test_pages_that_are_not_an_exporter(page, why, workload, dcgm_server, tmp_path):
    proc = workload("idle_parent")
    bundle = capture(proc.pid, tmp_path, (DcgmCollector(), ProcessCollector()), dcgm_url=dcgm_server.url(page))
    b = Bundle.open(bundle)
    assert b.collectors["dcgm"].state.value == "unavailable" and why in b.collectors["dcgm"].reason
    assert b.collectors["process"].state.value == "ok"  # the capture goes on
    assert why in analyze(b).signals["gpu.sm_active_pct"].reason


def test_exporter_that_goes_away_leaves_a_partial_record(workload, tmp_path):
    server = DcgmServer()
    proc = workload("idle_parent")
    import threading

    # gone after the probe's scrape was served (not after a fixed 1.2 s: start-up may take longer)
    threading.Thread(target=lambda: wait_for(lambda: server.served >= 1, 60) and server.close(), daemon=True).start()
    bundle = capture(proc.pid, tmp_path, (DcgmCollector(),), duration_s=3.0, dcgm_url=server.url("t4"))
    b = Bundle.open(bundle)
    st = b.collectors["dcgm"]
    assert st.state.value == "partial" and "cannot reach" in st.reason and st.counts["errors"] >= 1
    assert analyze(b).signals["gpu.dram_active_pct"].value == pytest.approx(9.2781)


def test_bad_dcgm_url_is_a_usage_error(workload, tmp_path):
    proc = workload("idle_parent")
    res = run_diagnose("attach", str(proc.pid), "--duration", "1", "--out", str(tmp_path), "--dcgm", "gpu-node:9400")
    assert res.returncode == 2
    assert "--dcgm expects http(s)://HOST:PORT/metrics" in res.stderr and not list(tmp_path.iterdir())


@pytest.mark.gpu
def test_hostengine_through_dcgm_bindings(workload, tmp_path):
    """Where DCGM is installed and nv-hostengine runs, --dcgm dcgm://localhost reads the same fields."""
    from diagnose.collectors.dcgm import DcgmError, import_bindings

    try:
        import_bindings()
    except DcgmError as exc:
        pytest.skip(str(exc))
    proc = workload("idle_parent")
    b = Bundle.open(capture(proc.pid, tmp_path, (DcgmCollector(),), duration_s=3.0, dcgm_url="dcgm://localhost"))
    if b.collectors["dcgm"].state.value == "unavailable":
        pytest.skip(f"nv-hostengine not reachable: {b.collectors['dcgm'].reason}")
    assert b.collectors["dcgm"].state.value == "ok"
    assert analyze(b).signals["gpu.count"].value >= 1
