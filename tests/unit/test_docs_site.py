"""The docs site builds strictly (`mkdocs build --strict`, as `scripts/docs` does): every page in
the nav exists, every file under docs/ is in the nav, and no link or anchor is broken; a page
with a broken link fails the same build."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def build(tmp_path: Path, docs_dir: Path) -> None:
    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.yml"), strict=True, docs_dir=str(docs_dir),
                         site_dir=str(tmp_path / "site"))
    mkdocs_build(config)


@pytest.fixture(autouse=True)
def _quiet_mkdocs(monkeypatch):
    monkeypatch.setenv("NO_MKDOCS_2_WARNING", "1")
    monkeypatch.chdir(ROOT)  # mkdocs.yml's snippet path (docs/img) is relative to the checkout
    yield
    # mkdocs adds a counting handler to its logger per build; leave the logger as found.
    logger = logging.getLogger("mkdocs")
    for handler in list(logger.handlers):
        if type(handler).__name__ == "CountHandler":
            logger.removeHandler(handler)


def test_site_builds_strictly(tmp_path):
    build(tmp_path, ROOT / "docs")
    site = tmp_path / "site"
    for page in ("index.html", "tutorials/first-cluster/index.html", "reference/settings/index.html",
                 "architecture/index.html", "explanations/performance/index.html"):
        assert (site / page).is_file(), page
    performance = (site / "explanations/performance/index.html").read_text()
    assert "RF=3 acks=all" in performance and "bench-e2e.png" in performance  # the plot and its run's text


def test_a_broken_link_fails_the_build(tmp_path):
    from mkdocs.exceptions import Abort

    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    page = docs / "how-to" / "tune.md"
    page.write_text(page.read_text() + "\n[gone](no-such-page.md)\n")
    with pytest.raises(Abort):
        build(tmp_path, docs)
