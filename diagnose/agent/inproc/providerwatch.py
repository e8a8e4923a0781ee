"""Re-attach the span processor right after the application sets its TracerProvider (NVTX
mirroring on: its ranges must cover the first spans): wraps ``set_tracer_provider`` once, or, when
opentelemetry.trace is not imported yet, right after its first import (a meta-path finder)."""
from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from diagnose.agent.inproc import spans


class _ProviderWatch:
    """Re-attach right after the application sets its provider (wraps set_tracer_provider once)."""

    def __init__(self) -> None:
        self.installed = False

    def install(self) -> None:
        if self.installed:
            return
        self.installed = True
        module = sys.modules.get("opentelemetry.trace")
        if module is not None:
            self._wrap(module)
        else:
            sys.meta_path.insert(0, _PostImportFinder("opentelemetry.trace", self._wrap))

    @staticmethod
    def _wrap(module: Any) -> None:
        original = module.set_tracer_provider

        @functools.wraps(original)
        def set_tracer_provider(*args: Any, **kwargs: Any) -> None:
            original(*args, **kwargs)
            try:
                spans.attach()
            except Exception:  # the application's call must never fail because of the agent
                pass

        module.set_tracer_provider = set_tracer_provider


class _PostImportFinder:
    """Meta-path finder that runs ``callback(module)`` right after ``name`` is first executed."""

    def __init__(self, name: str, callback: Callable[[Any], None]):
        self.name, self.callback = name, callback

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if fullname != self.name:
            return None
        import importlib.machinery

        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader, callback = spec.loader, self.callback
        original_exec = loader.exec_module

        def exec_module(module: Any) -> None:
            original_exec(module)
            loader.exec_module = original_exec  # type: ignore[method-assign]  # restores the patch below
            try:
                callback(module)
            except Exception:  # never break the application's import
                pass

        # Patched on the instance, not wrapped: the module keeps its own loader (resources, is_package).
        # This loader instance belongs to this spec only.
        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


PROVIDER_WATCH = _ProviderWatch()
