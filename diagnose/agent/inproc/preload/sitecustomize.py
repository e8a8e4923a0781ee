"""diagnose preload: `diagnose run` puts this directory first on PYTHONPATH.

With DIAGNOSE_AGENT=1 it starts the diagnose agent (idle until `diagnose attach` asks for a capture),
then runs whatever sitecustomize it shadows. See diagnose/agent/bootstrap.py.
"""


def _diagnose_preload():
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    boot = os.path.join(os.path.dirname(here), "bootstrap.py")
    namespace = {"__name__": "diagnose_agent_bootstrap", "__file__": boot}
    with open(boot, encoding="utf-8") as fh:
        exec(compile(fh.read(), boot, "exec"), namespace)
    namespace["autostart"]()
    namespace["chain_sitecustomize"](here)


_diagnose_preload()
del _diagnose_preload
