"""diagnose: bottleneck diagnosis for AI inference and training services."""
from __future__ import annotations

import sys
from importlib.machinery import ModuleSpec
from importlib.util import spec_from_file_location
from pathlib import Path

__version__ = "0.1.0"

# collectors/ and rules/ sit beside this package in a source checkout and are installed as
# diagnose.collectors and diagnose.rules (pyproject's package-dir; docs/internals.md "Layout"). An
# editable install maps those two names to the folders of the checkout that was installed, so another
# checkout of the repository (a git worktree) would run its own diagnose with the installed one's
# collectors and rules. In a checkout this finder, ahead of that mapping, takes them from beside the
# diagnose package actually imported; a wheel has them inside diagnose/, and then it is not installed.
_SIBLINGS = ("collectors", "rules")


class _SiblingFinder:
    """Meta-path finder of ``diagnose.collectors`` and ``diagnose.rules`` in the folders beside
    this package (their submodules follow from the package's ``__path__``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        parent, _, name = fullname.rpartition(".")
        if parent != __name__ or name not in _SIBLINGS:
            return None
        folder = self.root / name
        return spec_from_file_location(fullname, folder / "__init__.py", submodule_search_locations=[str(folder)])


def _install_sibling_finder() -> None:
    here = Path(__file__).parent
    root = here.parent
    in_checkout = (root / "pyproject.toml").is_file() and all(
        (root / name / "__init__.py").is_file() and not (here / name).exists() for name in _SIBLINGS)
    if in_checkout and not any(isinstance(f, _SiblingFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SiblingFinder(root))


_install_sibling_finder()
