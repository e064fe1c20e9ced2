"""HTTP Basic authentication of the registry's callers with the cluster's SCRAM users: the
password is checked against the user's stored SCRAM credential (the salted keys in the
metadata image; no password is stored anywhere). PBKDF2 runs in a worker thread; a checked
(user, password digest) is remembered for CACHE_S so a client's every request costs a dict
lookup, at most MAX_CACHED of them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import trio

__all__ = ["basic_authenticator"]

CACHE_S: Final = 60.0
MAX_CACHED: Final = 1024


def basic_authenticator(image_of: Callable[[], Any], mechanisms: Sequence[str]) -> Callable[[str, str], Awaitable[bool]]:
    """`authenticate(user, password) -> bool` over the current image's SCRAM credentials."""
    scram = [m for m in mechanisms if m.startswith("SCRAM-")] or ["SCRAM-SHA-512", "SCRAM-SHA-256"]
    cache: dict[tuple[str, bytes], float] = {}

    async def authenticate(user: str, password: str) -> bool:
        digest = hashlib.sha256(password.encode()).digest()
        now = trio.current_time()
        seen = cache.get((user, digest))
        image = image_of()
        credential = next((c for m in scram if (c := image.scram_credential(user, m)) is not None), None)
        if credential is None:
            return False
        if seen is not None and now - seen < CACHE_S:
            return True
        ok = await trio.to_thread.run_sync(credential.check_password, password.encode())
        if ok:
            if len(cache) >= MAX_CACHED:
                cache.clear()
            cache[(user, digest)] = now
        return bool(ok)

    return authenticate
