"""A target that, on SIGUSR1, holds the interpreter for argv[1] seconds: a busy loop with the
switch interval raised past the hold, so no other thread gets the GIL meanwhile (as in a long C
call that never releases it: Kineto's profiler stop while it post-processes a window). Its agent
cannot answer meanwhile. Prints READY, then HOLD and HELD <seconds>."""
import signal
import sys
import time


def hold(signum, frame):
    hold_s = float(sys.argv[1])
    print("HOLD", flush=True)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(hold_s + 60)
    t0 = time.monotonic()
    while time.monotonic() - t0 < hold_s:
        pass
    sys.setswitchinterval(interval)
    print(f"HELD {time.monotonic() - t0:.2f}", flush=True)


signal.signal(signal.SIGUSR1, hold)
print("READY", flush=True)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    time.sleep(0.01)
