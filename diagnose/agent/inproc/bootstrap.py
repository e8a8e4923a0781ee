"""Make ``diagnose.agent`` importable in any Python process and start it.

Run by the ``diagnose run`` preload (``preload/sitecustomize.py`` on PYTHONPATH) and by the
``--inject`` script (``sys.remote_exec``). Standard library only, and careful: it runs inside the
target's interpreter, whose environment may lack diagnose, psutil, torch or OpenTelemetry. When the
target cannot import ``diagnose`` itself, only the ``diagnose`` package of this installation is
made importable (by path), so nothing else from diagnose's environment leaks into the target.
"""
import importlib.machinery
import importlib.util
import os
import sys

# this file is diagnose/agent/inproc/bootstrap.py: three levels up is the diagnose package
DIAGNOSE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV_AGENT = "DIAGNOSE_AGENT"
TRUE_VALUES = ("1", "true", "yes", "on")


def ensure_importable():
    """Import ``diagnose`` from the target's path, or else from this installation by path."""
    if "diagnose" in sys.modules or importlib.util.find_spec("diagnose") is not None:
        return
    spec = importlib.util.spec_from_file_location(
        "diagnose", os.path.join(DIAGNOSE_DIR, "__init__.py"), submodule_search_locations=[DIAGNOSE_DIR])
    module = importlib.util.module_from_spec(spec)
    sys.modules["diagnose"] = module
    spec.loader.exec_module(module)


def start_agent(from_env):
    """Start the agent; never raises into the target (one line on stderr instead)."""
    if sys.version_info < (3, 10):  # noqa: UP036 - runs in the target's Python, whatever its version
        sys.stderr.write("diagnose: agent not started: it needs Python >= 3.10\n")
        return
    try:
        ensure_importable()
        import diagnose.agent as agent

        agent.start_from_env() if from_env else agent.start()
    except Exception as exc:  # the target's start-up must survive any agent failure
        sys.stderr.write(f"diagnose: agent not started: {type(exc).__name__}: {exc}\n")


def autostart():
    if os.environ.get(ENV_AGENT, "").strip().lower() in TRUE_VALUES:
        start_agent(from_env=True)


def chain_sitecustomize(preload_dir):
    """Run the sitecustomize that ours shadows (e.g. a distribution's), if there is one."""
    preload_dir = os.path.abspath(preload_dir)
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != preload_dir]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
