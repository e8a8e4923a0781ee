"""Collector registry: every signal source diagnose can start, in one visible tuple."""
from diagnose.collectors.base import CaptureOptions, Collector, CollectorError, Probe
from diagnose.collectors.process import ProcessCollector
from diagnose.collectors.pyspy import PySpyCollector

COLLECTORS: tuple[type[Collector], ...] = (PySpyCollector, ProcessCollector)

__all__ = ["COLLECTORS", "CaptureOptions", "Collector", "CollectorError", "Probe"]
