"""The design card's layout rules hold: packages document what they own, pysyncobj and pickle
stay inside raftlog/node/bridge.py, and no module imports one that imports it back."""

import ast
import re
import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ["raftlog", "metadata", "partition", "groupcoord", "spark_source", "jepsen_style_tests"]


@pytest.mark.parametrize("name", PACKAGES)
def test_package_says_what_it_owns(name):
    module = importlib.import_module(name)
    assert module.__doc__ and len(module.__doc__.strip()) > 20


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _library_files():
    for name in PACKAGES:
        yield from sorted((ROOT / name).rglob("*.py"))


def test_only_the_bridge_imports_pysyncobj_or_pickle():
    offenders = [
        (str(path.relative_to(ROOT)), bad)
        for path in _library_files()
        if path.relative_to(ROOT).as_posix() != "raftlog/node/bridge.py"
        for bad in _imports(path) & {"pysyncobj", "pickle"}
    ]
    assert offenders == []


def _module_graph() -> dict[str, set[str]]:
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph(*PACKAGES)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_one_that_imports_it_back():
    # Package __init__ modules re-export their children, which import the package: those
    # edges are how Python packages work, not loops between modules.
    edges = {m: {t for t in targets if not m.startswith(t + ".")} for m, targets in _module_graph().items()}
    assert _cycles(edges) == []


def test_the_cycle_finder_sees_a_loop_through_a_third_module():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]



ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _packages_in_tree() -> set[str]:
    found = set()
    for name in PACKAGES:
        if name != "raftlog":  # raftlog/ itself is its subpackages (and the public API)
            found.add(f"{name}/")
        else:
            found.update(f"raftlog/{p.parent.name}/" for p in (ROOT / "raftlog").glob("*/__init__.py"))
    return found


def test_architecture_doc_names_every_package_and_nothing_that_is_gone():
    text = ARCHITECTURE.read_text()
    rows = set(re.findall(r"^\| \d \| `([\w/]+/)` \|", text, re.M))
    assert rows == _packages_in_tree()
    for path in set(re.findall(r"`((?:raftlog|metadata|partition|groupcoord)/[\w/]+\.py)`", text)):
        assert (ROOT / path).is_file(), path
