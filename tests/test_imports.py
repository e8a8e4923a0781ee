"""How the packages depend on each other (issue 22): no cycle between diagnose's packages, analysis and
``diagnose --help`` import no collector, no module is over 450 lines, and diagnose.collectors and
diagnose.rules are the folders beside the diagnose package actually imported."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

from helpers import REPO

# Where each module of the installed names lives (pyproject's package-dir mapping).
SOURCES = {"diagnose": REPO / "diagnose", "diagnose.collectors": REPO / "collectors",
           "diagnose.rules": REPO / "rules"}
# What counts as one node of the graph: diagnose.<first component> (a stage package, or a root module:
# cli, pipeline, model). cli and pipeline orchestrate, so they may import any stage; they are nodes like
# the others, so a stage that imported either back at run time would close a cycle.
# One node is finer: diagnose.bundle.importers builds a bundle from files you already have, a sibling of
# the capture (it reads torch traces, decodes spans, fans out over ranks), while the rest of
# diagnose.bundle is the on-disk contract beneath every stage. Nothing but the CLI imports it.
OWN_NODES = ("diagnose.bundle.importers",)
MAX_LINES = 450
LONG_MODULES: set[str] = set()  # modules allowed over MAX_LINES for now (none)


def module_files() -> Iterator[tuple[str, Path]]:
    """(dotted name, file) of every module under diagnose/, collectors/ and rules/."""
    for base, root in SOURCES.items():
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if base == "diagnose" and parts[0] in ("collectors", "rules"):
                continue  # only in an installed tree: in a checkout they are the folders read above
            yield ".".join([base, *(p for p in parts if p != "__init__")]), path


def node(module: str) -> str:
    for own in OWN_NODES:
        if module == own or module.startswith(own + "."):
            return own
    return ".".join(module.split(".")[:2])


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported(tree: ast.AST, module: str, package: bool) -> Iterator[tuple[str, int]]:
    """(imported diagnose module, line) of every import statement, at module level and inside
    functions alike; what ``if TYPE_CHECKING:`` imports is left out (it never runs)."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _type_checking(child.test):
            children: list[ast.AST] = list(child.orelse)
        else:
            children = [child]
        for stmt in children:
            yield from _names(stmt, module, package)
            yield from imported(stmt, module, package)


def _names(stmt: ast.AST, module: str, package: bool) -> Iterator[tuple[str, int]]:
    if isinstance(stmt, ast.Import):
        yield from ((a.name, stmt.lineno) for a in stmt.names if a.name.split(".")[0] == "diagnose")
    elif isinstance(stmt, ast.ImportFrom):
        if stmt.level:  # relative: resolved against this module's package
            parts = module.split(".")
            anchor = parts[: len(parts) - (0 if package else 1) - (stmt.level - 1)]
            name = ".".join([*anchor, *([stmt.module] if stmt.module else [])])
        else:
            name = stmt.module or ""
        if name == "diagnose":  # from diagnose import x: x is a module of its own
            yield from ((f"diagnose.{a.name}", stmt.lineno) for a in stmt.names)
        elif name.split(".")[0] == "diagnose":
            yield name, stmt.lineno


def package_graph() -> dict[str, dict[str, list[str]]]:
    """node -> imported node -> the imports that make the edge ("path:line module")."""
    graph: dict[str, dict[str, list[str]]] = {}
    for module, path in module_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for name, line in imported(tree, module, path.name == "__init__.py"):
            a, b = node(module), node(name)
            if a != b:
                graph.setdefault(a, {}).setdefault(b, []).append(f"{path.relative_to(REPO)}:{line} {name}")
    return graph


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_the_imports_it_should():
    graph = package_graph()
    assert any(e.startswith("collectors/base.py:") for e in graph["diagnose.collectors"]["diagnose.bundle"])
    assert "diagnose.collectors" in graph["diagnose.capture"]  # capture runs the collectors
    assert "diagnose.collectors" in graph["diagnose.doctor"]  # a function-level import counts
    assert "diagnose.pipeline" not in graph.get("diagnose.capture", {})  # progress.py: TYPE_CHECKING only
    assert "diagnose.traces" in graph["diagnose.bundle.importers"]


def test_no_package_imports_itself_through_another():
    graph = package_graph()
    report = []
    for component in cycles(graph):
        report.append(" <-> ".join(component))
        report += [f"  {a} -> {b}: {', '.join(graph[a][b][:3])}" for a in component for b in component
                   if b in graph.get(a, {})]
    assert not report, "package cycles:\n" + "\n".join(report)


# What neither `diagnose --help` nor the analysis of a bundle may import: the collectors (and what
# only they need: psutil, http.server), the TUI, torch, the capture and the host side of the agent.
# Not yet covered: `diagnose analyze FILES` given OTLP span files decodes them with
# diagnose.collectors.otlp_decode (bundle/importers/span_files.py), which loads the collector registry.
LIVE_ONLY = ("diagnose.collectors", "diagnose.capture", "diagnose.tui", "diagnose.agent.host", "psutil",
             "http.server", "textual", "torch")

PROBE = textwrap.dedent('''
    import json, sys
    from pathlib import Path

    what, bundles = sys.argv[1], sys.argv[2:]
    if what in ("help", "analyze"):
        from diagnose.cli import invoke

        code = invoke(["--help"] if what == "help" else ["analyze", *bundles])
        assert code == 0, code
    else:
        import diagnose.verdict.analyze  # noqa: F401
        from diagnose.pipeline import analyse

        for bundle in bundles:
            analyse(Path(bundle), {}, None)
    print(json.dumps(sorted(sys.modules)))
''')


def loaded(what: str, *bundles: Path) -> list[str]:
    res = subprocess.run([sys.executable, "-c", PROBE, what, *map(str, bundles)], capture_output=True, text=True,
                         timeout=120, cwd=REPO)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.splitlines()[-1])


def _named(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


def test_help_imports_no_collector_nor_numpy():
    modules = loaded("help")
    assert "diagnose.cli.capture" in modules  # every command is registered
    assert _named(modules, LIVE_ONLY + ("numpy", "diagnose.pipeline")) == []


ANALYSED = (REPO / "fixtures" / "cpu" / "service-json", REPO / "fixtures" / "gpu" / "compute-bf16-matmul")


def test_analysis_imports_no_collector():
    modules = loaded("analysis", *ANALYSED)
    assert "diagnose.traces.reader" in modules  # the torch trace was analysed, not skipped
    assert _named(modules, LIVE_ONLY) == []


def test_the_analyze_command_imports_no_collector(tmp_path):
    import shutil

    shutil.copytree(ANALYSED[0], tmp_path / "bundle")  # analyze rewrites findings.json and report.md
    modules = loaded("analyze", tmp_path / "bundle")
    assert "diagnose.cli.analysis" in modules and "diagnose.bundle.importers" in modules
    assert _named(modules, LIVE_ONLY) == []


def test_no_module_is_over_the_line_limit():
    long = {str(path.relative_to(REPO)): n for _, path in module_files()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert set(long) - LONG_MODULES == set(), f"over {MAX_LINES} lines (split along a seam): {long}"
    assert LONG_MODULES <= set(long), "a listed module is short now: take it off LONG_MODULES"


def test_collectors_and_rules_come_from_beside_the_diagnose_package_imported():
    import diagnose
    import diagnose.collectors
    import diagnose.rules

    root = Path(diagnose.__file__).resolve().parent.parent
    assert Path(diagnose.collectors.__file__).resolve().parent == root / "collectors"
    assert Path(diagnose.rules.__file__).resolve().parent == root / "rules"


def test_another_checkout_imports_its_own_collectors_and_rules(tmp_path):
    """An editable install maps diagnose.collectors and diagnose.rules to the folders of the checkout
    that was installed; another checkout (a git worktree) running its own code must still get its own."""
    import shutil

    other = tmp_path / "other"
    for name in ("diagnose", "collectors", "rules"):
        shutil.copytree(REPO / name, other / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", other)
    probe = ("import json, diagnose, diagnose.collectors, diagnose.rules, diagnose.collectors.otlp; "
             "print(json.dumps([m.__file__ for m in (diagnose, diagnose.collectors, diagnose.rules, "
             "diagnose.collectors.otlp)]))")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=other)
    assert res.returncode == 0, res.stderr
    files = [Path(f).resolve() for f in json.loads(res.stdout)]
    assert files == [other.resolve() / "diagnose" / "__init__.py", other.resolve() / "collectors" / "__init__.py",
                     other.resolve() / "rules" / "__init__.py", other.resolve() / "collectors" / "otlp.py"]
