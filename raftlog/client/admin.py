"""Sans-I/O admin core (`AdminCore`): admin ops are `Call`s to any broker (the node
forwards them to the controller); routed calls (list_offsets) go to a partition's leader.
No I/O, no clock, no threads.
"""

from __future__ import annotations

from raftlog.base.errors import UnknownTopicOrPartitionError
from raftlog.client.core import Call, ClientCore

__all__ = ["AdminCore"]


class AdminCore(ClientCore):
    """Admin ops are Calls to any broker (the node forwards them to the controller).

    An admin op (a call with no route) answered UNKNOWN_TOPIC_OR_PARTITION fails at once:
    the controller that answered it is the authority on which topics exist, so waiting for
    metadata to catch up (why produce retries it) only delays the answer to the deadline.
    Routed calls (list_offsets, fetch to a partition's leader) keep retrying it, since the
    leader's metadata may lag a create made a moment ago.
    """

    def _needs_metadata(self) -> bool:
        return bool(self._wanted_topics)

    def _retry_call(self, c: Call, exc: BaseException, now_ms: int) -> None:
        if c.route is None and isinstance(exc, UnknownTopicOrPartitionError):
            c.error = exc
            c.done = True
            return
        super()._retry_call(c, exc, now_ms)
