"""The folders show the pipeline: at the package root only the CLI entry, the orchestrator and
the shared data model; every stage a package of its own (docs/internals.md "Layout")."""
from __future__ import annotations

from helpers import REPO

ROOT_MODULES = {"__init__.py", "__main__.py", "pipeline.py", "model.py"}
ENTRY = {"cli"}  # the command line: one module per command family (diagnose/cli/__init__.py), no stage
STAGES = {"capture", "bundle", "signals", "account", "capacity", "compare", "traces", "ranks", "verdict", "render",
          "export", "tui", "agent", "doctor", "demo", "catalogs", "results"}


def test_package_root_holds_only_the_entry_the_pipeline_and_the_model():
    pkg = REPO / "diagnose"
    assert {p.name for p in pkg.glob("*.py")} == ROOT_MODULES
    assert {p.name for p in pkg.iterdir() if p.is_dir() and (p / "__init__.py").is_file()} == STAGES | ENTRY


def test_tests_mirror_the_stages():
    folders = {p.name for p in (REPO / "tests").iterdir() if p.is_dir() and list(p.glob("test_*.py"))}
    # fuzz/: the fuzz tests cross the stages (agent protocol, OTLP receiver, importers)
    assert folders <= STAGES | {"collectors", "cli", "fuzz"} and {"bundle", "signals", "render", "tui"} <= folders
    # at the root only this file, test_docs.py (README.md and docs/ hold together) and test_imports.py (how
    # the packages depend on each other): no pipeline stage
    assert sorted(p.name for p in (REPO / "tests").glob("test_*.py")) == ["test_docs.py", "test_imports.py",
                                                                           "test_layout.py"]


def test_every_package_is_in_the_list_a_wheel_is_built_from():
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for base, root in {"diagnose": REPO / "diagnose", "diagnose.collectors": REPO / "collectors",
                       "diagnose.rules": REPO / "rules"}.items():
        for folder in (root, *root.rglob("*")):
            if folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("*.py")):
                found.add(".".join([base, *folder.relative_to(root).parts]))
    assert found == listed, f"missing from pyproject's packages: {found - listed}; listed, not there: {listed - found}"
