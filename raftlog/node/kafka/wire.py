"""The light half of the Kafka codec: what the listener's sockets, framing and response
ordering need, importable without kafka-python (whose protocol classes cost the node about
a second at start; codec.py loads them on the first Kafka request, see listener.py).

A request frame is `int32 size` + `size` bytes: request header, then body (codec.py). A
response is a list of chunks written in order: bytes, or a `FileRange` of a segment file
that the writer sends with os.sendfile (zero-copy fetch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from partition.port import RecordsSlice

__all__ = ["API_VERSIONS_KEY", "CodecError", "Header", "FileRange", "Chunk", "chunks_size"]

API_VERSIONS_KEY: Final = 18


class CodecError(ValueError):
    """A frame that does not decode as the request its header names (truncated, garbage)."""


@dataclass(frozen=True, slots=True)
class Header:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


# `length` bytes of a segment file from `offset` through a descriptor the holder closes; the
# writer sends them with os.sendfile (the partition port's RecordsSlice).
FileRange = RecordsSlice

Chunk = bytes | bytearray | memoryview | FileRange


def chunks_size(chunks: Sequence[Chunk]) -> int:
    return sum(c.length if isinstance(c, FileRange) else len(c) for c in chunks)
