"""diagnose's OTLP receiver alone in its own process, so a test can measure its memory.

argv: BUNDLE_DIR [MAX_SPANS_PER_REQUEST]. Prints "READY <port>", serves until stdin closes or
sends a line, then prints the collector's final counts as one JSON line.
"""
import json
import os
import sys
from pathlib import Path

from diagnose.bundle import BundleWriter
from diagnose.capture.target import resolve_target
from diagnose.collectors import CaptureOptions
from diagnose.collectors.otlp import MAX_SPANS_PER_REQUEST, OtlpCollector


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(mode=0o700)
    max_spans = int(sys.argv[2]) if len(sys.argv) > 2 else MAX_SPANS_PER_REQUEST
    collector = OtlpCollector(max_spans_per_request=max_spans)
    options = CaptureOptions(otlp_listen="127.0.0.1:0")
    collector.start(resolve_target(os.getppid()), options, BundleWriter(out))  # the target is not used
    print("READY", collector.counts()["listen"].rpartition(":")[2], flush=True)
    sys.stdin.readline()
    status = collector.stop(5)
    print(json.dumps(status.counts), flush=True)


if __name__ == "__main__":
    main()
