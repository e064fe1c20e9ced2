"""The design card's layout rules hold: packages document what they own, and pysyncobj and
pickle stay inside raftlog/bridge.py."""

import ast
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
        if path.relative_to(ROOT).as_posix() != "raftlog/bridge.py"
        for bad in _imports(path) & {"pysyncobj", "pickle"}
    ]
    assert offenders == []
