"""Structured logging for the node: one line per event, logfmt-style `key=value` pairs.

    ts=2025-01-02T03:04:05.678Z level=info logger=raftlog.node.server node=1 event=conn_open peer=h:5

Plain stdlib `logging` underneath, so every package logs with `logging.getLogger(__name__)`
and the node decides where lines go. `log_event(logger, "event_name", key=value, ...)` is the
structured call; ordinary `logger.info("text")` still works and comes out as `msg="text"`.

Invariants:
* A line never contains a raw newline: values with spaces, quotes, `=` or control
  characters are quoted with backslash escapes, tracebacks included.
* Field order is fixed: ts, level, logger, node, event, then fields in the order given,
  then msg/exc when present.
* `setup_logging` is idempotent: it replaces the handlers it installed before and leaves
  anyone else's alone.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
import time
from pathlib import Path
from typing import IO, Any

__all__ = ["setup_logging", "log_event", "LogfmtFormatter", "format_value"]

_EVENT_ATTR = "raftlog_event"
_FIELDS_ATTR = "raftlog_fields"
_HANDLER_MARK = "_raftlog_handler"


def format_value(value: Any) -> str:
    """Render one logfmt value: bare when safe, else double-quoted with escapes."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, bytes | bytearray):
        text = value.hex() if len(value) <= 64 else f"{value[:64].hex()}...({len(value)} bytes)"
    else:
        text = str(value)
    if text and all(c.isprintable() and c not in ' ="\\' for c in text):
        return text
    escaped = (
        text.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )
    escaped = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in escaped)
    return f'"{escaped}"'


class LogfmtFormatter(logging.Formatter):
    """Formats a record as one logfmt line (see the module docstring)."""

    def __init__(self, node_id: int | str | None = None) -> None:
        super().__init__()
        self.node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        pairs: list[tuple[str, Any]] = [
            ("ts", f"{ts}.{int(record.msecs):03d}Z"),
            ("level", record.levelname.lower()),
            ("logger", record.name),
        ]
        if self.node_id is not None:
            pairs.append(("node", self.node_id))
        event = getattr(record, _EVENT_ATTR, None)
        if event is not None:
            pairs.append(("event", event))
            pairs.extend(getattr(record, _FIELDS_ATTR, {}).items())
        else:
            pairs.append(("msg", record.getMessage()))
        if record.exc_info:
            pairs.append(("exc", self.formatException(record.exc_info)))
        elif record.exc_text:
            pairs.append(("exc", record.exc_text))
        if record.stack_info:
            pairs.append(("stack", record.stack_info))
        return " ".join(f"{key}={format_value(value)}" for key, value in pairs)


def setup_logging(
    level: int | str = "INFO",
    *,
    stream: IO[str] | None = None,
    file: str | Path | None = None,
    node_id: int | str | None = None,
) -> list[logging.Handler]:
    """Send every logger's records at `level` and above to `stream` and/or `file` as logfmt.

    With neither `stream` nor `file`, lines go to stderr. The file is opened for appending
    and reopened if it is rotated away (WatchedFileHandler). Returns the handlers installed
    (the caller closes them with `logging.shutdown()` or by calling setup_logging again).
    Raises ValueError for an unknown level name.
    """
    if isinstance(level, str):
        numeric = logging.getLevelName(level.upper())
        if not isinstance(numeric, int):
            raise ValueError(f"unknown log level {level!r}")
        level = numeric
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _HANDLER_MARK, False):
            root.removeHandler(handler)
            handler.close()
    handlers: list[logging.Handler] = []
    if stream is not None or file is None:
        handlers.append(logging.StreamHandler(stream if stream is not None else sys.stderr))
    if file is not None:
        handlers.append(logging.handlers.WatchedFileHandler(file, encoding="utf-8"))
    formatter = LogfmtFormatter(node_id)
    for handler in handlers:
        setattr(handler, _HANDLER_MARK, True)
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(level)
    return handlers


def log_event(
    logger: logging.Logger,
    event: str,
    *,
    level: int = logging.INFO,
    exc_info: Any = None,
    **fields: Any,
) -> None:
    """Log one structured event: `event=<event>` then `key=value` for each field, in order.
    Pass `exc_info=True` inside an except block to attach the traceback."""
    if logger.isEnabledFor(level):
        logger.log(
            level, event, exc_info=exc_info, extra={_EVENT_ATTR: event, _FIELDS_ATTR: fields}
        )
