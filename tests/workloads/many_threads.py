"""One thread busy in json while N others wait on an event (default 200): py-spy reads every
thread in each sampling round, so it samples each far below the rate asked. Bounded: 120 s."""
import json
import sys
import threading
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
LIFETIME_S = 120.0

if __name__ == "__main__":
    parked = threading.Event()
    for i in range(N):
        threading.Thread(target=parked.wait, args=(LIFETIME_S,), name=f"parked-{i}", daemon=True).start()
    print("READY", flush=True)
    deadline = time.monotonic() + LIFETIME_S
    while time.monotonic() < deadline:
        json.dumps({"x": list(range(5000))})
