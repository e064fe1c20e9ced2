"""The metadata log for broker-only nodes: they long-poll a voter's peer op `metadata_fetch
{after_index, max_wait_ms, max_envelopes}` and replay what comes back, so every node holds
the same dense index 1, 2, 3, ... and the same images as the voters.

* `MetadataFetcher` (broker-only nodes): asks the controller when it knows it, else the voters
  in turn; learns the controller's id from each answer (`controller_id`), and on failure
  forgets it and backs off 0.1-0.2 s with jitter.
* `answer_fetch` (voters): the peer op's answer, waiting up to `max_wait_ms` for an envelope
  past `after_index`.

May import: raftlog.base and metadata's loader.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from typing import Any, Final

import trio

from metadata.loader import MetadataLoader
from raftlog.base.errors import InvalidRequestError, RaftlogError
from raftlog.base.eventlog import log_event
from raftlog.base.peer import PeerPool
from raftlog.base.protocol import Request, field

__all__ = ["MetadataFetcher", "answer_fetch", "FETCH_MAX_ENVELOPES"]

logger = logging.getLogger(__name__)

FETCH_MAX_WAIT_MS: Final = 1000
FETCH_MAX_ENVELOPES: Final = 1000
FETCH_MAX_WAIT_MS_LIMIT: Final = 10_000


class MetadataFetcher:
    """The fetch loop of a broker-only node. `on_controller_change()` runs when the
    controller id learnt from the voters changes (the broker then heartbeats it at once)."""

    def __init__(
        self,
        loader: MetadataLoader,
        peers: PeerPool,
        voter_peers: Mapping[int, str],
        rng: random.Random,
        on_controller_change: Callable[[], None],
    ) -> None:
        self._loader = loader
        self._peers = peers
        self._voter_peers = dict(voter_peers)
        self._rng = rng
        self._on_controller_change = on_controller_change
        self.controller_id: int | None = None  # as the last answer (or error hint) said

    async def run(self) -> None:
        voters = sorted(self._voter_peers)
        turn = self._rng.randrange(len(voters))
        while True:
            controller = self.controller_id
            voter = controller if controller in self._voter_peers else voters[turn % len(voters)]
            address = self._voter_peers[voter]
            try:
                result = await self._peers.call(
                    address, "metadata_fetch",
                    {"after_index": self._loader.applied_index, "max_wait_ms": FETCH_MAX_WAIT_MS,
                     "max_envelopes": FETCH_MAX_ENVELOPES},
                    timeout_s=FETCH_MAX_WAIT_MS / 1000 + 3.0,
                )  # fmt: skip
                self._take(result)
            except RaftlogError as exc:
                log_event(logger, "metadata_fetch_failed", level=logging.DEBUG,
                          voter=voter, reason=str(exc))
                if voter == self.controller_id:
                    self.controller_id = None
                turn += 1
                await trio.sleep(0.1 + 0.1 * self._rng.random())

    def _take(self, result: Mapping[str, Any]) -> None:
        first = result.get("first_index")
        envelopes = result.get("envelopes")
        if type(first) is not int or not isinstance(envelopes, list):
            raise InvalidRequestError("malformed metadata_fetch answer")
        if envelopes and first != self._loader.applied_index + 1:
            raise InvalidRequestError(
                f"metadata_fetch answered from {first}, wanted {self._loader.applied_index + 1}")
        for offset, command in enumerate(envelopes):
            if not isinstance(command, bytes):
                raise InvalidRequestError("metadata_fetch envelope is not bytes")
            self._loader.apply(first + offset, command)
        controller_id = result.get("controller_id")
        if controller_id != self.controller_id and (controller_id is None or type(controller_id) is int):
            self.controller_id = controller_id
            self._on_controller_change()


async def answer_fetch(
    loader: MetadataLoader, request: Request, controller: Callable[[], tuple[int | None, int]]
) -> dict[str, Any]:
    """A voter's answer to `metadata_fetch`: {first_index, envelopes, commit_index,
    controller_id, controller_epoch}; waits up to `max_wait_ms` for news. `controller()`
    gives (controller id, epoch) as of the answer."""
    after = field(request, "after_index", int, min_value=0)
    max_wait_ms = field(request, "max_wait_ms", int, default=0, min_value=0,
                        max_value=FETCH_MAX_WAIT_MS_LIMIT)
    limit = field(request, "max_envelopes", int, default=FETCH_MAX_ENVELOPES, min_value=1,
                  max_value=FETCH_MAX_ENVELOPES)
    with trio.move_on_after(max_wait_ms / 1000):
        while loader.applied_index <= after:
            await loader.wait_changed()
    controller_id, controller_epoch = controller()
    return {
        "first_index": after + 1,
        "envelopes": loader.envelopes(after, limit),
        "commit_index": loader.applied_index,
        "controller_id": controller_id,
        "controller_epoch": controller_epoch,
    }
