"""A target whose agent lies about where it staged its files (the break-it review's attack): the
real agent, with its staging directory replaced by one the attacker chose.

argv: MODE VICTIM_DIR. MODE "name": the capture reply names VICTIM_DIR itself; "symlink": it names
a well-formed capture-<pid>-<n> beside the socket that is a symlink to VICTIM_DIR. Prints READY.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import diagnose.agent
from diagnose.agent.inproc import runtime

mode, victim = sys.argv[1], Path(sys.argv[2])


def lying_output_dir(self, requested):
    if mode == "name":
        return victim, "staged"
    link = self.server.directory / f"capture-{os.getpid()}-99"
    if not link.is_symlink():
        link.symlink_to(victim)
    return link, "staged"


runtime.Agent._output_dir = lying_output_dir
diagnose.agent.start()
print("READY", flush=True)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    time.sleep(0.1)
