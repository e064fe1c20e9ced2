"""The trio client (`from raftlog import aio`; `aio.Producer`, `aio.Consumer`, `aio.Admin`)."""

from raftlog.client.aio import Admin, Consumer, Producer, RecordHandle  # noqa: F401

__all__ = ["Producer", "Consumer", "Admin", "RecordHandle"]
