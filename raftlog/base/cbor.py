"""Canonical CBOR in, strict CBOR out: the one decoder every byte format of ours goes through
(native frames, metadata records and envelopes, `__consumer_offsets` keys and values, group
subscriptions).

    data = dumps(obj)                                   # canonical: equal values, equal bytes
    obj = loads(data, what="envelope", max_bytes=1 << 20, error=InvalidRecordError)

Invariants of `loads`:
* exactly one CBOR item fills `data` (trailing bytes are an error), at most `max_bytes`;
* no CBOR tag is decoded (dates, bignums, regexes, shared references, ...): a peer cannot make
  us compile a regex or build a cyclic object; nesting is capped at MAX_NESTING_DEPTH;
  indefinite lengths and duplicate map keys are refused;
* with `canonical=True` the bytes must be the canonical encoding of what they decode to
  (formats that are compared or deduplicated by their bytes ask for it);
* every failure raises `error(message)`, the message starting with `what`.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any, Final

import cbor2

__all__ = ["MAX_NESTING_DEPTH", "dumps", "loads"]

MAX_NESTING_DEPTH: Final = 32  # our deepest value is ~5 levels; 32 leaves room, bounds recursion

# The tags cbor2 decodes itself (probed on cbor2 6.2: datetime, bignum, decimal, bigfloat,
# string refs, shared refs, rational, regex, MIME, UUID, IP addresses, sets, self-describe...).
# Every one is overridden to fail; any other tag reaches `_refuse_tag` through `tag_hook`.
_BUILTIN_TAGS: Final = (
    0, 1, 2, 3, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258, 260, 261, 1004,
    43000, 55799,
)  # fmt: skip


class _TagRefused(ValueError):
    """Raised inside cbor2 for any tag; cbor2 wraps it into CBORDecodeError."""


def _refuse_tag(*args: Any) -> Any:
    raise _TagRefused("CBOR tags are not allowed")


_SEMANTIC_DECODERS: Final = {tag: _refuse_tag for tag in _BUILTIN_TAGS}
_DECODE_ERRORS: Final = (cbor2.CBORError, ValueError, TypeError, OverflowError, RecursionError, EOFError)


def dumps(obj: Any) -> bytes:
    """The canonical CBOR encoding of `obj` (RFC 8949 core deterministic: sorted map keys,
    shortest forms). Raises TypeError/ValueError (from cbor2) for what CBOR cannot hold."""
    return cbor2.dumps(obj, canonical=True)


def loads(data: Any, *, what: str, max_bytes: int, error: Callable[[str], Exception],
          canonical: bool = False) -> Any:
    """Decode the one CBOR item that fills `data`. Raises `error(...)` for anything else."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise error(f"{what}: expected bytes, got {type(data).__name__}")
    raw = bytes(data)
    if len(raw) > max_bytes:
        raise error(f"{what}: {len(raw)} bytes, more than {max_bytes}")
    stream = io.BytesIO(raw)
    try:
        value = cbor2.CBORDecoder(
            stream,
            tag_hook=_refuse_tag,
            semantic_decoders=_SEMANTIC_DECODERS,
            max_depth=MAX_NESTING_DEPTH,
            allow_indefinite=False,
            allow_duplicate_keys=False,
            strict_hashable_types=True,
        ).decode()
    except _DECODE_ERRORS as exc:
        raise error(f"{what}: not valid CBOR ({exc})") from None
    if stream.tell() != len(raw):
        raise error(f"{what}: {len(raw) - stream.tell()} trailing bytes after the CBOR item")
    if canonical and dumps(value) != raw:
        raise error(f"{what}: not canonical CBOR")
    return value
