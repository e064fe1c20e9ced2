"""Issue 47: every code block of the docs site marked `<!-- docs-test: run -->` runs as written
against a real three-node cluster (node 1's addresses swapped for the test cluster's), page by
page in page order, as a reader following the page would run them: shell blocks exit 0, Python
blocks exit 0 and print what they show. A new marked block is picked up with no change here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import doc_blocks
from doc_blocks import run_python, run_shell

DOCS = Path(__file__).resolve().parents[2] / "docs"
MARKER = "docs-test: run"
PAGES = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")
               if doc_blocks.marked_blocks(path, MARKER))


def test_the_tutorials_have_runnable_blocks():
    assert {"tutorials/first-cluster.md", "tutorials/kafka-clients.md"} <= set(PAGES), PAGES


@pytest.mark.parametrize("page", PAGES)
def test_marked_blocks_run_as_written(cluster, tmp_path, page):
    blocks = doc_blocks.marked_blocks(DOCS / page, MARKER)
    if any("kcat " in code for _, code in blocks) and shutil.which("kcat") is None:
        pytest.skip("the page runs kcat (scripts/test installs it as root)")
    for number, (language, code) in enumerate(blocks, 1):
        where = f"{page}, block {number} ({language})"
        if language == "sh":
            done = run_shell(doc_blocks.with_cluster_addresses(cluster, code), doc_blocks.env(cluster), tmp_path,
                             timeout_s=300)
            assert done.returncode == 0, (where, done.stdout, done.stderr)
        elif language == "python":
            assert run_python(cluster, code, tmp_path).strip(), f"{where} printed nothing"
        else:
            raise AssertionError(f"{where}: only sh and python blocks can be marked to run")
