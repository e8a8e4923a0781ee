"""A parent that sleeps while a child process does JSON work (for --subprocesses)."""
import json
import multiprocessing
import time


def child_work():
    while True:
        json.dumps({"x": list(range(5000))})


if __name__ == "__main__":
    worker = multiprocessing.Process(target=child_work, daemon=True)
    worker.start()
    print("READY", flush=True)
    while True:
        time.sleep(1)
