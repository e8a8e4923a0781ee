"""The parsing child of a capture (diagnose/capture/ahead.py starts it): parses the bundle's py-spy
windows and torch traces as they arrive, at nice 19, and sends each result to the capture.

Protocol: the parent writes one JSON line ``{"path": bundle path, "overrides": {--thresholds}}``
to stdin; every POLL_S the child opens the bundle afresh and parses each py-spy window the PYSPY
index lists (signals/cpu.py window_segments) and runs each torch trace's task the TORCH index
lists (signals/trace_tasks.py trace_outcome), once each. It answers on stdout with an 8-byte
big-endian length and a pickle of one bundle.ahead.Parsed per result: the value with the stamp of
its file, taken before and after the read (a file that changed meanwhile is tried again at the
next poll, at most MAX_TRIES times). EOF on stdin ends it. Only parsing here: no signal, account
or verdict is computed before the capture's end. Pickle is safe: both ends are this package, over
a private pipe.
"""
from __future__ import annotations

import gc
import json
import os
import pickle
import select
import signal
import sys
from collections.abc import Callable, Hashable, Iterator
from functools import partial
from pathlib import Path
from typing import IO, Any

from diagnose.bundle import Bundle, BundleError
from diagnose.bundle.ahead import Parsed, member_stamp
from diagnose.bundle.streams import PYSPY, TORCH

POLL_S = 0.5
NICE = 19
MAX_TRIES = 3
GC_THRESHOLD = 100_000
LENGTH_BYTES = 8


def lower_priority() -> None:
    """nice 19, as the collector threads: the target and the capture get the cores first."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, NICE)
    except OSError:  # not permitted: run at the priority given
        pass


def parse_member(bundle: Bundle, member: str, key: Hashable, compute: Callable[[], Any]) -> Parsed | None:
    """``compute()`` (which reads ``member``) with the member's stamp, or None when the member is
    absent or changed while it was read."""
    before = member_stamp(bundle, member)
    if before is None:
        return None
    value = compute()
    return Parsed(key, member, before, value) if member_stamp(bundle, member) == before else None


class Poller:
    """What is left to parse, poll after poll. ``tries``: attempts per key (done after a result)."""

    def __init__(self, path: Path, overrides: dict[str, float]):
        from diagnose.signals.params import DEFAULT_PARAMS, is_param_key, with_overrides

        self.path = path
        try:
            self.options = with_overrides({k: v for k, v in overrides.items() if is_param_key(k)}).timeline
        except ValueError:  # a bad override fails the analysis before it reads anything
            self.options = DEFAULT_PARAMS.timeline
        self.tries: dict[Hashable, int] = {}
        self._seen: tuple[Any, ...] | None = None

    def _indexes(self) -> tuple[Any, ...]:
        """The index files' (size, mtime): nothing new to parse while they stay the same."""
        out: list[tuple[int, int] | None] = []
        for name in (PYSPY.name, TORCH.name):
            try:
                st = os.stat(self.path / name, follow_symlinks=False)
                out.append((st.st_size, st.st_mtime_ns))
            except OSError:
                out.append(None)
        return tuple(out)

    def poll(self) -> Iterator[Parsed]:
        seen = self._indexes()
        if seen == self._seen and not self._retry():
            return
        self._seen = seen
        try:
            bundle = Bundle.open(self.path)  # streams are read once per Bundle: a new one sees new records
        except BundleError:  # not written yet
            return
        for member, key, compute in self._pending(bundle):
            if self.tries.get(key, 0) >= MAX_TRIES:
                continue
            self.tries[key] = self.tries.get(key, 0) + 1
            try:
                parsed = parse_member(bundle, member, key, compute)
            except Exception:  # noqa: BLE001 - the analysis computes it at the end and says why
                parsed = None
            if parsed is not None:
                self.tries[key] = MAX_TRIES
                yield parsed

    def _retry(self) -> bool:
        return any(0 < n < MAX_TRIES for n in self.tries.values())

    def _pending(self, bundle: Bundle) -> Iterator[tuple[str, Hashable, Callable[[], Any]]]:
        from diagnose.signals.cpu import window_key, window_segments
        from diagnose.signals.trace_tasks import outcome_key, trace_outcome, trace_tasks

        for w in bundle.typed(PYSPY):
            if w.file is not None:
                yield w.file, window_key(w.file), partial(window_segments, bundle, w.file)
        if not bundle.typed(TORCH):  # traces only once indexed (not the directory's listing: files in the making)
            return
        for task in trace_tasks(bundle, self.options)[0]:
            yield task.member, outcome_key(task), partial(trace_outcome, task, bundle)


def send(out: IO[bytes], parsed: Parsed) -> None:
    data = pickle.dumps(parsed, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(len(data).to_bytes(LENGTH_BYTES, "big") + data)
    out.flush()


def main() -> None:
    lower_priority()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the capture's to handle; it stops us
    stdin, out = sys.stdin.buffer, sys.stdout.buffer
    line = stdin.readline()
    if not line:
        return
    ask = json.loads(line)
    poller = Poller(Path(ask["path"]), dict(ask.get("overrides") or {}))
    import diagnose.signals.cpu  # noqa: F401 - what the polls use, imported before the collector is tuned
    import diagnose.signals.trace_tasks  # noqa: F401

    # A window's or a trace's JSON is millions of short-lived objects freed by reference counting: the
    # cyclic collector's default first threshold (700) made it ~25% of this process' CPU.
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD)
    try:
        while True:
            for parsed in poller.poll():
                send(out, parsed)
            if select.select([stdin], [], [], POLL_S)[0] and not stdin.read(1):
                return  # EOF: the capture ended
    except BrokenPipeError:  # the capture is gone
        return


if __name__ == "__main__":
    main()
