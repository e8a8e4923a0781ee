"""Kernel timeline of torch profiler (Kineto) traces: a streaming reader into numpy columns
(reader.py, stream.py, scan.py, columns.py; FLOPs per op from flops.py, flop_formulas.py, op_args.py; GPUs
from devices.py) and one analyzer per question (temporal.py, kernels.py, launch.py, gaps.py,
steps.py, roofline.py), combined by report.py (analyze_trace -> TraceReport) and turned into
signals by diagnose/signals/kernel_timeline.py. Pure functions of the trace; the bundle is read in
diagnose/signals/timeline.py."""
from diagnose.traces.reader import KinetoTrace, TraceReadError, read_trace
from diagnose.traces.report import TimelineOptions, TraceReport, analyze_trace

__all__ = ["KinetoTrace", "TimelineOptions", "TraceReadError", "TraceReport", "analyze_trace", "read_trace"]
