"""Shared fixtures of the metadata unit tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def controller_cluster():
    """test_controller.py's `Cluster` (a controller, its committed image and a manual clock)."""
    name = "test_controller_harness"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("test_controller.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name].Cluster
