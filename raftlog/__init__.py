"""raftlog: a Kafka-like replicated commit log (see README and docs/architecture.md).

Public API, declared here once (imported lazily, so `import raftlog.base...` in a node stays
light):

    from raftlog import Producer, Consumer, Admin          # blocking client (raftlog.client)
    from raftlog import aio                                 # trio client: aio.Producer, ...
    from raftlog import RaftlogError, RejectedError, UnknownOutcomeError   # the two outcomes

The package itself is layered, bottom to top: `raftlog.base` (shared bottom) < `metadata`,
`partition`, `groupcoord` (cores and services) < `raftlog.node` | `raftlog.client` <
`raftlog.cli` < `spark_source`, `jepsen_style_tests`. `lint-imports` enforces it.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0.dev0"

__all__ = [
    "Producer",
    "Consumer",
    "Admin",
    "aio",
    "RaftlogError",
    "RejectedError",
    "UnknownOutcomeError",
]

_LAZY = {
    "Producer": "raftlog.client",
    "Consumer": "raftlog.client",
    "Admin": "raftlog.client",
    "RaftlogError": "raftlog.base.errors",
    "RejectedError": "raftlog.base.errors",
    "UnknownOutcomeError": "raftlog.base.errors",
}


def __getattr__(name: str) -> Any:
    if name == "aio":
        return importlib.import_module("raftlog.aio")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'raftlog' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
