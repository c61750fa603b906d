"""Issue 19's structural acceptance lines, checked on the source of python/dpsynth with ``ast``:
no import cycle between its modules (imports at module level and inside functions, relative imports
resolved), no package importing one above it (:data:`LAYERS`), no module over 600 lines, and no
module importing another module's private names."""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "dpsynth"
MAX_LINES = 600


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import / ImportFrom node, at any depth (functions, methods, try blocks), except those
    under ``if TYPE_CHECKING:``, which never run and so cannot take part in an import cycle."""
    for node in ast.iter_child_nodes(tree):
        for child in (node.orelse if isinstance(node, ast.If) and _is_type_checking(node) else [node]):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            yield from _imports(child)


def _source(module: str, node: ast.ImportFrom) -> str | None:
    """The absolute name of the module ``from <source> import ...`` reads, relative levels resolved."""
    if not node.level:
        return node.module
    package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph():
    """({module: {imported dpsynth module: line}}, [(module, source, private name, line)]).

    ``import a.b.c`` is an edge to the longest prefix that is a dpsynth module; ``from a import x``
    is an edge to ``a.x`` when that is a module (a submodule import), else to ``a``."""
    edges, private = {m: {} for m in MODULES}, []
    for module, path in MODULES.items():
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                for alias in node.names:
                    name = alias.name
                    while name and name not in MODULES:
                        name = name.rpartition(".")[0]
                    targets += [name] if name else []
            else:
                source = _source(module, node)
                if source is None or source.split(".")[0] != "dpsynth":
                    continue
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    if sub in MODULES:
                        targets.append(sub)
                        continue
                    targets.append(source)
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        private.append((module, source, alias.name, node.lineno))
            for target in targets:
                if target != module:
                    edges[module].setdefault(target, node.lineno)
    return edges, private


def cycles(edges) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(edges[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def in_package(module: str, package: str) -> bool:
    """``module`` is dpsynth.<package> or one of its submodules."""
    name = f"dpsynth.{package}"
    return module == name or module.startswith(name + ".")


def package_imports(edges, package: str, other: str) -> list[str]:
    """The imports from the modules of dpsynth.<package> into those of dpsynth.<other>, as
    ``"a -> b (line n)"``."""
    return [f"{a} -> {b} (line {line})" for a, targets in edges.items() if in_package(a, package)
            for b, line in targets.items() if in_package(b, other)]


# (package, a package above it that it must not import): the layers of ARCHITECTURE.md. Schema.validate
# reaches data kept in DuckDB or Spark through the opener marginals registers (dpsynth.schema.sources)
LAYERS = [("schema", "marginals")]


def test_the_graph_sees_function_level_and_relative_imports():
    edges, _ = import_graph()
    assert len(MODULES) > 50 and "dpsynth.marginals.backends" in MODULES
    # domains learned under DP import the privacy package inside the function that needs it
    assert "dpsynth.privacy.domains" in edges["dpsynth.schema.learn"]
    assert "dpsynth.marginals.backends" in edges["dpsynth.marginals"]  # the lazy open_table
    assert "dpsynth.marginals.rows" in edges["dpsynth.marginals.backends"]
    assert "dpsynth.marginals.backends -> dpsynth.schema.column" in " ".join(package_imports(edges, "marginals",
                                                                                              "schema"))
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]


def test_no_import_cycle_inside_dpsynth():
    edges, _ = import_graph()
    found = cycles(edges)
    detail = [f"{a} -> {b} (line {line})" for c in found for a in c for b, line in edges[a].items() if b in c]
    assert not found, "import cycles:\n" + "\n".join(detail)


@pytest.mark.parametrize("package, above", LAYERS)
def test_a_package_imports_nothing_from_a_package_above_it(package, above):
    edges, _ = import_graph()
    found = package_imports(edges, package, above)
    assert not found, f"{package} imports {above}:\n" + "\n".join(found)


def test_no_module_imports_another_modules_private_names():
    _, private = import_graph()
    assert not private, "\n".join(f"{m} line {line}: from {src} import {name}" for m, src, name, line in private)


def test_no_engine_module_over_600_lines():
    sizes = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in MODULES.items()}
    over = {m: n for m, n in sizes.items() if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (split them by concern): {over}"
