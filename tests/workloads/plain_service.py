"""A stdlib-only service loop for targets without torch or OpenTelemetry (any Python)."""
import json
import sys
import time

try:
    import torch  # noqa: F401
    print("TORCH-IMPORTED", flush=True)
except ImportError as exc:
    print(f"TORCH-IMPORT-FAILED {exc}", flush=True)

print("READY", flush=True)
deadline = time.monotonic() + float(sys.argv[1] if len(sys.argv) > 1 else 60)
while time.monotonic() < deadline:
    json.dumps({"x": list(range(1000))})
    for _ in range(100):  # reference cycles, so the cyclic GC runs
        node = []
        node.append(node)
    time.sleep(0.005)
