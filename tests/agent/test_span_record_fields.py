"""The agent's span record fields (diagnose/agent/inproc/records.py): the shortcuts for the values the
OpenTelemetry SDK gives (int ids, enum names) read exactly as the general reading does."""
from __future__ import annotations

import pytest

from diagnose.agent.inproc.records import SpanRejected, format_id, norm_kind, norm_status


@pytest.mark.parametrize("value, hex_chars, expected", [
    (1, 16, "0000000000000001"),
    (2**64 - 1, 16, "ffffffffffffffff"),
    (0xD1797494B81758EA, 16, "d1797494b81758ea"),
    (2**128 - 1, 32, "f" * 32),
    (0, 16, None),  # OTLP's "no parent"
    (0, 32, None),
])
def test_an_sdk_int_id_is_formatted_as_its_bytes_read(value, hex_chars, expected):
    assert format_id(value, hex_chars) == expected
    if value:  # the same as the id given as bytes
        assert format_id(value.to_bytes(hex_chars // 2, "big"), hex_chars) == expected


@pytest.mark.parametrize("value, hex_chars", [(2**64, 16), (-1, 16), (2**128, 32), (1.0, 16)])
def test_an_int_id_out_of_range_or_not_an_int_is_refused(value, hex_chars):
    with pytest.raises(SpanRejected, match="bad_id"):
        format_id(value, hex_chars)


@pytest.mark.parametrize("spelled, kind", [
    ("SERVER", "server"), ("server", "server"), ("SpanKind.CLIENT", "client"), ("SPAN_KIND_CONSUMER", "consumer"),
    ("INTERNAL", "internal"), (2, "server"), (0, "internal"), ("Server", "server"), ("bogus", "internal"),
    (None, "internal"), (["SERVER"], "internal"),
])
def test_span_kinds_read_alike_by_name_or_number(spelled, kind):
    assert norm_kind(spelled) == kind


@pytest.mark.parametrize("spelled, status", [
    ("UNSET", "unset"), ("ERROR", "error"), ("StatusCode.OK", "ok"), ("STATUS_CODE_ERROR", "error"),
    ("error", "error"), (2, "error"), (7, "unset"), ("Error", "error"), ({"code": 2}, "unset"),
])
def test_statuses_read_alike_by_name_or_number(spelled, status):
    assert norm_status(spelled) == status
