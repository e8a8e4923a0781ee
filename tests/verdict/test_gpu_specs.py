"""Roofline data: ridge points derived from the table, device names from the shared captures
matched to their rows, and per-bundle overrides."""
from __future__ import annotations

import json
import shutil

import pytest

from diagnose.bundle import Bundle
from diagnose.catalogs.dcgm_fields import parse_exposition
from diagnose.catalogs.gpu_specs import GPU_SPECS, Fingerprint, SpecError, find_spec, parse_overrides
from diagnose.verdict.analyze import analyze
from gpu_replay import DCGM, DCGM_FILES, need, smi_phase
from helpers import REPO


def test_ridge_point_is_peak_flops_over_bandwidth():
    for spec in GPU_SPECS:
        assert spec.ridge_flop_per_byte == pytest.approx(spec.dense_bf16_flops_per_s / spec.mem_bytes_per_s)
        assert spec.source
    assert find_spec("NVIDIA H100 80GB HBM3").ridge_flop_per_byte == pytest.approx(989 / 3.35)
    assert find_spec("NVIDIA H200").ridge_flop_per_byte == pytest.approx(989 / 4.8)


def test_names_from_the_shared_captures_find_their_rows():
    assert find_spec(smi_phase("h100", "idle").query["name"]).model == "H100 SXM"
    assert find_spec(smi_phase("h200", "idle").query["name"]).model == "H200"
    assert find_spec(parse_exposition(need(DCGM / DCGM_FILES["t4"]).read_text())[0]["model"]).model == "T4"
    assert find_spec(parse_exposition(need(DCGM / DCGM_FILES["l40s"]).read_text())[0]["model"]).model == "L40S"


@pytest.mark.parametrize("name, model", [
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"), ("NVIDIA A10", "A10"), ("NVIDIA L4", "L4"),
    ("NVIDIA H100 PCIe", "H100 PCIe"), ("Tesla V100-SXM2-16GB", "V100 SXM2"), ("Tesla V100-PCIE-32GB", "V100 PCIe"),
    ("AMD Instinct MI300X", "MI300X"), ("AMD Instinct MI250X", "MI250X (one GCD)"), ("AMD Instinct MI210", "MI210"),
])
def test_variants(name, model):
    assert find_spec(name).model == model


@pytest.mark.parametrize("name, facts, model, ridge", [
    ("AMD Instinct MI250X / MI250", Fingerprint((9, 0), 110, 64), "MI250X (one GCD)", 383 / 3.2),
    ("AMD Instinct MI250X / MI250", Fingerprint((9, 0), 104, 64), "MI250 (one GCD)", 362.1 / 3.2),
    ("AMD Radeon Graphics", Fingerprint((9, 0), 104, 64), "MI250 (one GCD) or MI210", 362.1 / 3.2),
    ("AMD Radeon Graphics", Fingerprint((9, 4), 304, 192), "MI300X", 1307.4 / 5.3),
    ("AMD Radeon Graphics", Fingerprint((11, 0), 96, 24), None, None),  # a Radeon RX: no row
    ("AMD Radeon Graphics", None, None, None),  # a generic name alone identifies nothing
])
def test_rocm_names_with_device_facts(name, facts, model, ridge):
    """torch deviceProperties: GFXIP version, CU count and memory split names ROCm leaves ambiguous."""
    spec = find_spec(name, facts=facts)
    assert (spec.model if spec else None) == model
    if ridge:
        assert spec.ridge_flop_per_byte == pytest.approx(ridge)


def test_unknown_model_and_bad_overrides():
    assert find_spec("NVIDIA GeForce RTX 4090") is None
    with pytest.raises(SpecError, match="row 0"):
        parse_overrides([{"model": "X"}])


def test_bundle_override_changes_the_roofline(tmp_path):
    b = tmp_path / "bundle"
    shutil.copytree(REPO / "fixtures" / "cpu" / "service-json", b)
    # a DCGM scrape of the T4 sample, as the dcgm collector writes it
    ents = parse_exposition(need(DCGM / DCGM_FILES["t4"]).read_text())
    (b / "dcgm.jsonl").write_text(json.dumps({"kind": "scrape", "t_ns": 1, "entities": ents}) + "\n")
    assert analyze(Bundle.open(b)).signals["gpu.ridge_flop_per_byte"].value == pytest.approx(65 / 0.32)
    (b / "gpu_specs.json").write_text(json.dumps([{"model": "T4 (measured)", "match": "T4", "dense_bf16_tflops": 40,
                                                   "mem_tb_per_s": 0.25, "source": "our own microbenchmark"}]))
    ridge = analyze(Bundle.open(b)).signals["gpu.ridge_flop_per_byte"]
    assert ridge.value == pytest.approx(160) and "our own microbenchmark" in ridge.source
    (b / "gpu_specs.json").write_text("{}")
    bad = analyze(Bundle.open(b)).signals["gpu.ridge_flop_per_byte"]
    assert bad.value is None and "JSON list" in bad.reason
