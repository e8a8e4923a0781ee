"""Perfetto / Chrome trace: the whole capture as one Trace Event Format document (JSON object
format) for https://ui.perfetto.dev ("Open trace file") or chrome://tracing ("Load").

Clock: ``ts`` is µs (float, ns resolution) since ``otherData.origin_unix_ns``: the capture's start
(manifest ``started_ns``), or the earliest event if one comes before it, so no ``ts`` is negative.
Each source reaches the Unix clock through the function the analysis uses: py-spy through
``load_timed_stacks`` (window ``origin_ns`` + chrometrace µs), torch traces through ``read_trace``
(``baseTimeNanoseconds`` + µs), readings through their ``t_ns``, spans and GC pauses through
``start_ns``/``end_ns``.

Tracks, one trace process per source family (pids 1-8, in display order): requests (requests.py),
py-spy samples, torch CPU ops and runtime calls, GPU kernels, GPU counters, process counters, GC
pauses (streams.py), findings (findings.py). The event and its tracks: events.py; the renderer, its
limits and the document: document.py.
"""
from diagnose.render.perfetto.document import PerfettoRenderer

__all__ = ["PerfettoRenderer"]
