"""The trio client (`from raftlog import aio`; `aio.Producer`, `aio.Consumer`, `aio.Admin`, `aio.ShareConsumer`)."""

from raftlog.client.aio import Admin, Consumer, Producer, RecordHandle  # noqa: F401
from raftlog.client.share_aio import ShareConsumer  # noqa: F401

__all__ = ["Producer", "Consumer", "Admin", "RecordHandle", "ShareConsumer"]
