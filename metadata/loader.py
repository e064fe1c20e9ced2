"""The metadata log as this node has applied it: committed envelopes are replayed, in index
order, into the current `MetadataImage`, and each new image goes to the listeners.

    loader = MetadataLoader(keep_envelopes=is_voter)
    loader.listen(callback)                 # callback(image) after every envelope, in order
    loader.apply(index, envelope_bytes)     # index = applied_index + 1, or RuntimeError
    await loader.wait_for(predicate, timeout_s)

Owns: `image`, `applied_index`, the brokers' addresses as the image has them
(`client_address`, `peer_address`), the envelopes themselves on voters (`envelopes(after,
limit)`, what a voter serves to broker-only nodes: the quorum keeps the whole list in RAM too)
and the change event (`wait_changed`). An envelope that does not decode raises
InvalidRecordError from `apply`: fatal for the node, since skipping it would let images
diverge; so is an exception from a listener (a listener that missed an image would be
silently wrong).

Concurrency: trio thread only; listeners must not block.
May import: raftlog.base and metadata's records, image and delta.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import trio

from metadata.delta import replay_envelope
from metadata.image import MetadataImage
from raftlog.base.errors import RequestTimedOutError

__all__ = ["MetadataLoader", "MAX_LISTENERS", "hostport"]

MAX_LISTENERS: Final = 64


def hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class MetadataLoader:
    """See the module docstring."""

    def __init__(self, *, keep_envelopes: bool) -> None:
        self.image = MetadataImage.empty()
        self.applied_index = 0
        self._envelopes: list[bytes] | None = [] if keep_envelopes else None  # index i at [i-1]
        self._listeners: list[Callable[[MetadataImage], None]] = []
        self._changed = trio.Event()

    def listen(self, callback: Callable[[MetadataImage], None]) -> None:
        """Call `callback(image)` after every applied envelope, in order (listeners in the order
        they were added). Raises ValueError past MAX_LISTENERS."""
        if len(self._listeners) >= MAX_LISTENERS:
            raise ValueError("too many image listeners")
        self._listeners.append(callback)

    def apply(self, index: int, command: bytes) -> None:
        """Replay envelope `index`; raises RuntimeError on a gap, InvalidRecordError on bytes
        that do not decode (both fatal: see the module docstring)."""
        if index != self.applied_index + 1:
            raise RuntimeError(f"metadata entry {index} after {self.applied_index}: gap")
        self.image = replay_envelope(self.image, command)
        self.applied_index = index
        if self._envelopes is not None:
            self._envelopes.append(command)
        for callback in self._listeners:
            callback(self.image)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_changed(self) -> None:
        """Return after the next applied envelope."""
        await self._changed.wait()

    async def wait_for(self, predicate: Callable[[MetadataImage], Any], timeout_s: float) -> Any:
        """Wait until `predicate(image)` is truthy and return its value; raises
        RequestTimedOutError after `timeout_s`."""
        with trio.move_on_after(timeout_s):
            while not (value := predicate(self.image)):
                await self._changed.wait()
            return value
        raise RequestTimedOutError(f"metadata condition not met within {timeout_s} s")

    def client_address(self, broker_id: int) -> str | None:
        """The broker's client listener as "host:port" ("[v6]:port"), None if unknown."""
        reg = self.image.broker(broker_id)
        return None if reg is None else hostport(reg.host, reg.port)

    def peer_address(self, broker_id: int) -> str | None:
        """The broker's peer listener, as `client_address`."""
        reg = self.image.broker(broker_id)
        return None if reg is None else hostport(reg.peer_host, reg.peer_port)

    def envelopes(self, after_index: int, limit: int) -> list[bytes]:
        """Up to `limit` envelopes from index `after_index + 1` on (voters only)."""
        assert self._envelopes is not None, "only a voter keeps the envelopes"
        return self._envelopes[after_index : after_index + limit]
