"""Fixtures of the export tests: a bundle with requests (the service-json fixture plus 100 spans of
10..109 ms with gen_ai TTFT and output tokens, and a cost record), and an OTLP sink."""
from __future__ import annotations

import shutil

import pytest

from diagnose.pipeline import analyse
from export_helpers import OtlpSink, write_spans
from helpers import REPO


@pytest.fixture(scope="session")
def served_bundle(tmp_path_factory):
    b = tmp_path_factory.mktemp("export") / "bundle"
    shutil.copytree(REPO / "fixtures/cpu/service-json", b)
    write_spans(b)
    return b


@pytest.fixture(scope="session")
def served_report(served_bundle):
    return analyse(served_bundle)


@pytest.fixture
def otlp_sink():
    sink = OtlpSink()
    yield sink
    sink.close()
