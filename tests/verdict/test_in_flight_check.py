"""Little's law cross-check of the two in-flight measurements (pure arithmetic)."""
from diagnose.model import Signal
from diagnose.results.quality import InFlightCheck
from diagnose.verdict.analyze import in_flight_check


def _sig(tcp: float | None, little: float | None) -> dict[str, Signal]:
    return {"tcp.in_flight_mean": Signal("tcp.in_flight_mean", tcp, "connections", "process"),
            "spans.in_flight_littles_law": Signal("spans.in_flight_littles_law", little, "requests", "spans")}


def test_littles_law_cross_check():
    # 1000 QPS x 50 ms = 50 in flight; 50 connections agree, 200 are mostly idle keep-alive ones
    assert in_flight_check(_sig(50.0, 1000 * 0.050)) == InFlightCheck(
        tcp_connections_mean=50.0, spans_littles_law=50.0, ratio=1.0, reading="agree")
    assert in_flight_check(_sig(200.0, 50.0)).reading.startswith("more connections than requests")
    assert in_flight_check(_sig(5.0, 50.0)).reading.startswith("fewer connections")
    assert in_flight_check(_sig(None, 50.0)) is None and in_flight_check(_sig(5.0, 0.0)) is None
