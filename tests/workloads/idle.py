"""An idle service: one thread waiting for work that never comes."""
import threading

print("READY", flush=True)
threading.Event().wait()
