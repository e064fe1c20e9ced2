"""No library file is over ~800 lines without saying why and where to cut it (issue 13): a module docstring paragraph starting "Size"."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("raftlog", "metadata", "partition", "groupcoord", "spark_source", "jepsen_style_tests")
MAX_LINES = 800


def _library_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_no_file_over_800_lines_without_a_stated_reason():
    long = []
    for path in _library_files():
        text = path.read_text()
        doc = "\n" + (ast.get_docstring(ast.parse(text)) or "")
        if text.count("\n") > MAX_LINES and "\nSize" not in doc:
            long.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert long == []


def test_the_rule_sees_the_files():
    files = _library_files()
    assert ROOT / "partition" / "raft.py" in files and len(files) > 100
