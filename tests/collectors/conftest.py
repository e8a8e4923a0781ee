"""Fixtures of the collector tests."""
from otlp_helpers import receiver  # noqa: F401  (fixture)
