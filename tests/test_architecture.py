"""The tree shows the pipeline: imports point one way, renderers stay free of torch."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mhaudit"
STAGES = ("load", "fake", "trace", "detect", "cost", "flops", "memory", "phases", "measure",
          "rules", "gate", "render", "cli")
COST_STAGES = ("mhaudit.cost", "mhaudit.flops", "mhaudit.memory", "mhaudit.phases",
               "mhaudit.measure")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, top_level: bool,
             type_only: bool = False) -> Iterator[str]:
    """Absolute names a module imports; ``top_level`` skips imports inside functions,
    ``type_only`` counts ``TYPE_CHECKING`` imports too (a type in the wrong home is a
    circle in the design, whether or not it runs)."""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if not type_only and isinstance(child, ast.If) and _is_type_checking(child):
                continue
            if top_level and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(child, ast.Import):
                yield from (alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                yield base
                yield from (f"{base}.{alias.name}" for alias in child.names)
            stack.append(child)


def _graph(top_level: bool, type_only: bool = False) -> dict[str, set[str]]:
    """Module -> the mhaudit modules it imports, package ``__init__``s on the way included."""
    edges: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        targets: set[str] = set()
        for name in _imports(ast.parse(path.read_text()), module, top_level, type_only):
            if name not in MODULES:
                continue
            parts = name.split(".")
            for depth in range(2, len(parts) + 1):  # packages a first import runs
                ancestor = ".".join(parts[:depth])
                if not (module == ancestor or module.startswith(ancestor + ".")):
                    targets.add(ancestor)
        edges[module] = targets - {module}
    return edges


def _external(module: str, top_level: bool = False) -> set[str]:
    tree = ast.parse(MODULES[module].read_text())
    return {name.split(".")[0] for name in _imports(tree, module, top_level)}


@pytest.mark.parametrize(("top_level", "type_only"), [(True, False), (False, False), (False, True)],
                         ids=["top-level", "deferred-too", "type-only-too"])
def test_no_import_cycles(top_level: bool, type_only: bool) -> None:
    edges = _graph(top_level=top_level, type_only=type_only)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    assert cycles == []


def _top(module: str) -> str:
    """The package's own part a module belongs to: ``mhaudit.trace`` for
    ``mhaudit.trace.fold``, the module itself for one at the package root."""
    return ".".join(module.split(".")[:2])


def test_no_import_cycles_between_packages() -> None:
    """Every import, deferred and type-only ones too, points one way between the parts
    of the package: fake execution sits below the tracer, and what counts memory above it."""
    edges: dict[str, set[str]] = {}
    for module, targets in _graph(top_level=False, type_only=True).items():
        edges.setdefault(_top(module), set()).update(
            _top(t) for t in targets if _top(t) != _top(module))
    done: set[str] = set()

    def cycle_from(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node):], node]
        if node in done:
            return None
        for nxt in sorted(edges.get(node, ())):
            found = cycle_from(nxt, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    assert [c for c in (cycle_from(n, []) for n in sorted(edges)) if c] == []


def test_fake_execution_imports_only_the_data_model() -> None:
    for module, targets in _graph(top_level=False, type_only=True).items():
        if module.startswith("mhaudit.fake"):
            assert all(t.startswith(("mhaudit.fake", "mhaudit.data")) for t in targets), (
                module, targets)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("mhaudit.render")))
def test_renderers_never_import_torch(module: str) -> None:
    assert "torch" not in _external(module)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("mhaudit.data")))
def test_data_model_imports_only_itself(module: str) -> None:
    top = {n for n in _graph(top_level=True)[module]}
    assert all(n.startswith("mhaudit.data") for n in top), top
    assert "torch" not in _external(module)


def test_data_model_defers_no_import_outside_itself() -> None:
    for module, targets in _graph(top_level=False).items():
        if module.startswith("mhaudit.data"):
            assert all(t.startswith("mhaudit.data") for t in targets), (module, targets)


def _every_import(module: str) -> set[str]:
    """Every absolute name a module imports: top-level, deferred and type-only alike."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
    return names


COMPUTING = ("mhaudit.api", "mhaudit.assemble", "mhaudit.whatif", "mhaudit.cost",
             "mhaudit.flops", "mhaudit.memory", "mhaudit.phases", "mhaudit.measure",
             "mhaudit.parallel", "mhaudit.trace", "mhaudit.detect", "mhaudit.load",
             "mhaudit.contain", "mhaudit.options", "mhaudit.cli")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("mhaudit.render")))
def test_renderers_read_data_not_the_stages_that_compute_it(module: str) -> None:
    imported = _every_import(module)
    assert not {n for n in imported if n.startswith(COMPUTING)}, imported


def test_detection_does_not_import_costs() -> None:
    for module, targets in _graph(top_level=False).items():
        if module.startswith("mhaudit.detect"):
            assert not any(t == s or t.startswith(s + ".") for t in targets for s in COST_STAGES), (
                module, targets)


def test_each_stage_is_a_package_with_a_docstring() -> None:
    for stage in STAGES:
        init = PACKAGE / stage / "__init__.py"
        assert init.is_file(), stage
        assert ast.get_docstring(ast.parse(init.read_text())), stage


def test_package_root_holds_at_most_ten_modules() -> None:
    assert len(list(PACKAGE.glob("*.py"))) <= 10


@pytest.mark.parametrize("package", sorted({p.parent for p in PACKAGE.rglob("__init__.py")}),
                         ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_packages_hold_at_most_sixteen_modules(package: Path) -> None:
    assert len(list(package.glob("*.py"))) <= 16


def _long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > 60]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_functions_stay_under_60_lines(path: Path) -> None:
    assert _long_functions(path) == []


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.name)
def test_modules_stay_under_400_lines(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= 400


@pytest.mark.parametrize("stage", ["mhaudit.rules", "mhaudit.gate"])
def test_rules_and_gate_never_import_renderers(stage: str) -> None:
    for module, targets in _graph(top_level=False).items():
        if module == stage or module.startswith(stage + "."):
            assert not any(t.startswith("mhaudit.render") for t in targets), (module, targets)


@pytest.mark.parametrize("package", sorted(p.parent for p in (PACKAGE / "detect").rglob(
    "__init__.py")), ids=lambda p: p.name)
def test_detect_packages_have_a_docstring_and_at_most_sixteen_modules(package: Path) -> None:
    assert ast.get_docstring(ast.parse((package / "__init__.py").read_text())), package
    assert len(list(package.glob("*.py"))) <= 16
    for folder in package.iterdir():
        if folder.is_dir() and folder.name != "__pycache__":
            assert (folder / "__init__.py").is_file(), folder  # no namespace packages


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("mhaudit.cost")))
def test_analytic_costs_never_import_torch(module: str) -> None:
    assert "torch" not in _external(module)
