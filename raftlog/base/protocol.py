"""The native protocol's pure core: frame codec, request parsing, response building
(PROTOCOL.md is the contract; change it first).

A frame is a u32 big-endian length followed by that many bytes of one canonical CBOR map.
No I/O here: `FrameDecoder` is fed bytes and hands back decoded maps, so the trio server,
the client shells and the tests all share it.

Invariants:
* The decoder never buffers more than one announced frame plus one fed chunk when its
  caller drains `next_frame()` after every `feed()`: an announced length over
  `max_frame_bytes` is refused as soon as its 4 header bytes arrive.
* Decoded values are CBOR-plain only: dict with str keys, list, str, bytes, int, float, bool,
  None. Every CBOR tag (dates, bignums, regexes, shared references, ...) is refused, so a
  peer cannot make us compile a regex or build a cyclic object; nesting is capped at
  `MAX_NESTING_DEPTH`; map keys must be strings (no hash-collision games with tuples/ints).
* A frame must hold exactly one CBOR item: trailing bytes inside a frame are an error.
* After a malformed but complete frame the decoder stays aligned on the next frame; after an
  oversized announcement it is poisoned (the stream cannot be re-aligned) and keeps raising.

Attachments (PROTOCOL.md "Attachments"): an ok response may be followed by raw bytes, as many
as its map's `attachment_bytes` says (`attachment_length` checks it). A handler answers with
one by returning `Attached(fields, parts)`; the listener adds `attachment_bytes` and sends the
parts after the frame. A part is a bytes-like object or a `FilePart` (a range of an open file,
sent with os.sendfile where the stream is a plain socket). The reader of an attachment takes
the bytes its decoder has already buffered past the frame (`FrameDecoder.take_buffered`) and
reads the rest into the same buffer.

Inline handlers: a cheap op's handler marked `inline_handler` runs in the listener's reader
(no task of its own); the part of it that must wait comes back as `Later(wait)`.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Protocol, TypeVar

from raftlog.base import cbor
from raftlog.base.cbor import MAX_NESTING_DEPTH
from raftlog.base.errors import (
    InvalidRequestError,
    MessageTooLargeError,
    RaftlogError,
    error_from_wire,
)

__all__ = [
    "PROTOCOL_VERSION",
    "DEFAULT_MAX_FRAME_BYTES",
    "PEER_MAX_FRAME_BYTES",
    "FRAME_HEADER_BYTES",
    "MAX_FRAME_BYTES_LIMIT",
    "MAX_NESTING_DEPTH",
    "encode_frame",
    "foreign_protocol",
    "FirstBytes",
    "FrameDecoder",
    "ATTACHMENT_FIELD",
    "ATTACHMENT_STALL_S",
    "Attached",
    "Later",
    "inline_handler",
    "inline_handler_under_deadline",
    "FilePart",
    "attachment_length",
    "part_length",
    "Request",
    "Response",
    "parse_request",
    "parse_response",
    "ok_response",
    "error_response",
    "field",
]

PROTOCOL_VERSION: Final = 1
DEFAULT_MAX_FRAME_BYTES: Final = 64 << 20  # client listener
PEER_MAX_FRAME_BYTES: Final = 128 << 20  # peer listener (replica fetches carry many partitions)
FRAME_HEADER_BYTES: Final = 4
MAX_FRAME_BYTES_LIMIT: Final = (1 << 32) - 1  # what a u32 length can say
MAX_REQUEST_ID: Final = (1 << 63) - 1
ATTACHMENT_FIELD: Final = "attachment_bytes"
ATTACHMENT_STALL_S: Final = 30.0  # an attachment stalled this long: the connection goes

_HEADER = struct.Struct(">I")
_H = TypeVar("_H", bound=Callable[..., Any])


def foreign_protocol(first_bytes: bytes | bytearray) -> str | None:
    """What spoke, when the first bytes a server sent are not a raftlog frame: "HTTP",
    "TLS", "a Kafka-protocol listener" (a short frame that is not a CBOR map: a Kafka
    response header), or "something else"; None while they may still be a raftlog frame
    (a u32 length, then a CBOR map). Needs at least FRAME_HEADER_BYTES + 1 bytes to judge
    a frame (fewer: None unless the prefix already says HTTP or TLS)."""
    head = bytes(first_bytes[:8])
    if head[:5] == b"HTTP/" or head[:4] in (b"HTTP", b"<!DO", b"<htm"):
        return "HTTP"
    if len(head) >= 2 and head[0] in (0x15, 0x16) and head[1] == 0x03:
        return "TLS"
    if len(head) < FRAME_HEADER_BYTES + 1:
        return None
    body_first = head[FRAME_HEADER_BYTES]
    if 0xA0 <= body_first <= 0xBF:  # CBOR major type 5: a map, as every raftlog frame
        return None
    length = _HEADER.unpack_from(head)[0]
    if length < 1 << 20:
        return "a Kafka-protocol listener"  # a sane length but no CBOR map: Kafka's framing
    return "something else"


class FirstBytes:
    """The first bytes a server sent on one connection, judged by foreign_protocol as they
    arrive. Only the start of the connection says what spoke: bytes later in a frame (a
    large answer arrives in several reads) are anything at all and are not judged."""

    __slots__ = ("_head", "judged")

    def __init__(self) -> None:
        self._head = bytearray()
        self.judged = False

    def check(self, data: bytes | bytearray) -> str | None:
        """Feed the bytes of one read; what spoke if the connection's first bytes are not a
        raftlog frame, else None (always None once enough bytes were judged)."""
        if self.judged:
            return None
        self._head += data[: FRAME_HEADER_BYTES + 1 - len(self._head)]
        what = foreign_protocol(self._head)
        self.judged = what is not None or len(self._head) > FRAME_HEADER_BYTES
        return what


def encode_frame(message: Mapping[str, Any], *, max_frame_bytes: int | None = None) -> bytes:
    """Return the frame for `message`: u32 big-endian length + canonical CBOR.

    Raises MessageTooLargeError when the CBOR is over `max_frame_bytes` (or over what a u32 can
    say), and TypeError/ValueError (from cbor2) when the message holds something CBOR cannot
    encode.
    """
    body = cbor.dumps(dict(message))
    limit = MAX_FRAME_BYTES_LIMIT if max_frame_bytes is None else max_frame_bytes
    if len(body) > limit:
        raise MessageTooLargeError(f"frame of {len(body)} bytes is over the limit of {limit} bytes")
    return _HEADER.pack(len(body)) + body


def _check_plain(value: Any, depth: int = 0) -> None:
    # cbor2 already refuses tags and non-string keys; this catches simple values (undefined,
    # simple(n)) and anything a future cbor2 might decode natively.
    if depth > MAX_NESTING_DEPTH:
        raise InvalidRequestError("CBOR nesting too deep")
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise InvalidRequestError("CBOR map keys must be text strings")
            _check_plain(item, depth + 1)
    elif kind is list:
        for item in value:
            _check_plain(item, depth + 1)
    elif kind not in (str, bytes, int, float, bool) and value is not None:
        raise InvalidRequestError(f"CBOR value of type {kind.__name__} is not allowed")


def _decode_body(body: bytes) -> dict[str, Any]:
    value = cbor.loads(body, what="frame", max_bytes=len(body), error=InvalidRequestError)
    if type(value) is not dict:
        raise InvalidRequestError(f"frame holds a CBOR {type(value).__name__}, not a map")
    _check_plain(value)
    return value


class FrameDecoder:
    """Incremental frame decoder: `feed()` bytes as they arrive, then call `next_frame()`
    until it returns None.

    Concurrency: not thread-safe; one decoder per connection direction.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if not 0 < max_frame_bytes <= MAX_FRAME_BYTES_LIMIT:
            raise ValueError(f"max_frame_bytes must be in 1..{MAX_FRAME_BYTES_LIMIT}")
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._start = 0  # consumed prefix of _buffer; compacted lazily to keep feeds O(n)
        self._poisoned: MessageTooLargeError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as frames (a partial frame at a clean EOF)."""
        return len(self._buffer) - self._start

    def take_buffered(self, into: memoryview) -> int:
        """Move bytes received past the last frame returned (the start of its attachment)
        into `into`, at most len(into); returns how many. They are not decoded as frames."""
        available = len(self._buffer) - self._start
        n = min(available, len(into))
        if n:
            into[:n] = memoryview(self._buffer)[self._start : self._start + n]
            self._start += n
            if self._start == len(self._buffer):
                self._buffer.clear()
                self._start = 0
        return n

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes. Never raises for content; errors come from next_frame()."""
        if self._start and self._start * 2 >= len(self._buffer):
            del self._buffer[: self._start]
            self._start = 0
        self._buffer += data

    def next_frame(self) -> dict[str, Any] | None:
        """Return the next decoded map, or None when no complete frame is buffered.

        Raises MessageTooLargeError as soon as a header announces more than `max_frame_bytes` (and
        on every later call: the stream is lost). Raises InvalidRequestError when a complete frame
        is not exactly one plain CBOR map; that frame is consumed, so decoding may go on.
        """
        if self._poisoned is not None:
            raise self._poisoned
        available = len(self._buffer) - self._start
        if available < FRAME_HEADER_BYTES:
            return None
        (length,) = _HEADER.unpack_from(self._buffer, self._start)
        if length > self.max_frame_bytes:
            self._poisoned = MessageTooLargeError(
                f"frame of {length} bytes is over the limit of {self.max_frame_bytes} bytes"
            )
            raise self._poisoned
        if available < FRAME_HEADER_BYTES + length:
            return None
        begin = self._start + FRAME_HEADER_BYTES
        # One copy: slicing the bytearray itself would copy once more. The view is released
        # before the buffer is resized below.
        with memoryview(self._buffer) as view:
            body = bytes(view[begin : begin + length])
        self._start = begin + length
        if self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        return _decode_body(body)


class FilePart(Protocol):
    """`length` bytes of an open file from `offset`, through `fd`, owned by the answer that
    carries it: the listener sends it (os.sendfile on a plain socket, else read and written
    through the stream) and then calls `close()`, also when it is never sent. `intact()` says
    whether the range still holds what it held when the part was made: the listener asks
    before each os.sendfile call (and after each read), and closes the connection when it no
    longer does (the peer then sees a lost connection, never bytes of another time)."""

    fd: int
    offset: int
    length: int

    def intact(self) -> bool: ...

    def close(self) -> None: ...


_BUFFER_TYPES: Final = (bytes, bytearray, memoryview)


def part_length(part: Any) -> int:
    """Bytes in one attachment part (a bytes-like object or a FilePart)."""
    return len(part) if isinstance(part, _BUFFER_TYPES) else part.length


@dataclass(frozen=True, slots=True)
class Attached:
    """A handler's ok answer with an attachment: `fields` as any answer's, then `parts`
    (bytes-like objects and FileParts) back to back after the frame. The listener adds
    `attachment_bytes` to the fields. `close()` releases the file parts (the listener calls
    it once they are sent, or dropped)."""

    fields: Mapping[str, Any]
    parts: Sequence[Any]

    @property
    def length(self) -> int:
        return sum(part_length(p) for p in self.parts)

    def close(self) -> None:
        for part in self.parts:
            if not isinstance(part, _BUFFER_TYPES):
                part.close()


@dataclass(frozen=True, slots=True)
class Later:
    """A handler's answer that is not ready yet: the listener awaits `wait()` in a task of
    the request's own, under its deadline, and answers with what that returns (fields,
    Attached or None) or raises, as for any handler's result. What an `inline_handler`
    returns when it must wait (a long poll)."""

    wait: Callable[[], Awaitable[Any]]


def inline_handler(handler: _H) -> _H:
    """Mark an async handler `handler(Request)` that the listener may run in the
    connection's reader, without a task and a slot of its own (together ~30 us of
    scheduling per request: most of what a cheap op costs), so in request order. Such a
    handler must answer at once: it may await only what does not wait for long (no long
    poll, no peer), and returns `Later(wait)` for any part that must wait (a long poll,
    acks=all), which the listener runs as an ordinary request. Other requests on the
    connection wait while it runs; the request's deadline holds for the `Later` (and, with
    `inline_handler_under_deadline`, for the inline part too)."""
    handler.inline = True  # type: ignore[attr-defined]
    return handler


def inline_handler_under_deadline(handler: _H) -> _H:
    """`inline_handler` for a handler whose inline part may wait on another task (a lock):
    the listener runs that part under the request's deadline too (a cancel scope: a few us,
    which the cheapest inline ops do without) and answers REQUEST_TIMED_OUT at it."""
    handler = inline_handler(handler)
    handler.inline_deadline = True  # type: ignore[attr-defined]
    return handler


def attachment_length(fields: Mapping[str, Any], max_bytes: int) -> int:
    """How many attachment bytes follow a response with these fields (0: none). Raises
    MessageTooLargeError over `max_bytes`, InvalidRequestError when `attachment_bytes` is not
    an integer >= 0: either way the stream cannot be followed any further."""
    n = fields.get(ATTACHMENT_FIELD)
    if n is None:
        return 0
    if not _is_int(n) or n < 0:
        raise InvalidRequestError(f"'{ATTACHMENT_FIELD}' must be an integer >= 0, got {n!r:.40}",
                                  field=ATTACHMENT_FIELD)
    if n > max_bytes:
        raise MessageTooLargeError(f"attachment of {n} bytes is over the limit of {max_bytes} bytes")
    return n


@dataclass(frozen=True, slots=True)
class Request:
    """A parsed request: its `id`, its `op`, and every other field (read-only). `client_host`
    is the connection's IP (the node's listeners set it; a refused produce logs it). On a
    listener with authentication, `principal` ("User:<name>", or "User:ANONYMOUS") says who
    sent it, for the ACL checks; None elsewhere."""

    id: int
    op: str
    fields: Mapping[str, Any]
    principal: str | None = None
    client_host: str | None = None


@dataclass(frozen=True, slots=True)
class Response:
    """A parsed response: `error` is None for an ok response, else the rebuilt exception."""

    id: int
    fields: Mapping[str, Any]
    error: RaftlogError | None


def _is_int(value: Any) -> bool:
    return type(value) is int  # bool is an int subclass and must not pass


def parse_request(frame: Mapping[str, Any], client_host: str | None = None) -> Request:
    """Check the envelope of a decoded request map and split it.

    Returns Request(id, op, fields without v/id/op, client_host as given: the address of the
    connection it came on, for log lines and ACL checks). Raises InvalidRequestError with `field` set
    to the culprit; its `request_id` is the frame's id when that id is valid (else None, and
    the answer goes out with id 0).
    """
    request_id = frame.get("id")
    if not _is_int(request_id) or not 0 < request_id <= MAX_REQUEST_ID:
        raise InvalidRequestError(
            f"'id' must be an integer in 1..{MAX_REQUEST_ID}, got {request_id!r:.40}", field="id"
        )
    version = frame.get("v")
    if version != PROTOCOL_VERSION or not _is_int(version):
        raise InvalidRequestError(
            f"unsupported protocol version {version!r:.40}; this node speaks {PROTOCOL_VERSION}",
            field="v",
            request_id=request_id,
        )
    op = frame.get("op")
    if type(op) is not str or not op:
        raise InvalidRequestError(
            f"'op' must be a non-empty string, got {op!r:.40}", field="op", request_id=request_id
        )
    fields = {k: v for k, v in frame.items() if k not in ("v", "id", "op")}
    return Request(id=request_id, op=op, fields=MappingProxyType(fields), client_host=client_host)


def ok_response(request_id: int, **fields: Any) -> dict[str, Any]:
    """{"id": request_id, "ok": True, **fields}."""
    return {**fields, "id": request_id, "ok": True}


def error_response(request_id: int, error: RaftlogError) -> dict[str, Any]:
    """{"id": request_id, "error": error.to_wire()}."""
    return {"id": request_id, "error": error.to_wire()}


def parse_response(frame: Mapping[str, Any]) -> Response:
    """Split a decoded response map. Raises InvalidRequestError when it is not a response
    (no int id, or neither `ok: true` nor an `error` map)."""
    response_id = frame.get("id")
    if not _is_int(response_id) or response_id < 0:
        raise InvalidRequestError(f"response without an integer id: {response_id!r:.40}", field="id")
    if "error" in frame:
        error = error_from_wire(frame["error"])
        return Response(id=response_id, fields=MappingProxyType({}), error=error)
    if frame.get("ok") is not True:
        raise InvalidRequestError("response has neither 'ok': true nor 'error'", field="ok")
    fields = {k: v for k, v in frame.items() if k not in ("id", "ok")}
    return Response(id=response_id, fields=MappingProxyType(fields), error=None)


_REQUIRED: Final = object()
_TYPE_NAMES: Final = {
    int: "an integer", str: "a string", bytes: "bytes", bool: "a boolean", float: "a number",
    list: "a list", dict: "a map",
}  # fmt: skip


def _type_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)


def _has_type(value: Any, kind: type | tuple[type, ...]) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if k is int or k is bool or k is str or k is bytes:
            if type(value) is k:  # exact: True is not an int here, and never a str subclass
                return True
        elif k is float:
            if type(value) in (float, int):
                return True
        elif k is dict or k is Mapping:
            if isinstance(value, Mapping):
                return True
        elif isinstance(value, k):
            return True
    return False


def field(
    source: Request | Mapping[str, Any],
    name: str,
    kind: type | tuple[type, ...],
    *,
    default: Any = _REQUIRED,
    nullable: bool = False,
    items: type | tuple[type, ...] | None = None,
    min_value: int | None = None,
    max_value: int | None = None,
    where: str = "",
) -> Any:
    """Typed access to one field of a request (or of a nested map such as one partition).

    Returns the value; `default` when the field is absent (absent and no default: error);
    None when it is null and `nullable`. `kind` int/bool/str/bytes match exactly (True is
    not an int), float accepts ints, dict accepts any map. `items` checks every element of a
    list; `min_value`/`max_value` bound an int. `where` prefixes the field name in errors,
    e.g. where="partitions[2]" names "partitions[2].topic".

    Raises InvalidRequestError(field=<name>) naming the field and what was wrong.
    """
    if type(source) is Request:
        mapping, request_id = source.fields, source.id
    else:
        mapping, request_id = source, None
    value = mapping.get(name, _REQUIRED)
    # Fast path (every field of every request and peer answer): present, exactly the type,
    # in bounds; anything else takes the checks below, which say what is wrong.
    if (type(value) is kind and items is None and (min_value is None or value >= min_value)
            and (max_value is None or value <= max_value)):
        return value
    label = f"{where}.{name}" if where else name
    if value is _REQUIRED:
        if default is _REQUIRED:
            raise InvalidRequestError(f"missing field '{label}'", field=label, request_id=request_id)
        return default
    if value is None and nullable:
        return None
    if not _has_type(value, kind):
        raise InvalidRequestError(
            f"field '{label}' must be {_type_name(kind)}, got {type(value).__name__}",
            field=label,
            request_id=request_id,
        )
    if items is not None:
        for index, item in enumerate(value):
            if not _has_type(item, items):
                raise InvalidRequestError(
                    f"field '{label}[{index}]' must be {_type_name(items)}, "
                    f"got {type(item).__name__}",
                    field=label,
                    request_id=request_id,
                )
    if min_value is not None and value < min_value:
        raise InvalidRequestError(
            f"field '{label}' must be >= {min_value}, got {value}",
            field=label, request_id=request_id,
        )  # fmt: skip
    if max_value is not None and value > max_value:
        raise InvalidRequestError(
            f"field '{label}' must be <= {max_value}, got {value}",
            field=label, request_id=request_id,
        )  # fmt: skip
    return value
