"""Fixtures of the collector tests."""
from __future__ import annotations

import pytest

from otlp_helpers import Receiver


@pytest.fixture
def receiver(tmp_path):
    made: list[Receiver] = []

    def _make(collector_args: dict | None = None, **opts) -> Receiver:
        r = Receiver(tmp_path / f"b{len(made)}", collector_args, **opts)
        made.append(r)
        return r

    yield _make
    for r in made:
        if r.collector._server is not None and r.collector._thread.is_alive():
            r.collector.stop(5)
