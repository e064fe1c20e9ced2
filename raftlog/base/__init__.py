"""The shared bottom layer: what every other layer may import, and which imports nothing of ours.

* `errors`: the one registry of wire error codes (definite failures vs unknown outcomes);
* `protocol`: the native protocol's frame codec and request/response shapes (PROTOCOL.md);
* `peer`: address-keyed links between nodes over that protocol;
* `eventlog`: structured one-line logging; `metrics`: metric primitives for /metrics;
* `topics`: internal topic names and the group -> `__consumer_offsets` partition hash.

May import: the standard library and third-party packages only (import-linter checks it).
"""
