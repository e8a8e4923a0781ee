"""The in-target agent runs inside the user's service, whatever its environment: every module of
diagnose.agent.inproc (and diagnose.agent, and the diagnose.bundle modules it writes through)
imports and captures with the standard library alone. torch and OpenTelemetry are imported only
inside functions, when the target already has them."""
from __future__ import annotations

import subprocess
import sys
import textwrap

# Third-party packages the agent must never need: diagnose's own dependencies and the target's.
BLOCKED = ("torch", "numpy", "click", "psutil", "rich", "textual", "pynvml", "opentelemetry", "orjson",
           "msgspec", "ijson", "prometheus_client", "nvtx")

SCRIPT = textwrap.dedent('''
    import gc, importlib, pkgutil, sys, tempfile, time
    from datetime import datetime, timezone
    from pathlib import Path

    BLOCKED = frozenset(sys.argv[1].split(","))

    class BlockThirdParty:
        """Meta-path finder: the blocked top-level packages cannot be imported."""

        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"{name} is blocked by this test", name=name)
            return None

    def blocked_loaded():
        return sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)

    assert not blocked_loaded(), blocked_loaded()
    sys.meta_path.insert(0, BlockThirdParty())
    try:
        import numpy  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("the blocker lets numpy through")

    import diagnose.agent
    import diagnose.agent.inproc
    import diagnose.bundle

    names = ["diagnose.agent"]
    for pkg in (diagnose.agent.inproc, diagnose.bundle):
        names += [pkg.__name__ + "." + m.name for m in pkgutil.iter_modules(pkg.__path__)
                  if m.name not in ("importers", "records")]  # host-side: the agent never reads a bundle
    for name in names:
        importlib.import_module(name)

    # What the agent runs at capture time: a session writing GC pauses through BundleWriter.
    from diagnose.agent.inproc.capture import CaptureRequest, CaptureSession
    from diagnose.bundle import BundleWriter, Manifest
    from diagnose.bundle.streams import GC

    out = Path(tempfile.mkdtemp())
    session = CaptureSession(1, CaptureRequest(out, 0.5, torch=False, spans=False), out, None)
    session.start()
    while session.running:
        gc.collect()
        time.sleep(0.02)
    report = session.report()
    assert report["error"] is None and report["parts"]["gc"]["state"] == "ok", report
    assert (out / GC.name).is_file(), sorted(p.name for p in out.iterdir())
    BundleWriter.create(out, 1, datetime.now(timezone.utc)).write_manifest(Manifest.build(
        target={"pid": 1}, collectors=(), started_ns=1, ended_ns=2, end_reason="test", partial=False))

    assert not blocked_loaded(), blocked_loaded()
    print("imported", len(names))
''')


def test_agent_closure_imports_and_captures_with_the_standard_library_only():
    res = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(BLOCKED)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    n = int(res.stdout.split()[-1])
    assert n >= 15  # every inproc module and every bundle module, not a vacuous pass
