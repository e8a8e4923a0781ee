"""Idle workload with one child process (a serving worker stand-in), for GPU process matching.

The child asks the kernel for SIGKILL when its parent dies (prctl PR_SET_PDEATHSIG), so killing
the workload leaves nothing behind.
"""
import subprocess
import sys
import time

CHILD = "import ctypes, signal, time; ctypes.CDLL(None).prctl(1, signal.SIGKILL); time.sleep(300)"

child = subprocess.Popen([sys.executable, "-c", CHILD])
print("READY", child.pid, flush=True)
time.sleep(300)
