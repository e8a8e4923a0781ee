"""Collector registry: every signal source diagnose can start, in one visible tuple."""
from diagnose.collectors.agent import AgentCollector
from diagnose.collectors.base import CaptureOptions, Collector, CollectorError, Probe
from diagnose.collectors.dcgm import DcgmCollector
from diagnose.collectors.gpm import GpmCollector
from diagnose.collectors.nvml import NvmlCollector
from diagnose.collectors.otlp import OtlpCollector
from diagnose.collectors.process import ProcessCollector
from diagnose.collectors.pyspy import PySpyCollector
from diagnose.collectors.serving_metrics import ServingMetricsCollector

COLLECTORS: tuple[type[Collector], ...] = (PySpyCollector, ProcessCollector, NvmlCollector, GpmCollector,
                                          DcgmCollector, ServingMetricsCollector, AgentCollector, OtlpCollector)

__all__ = ["COLLECTORS", "CaptureOptions", "Collector", "CollectorError", "Probe"]
