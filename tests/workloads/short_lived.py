"""Exits after argv[1] seconds of JSON work: the target dies in the middle of a capture."""
import json
import sys
import time

end = time.monotonic() + float(sys.argv[1])
print("READY", flush=True)
while time.monotonic() < end:
    json.dumps({"x": list(range(5000))})
