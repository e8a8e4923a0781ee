"""A target that, on SIGUSR1, holds the interpreter in one C call for a few seconds (a regular
expression backtracking: the re engine never releases the GIL, as Kineto's stop does not while
it post-processes a window). Its agent cannot answer meanwhile. Prints READY, then HOLD/HELD."""
import re
import signal
import sys
import time


def hold(signum, frame):
    print("HOLD", flush=True)
    t0 = time.monotonic()
    re.match(r"(a+)+$", "a" * int(sys.argv[1]) + "b")
    print(f"HELD {time.monotonic() - t0:.2f}", flush=True)


signal.signal(signal.SIGUSR1, hold)
print("READY", flush=True)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    time.sleep(0.01)
