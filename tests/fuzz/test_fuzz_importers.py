"""Fuzzing ``diagnose analyze FILES``' importers (tests/fuzz/test_fuzz_importers.py; tests/fuzzing.py
says how long and how to reproduce a case).

Mutated torch profiler traces (fixtures/, as JSON and as gzip bytes), span dumps (the OpenTelemetry
SDK's OTLP/JSON and console output) and py-spy output (chrometrace windows from fixtures/, raw and
speedscope in py-spy's formats) go through ``import_files`` exactly as the CLI calls it: it
builds a bundle or raises ImportFailed with a one-line message and leaves no half-built bundle,
never another exception, within a bounded amount of Python memory.
"""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from diagnose.bundle.importers import ImportFailed, import_files
from fuzzing import MiB, fuzz
from helpers import REPO

FIXTURES = REPO / "fixtures"
TORCH_TRACES = [FIXTURES / "gpu" / "bandwidth-copy-gather" / "torch" / "trace-0001.json.gz",
                FIXTURES / "gpu" / "io-socket-reads" / "torch" / "trace-0001.json.gz"]
PYSPY_WINDOWS = [FIXTURES / "cpu" / "compute-torch" / "pyspy" / "window-0001.json",
                 FIXTURES / "cpu" / "io-socket" / "pyspy" / "window-0001.json"]
# py-spy's raw (collapsed stacks) and speedscope shapes, as `py-spy record --threads --format ...` writes them
PYSPY_RAW = (b"thread (0x7F0A1B2C3D40): MainThread;<module> (app.py:40);serve (app.py:31);"
             b"encode (json/encoder.py:199) 57\n"
             b"thread (0x7F0A1B2C3D40): MainThread;<module> (app.py:40);serve (app.py:33) 12\n"
             b"thread (0x7F0A11111111): worker;run (threading.py:975);work (app.py:12) 30\n")
PYSPY_SPEEDSCOPE = json.dumps({
    "$schema": "https://www.speedscope.app/file-format-schema.json", "exporter": "py-spy@0.3.14",
    "name": "py-spy profile", "activeProfileIndex": None,
    "shared": {"frames": [{"name": "<module>", "file": "app.py", "line": 40},
                          {"name": "serve", "file": "app.py", "line": 31},
                          {"name": "encode", "file": "json/encoder.py", "line": 199}]},
    "profiles": [{"type": "sampled", "name": "Thread 139680 \"MainThread\"", "unit": "seconds",
                  "startValue": 0, "endValue": 0.99, "samples": [[0, 1, 2], [0, 1], [0, 1, 2]],
                  "weights": [0.01, 0.01, 0.01]}]}).encode()

MAX_PEAK = 96 * MiB  # Python memory one import of a <= 256 KiB file may take


def importer_target(tmp_path: Path, name: str):
    """Write the input as ``name``, import it, remove the bundle; checks what is left behind."""
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()

    def run(data: bytes) -> None:
        path = src / name
        path.write_bytes(data)
        try:
            bundle = import_files([path], out)
        except ImportFailed:
            assert not list(out.glob("diagnose-import-*")), "a half-built bundle was left behind"
            raise
        assert (bundle / "manifest.json").is_file()
        shutil.rmtree(bundle)
    return run


def fuzz_import(tmp_path: Path, label: str, name: str, seeds: list[bytes]) -> None:
    fuzz(f"import-{label}", seeds, importer_target(tmp_path, name), allowed=(ImportFailed,),
         save_dir=tmp_path, max_peak_bytes=MAX_PEAK, max_len=256 * 1024)


def test_fuzz_torch_trace_json(tmp_path):
    fuzz_import(tmp_path, "torch-json", "trace.json", [gzip.decompress(p.read_bytes()) for p in TORCH_TRACES])


def test_fuzz_torch_trace_gzip_bytes(tmp_path):
    fuzz_import(tmp_path, "torch-gz", "trace.json.gz", [p.read_bytes() for p in TORCH_TRACES])


@pytest.mark.parametrize("kind", ["json", "console"])
def test_fuzz_span_files(otel_seeds, tmp_path, kind):
    fuzz_import(tmp_path, f"spans-{kind}", "spans.json", otel_seeds[kind])


def test_fuzz_pyspy_files(tmp_path):
    fuzz_import(tmp_path, "pyspy", "profile.txt", [p.read_bytes() for p in PYSPY_WINDOWS] + [PYSPY_RAW,
                                                                                                PYSPY_SPEEDSCOPE])
