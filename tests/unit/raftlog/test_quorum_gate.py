"""The quorum port's limits (raftlog/node/quorum_gate.py) fit PySyncObj's real frames: its first frames fit the pre-authentication bound and the largest append a voter sends fits MAX_FRAME_BYTES; lengths are judged as stated."""

from __future__ import annotations

import random
import time
import zlib

import pytest

import raftlog.node.bridge as bridge
from raftlog.node import quorum_gate as gate


def _wire_bytes(message, password: str = "s" * 24) -> int:
    """What PySyncObj's TcpConnection.send puts on the wire for `message`."""
    import pysyncobj.pickle
    from pysyncobj.encryptor import getEncryptor

    data = zlib.compress(pysyncobj.pickle.dumps(message), 3)
    return gate.HEADER_BYTES + len(getEncryptor(password).encrypt_at_time(data, int(time.monotonic())))


def test_the_first_frames_fit_the_preauth_bound():
    rand_key = bytes(range(32))
    assert _wire_bytes(rand_key) <= gate.PREAUTH_MAX_FRAME_BYTES + gate.HEADER_BYTES
    # The address follows, authenticated already; even a 253-character host name fits.
    assert _wire_bytes((rand_key, "h" * 253 + ":65535")) <= gate.PREAUTH_MAX_FRAME_BYTES + gate.HEADER_BYTES


def test_the_largest_append_fits_max_frame_bytes():
    import pysyncobj.pickle

    rng = random.Random(39)
    command_bytes = bridge._MAX_COMMAND_BYTES_LIMIT
    batch_bytes = max(2**18, 4 * command_bytes)  # the bridge's appendEntriesBatchSizeBytes

    def entry(size: int, index: int) -> tuple[bytes, int, int]:
        # Bytes >= 0x80 cost two bytes each time they are pickled (latin-1 text in UTF-8).
        command = bytes(rng.randrange(128, 256) for _ in range(size))
        return b"\x00" + pysyncobj.pickle.dumps((0, (command,))), index, 2**40

    # PySyncObj takes entries until their data reaches batch_bytes, that one included: the
    # worst is a batch just short of it and then the largest entry.
    entries = [entry(command_bytes, 1), entry(command_bytes - 200, 2)]
    assert sum(len(e[0]) for e in entries) < batch_bytes
    entries.append(entry(command_bytes, 3))
    message = (bytes(32), {"type": "append_entries", "term": 2**40, "commit_index": 2**40,
                           "entries": entries, "prevLogIdx": 2**40, "prevLogTerm": 2**40})
    wire = _wire_bytes(message)
    # 5.5 MiB measured: zlib takes back most of what pickling added; the bound assumes it
    # takes back nothing.
    assert wire <= gate.MAX_FRAME_BYTES + gate.HEADER_BYTES


@pytest.mark.parametrize(("length", "authenticated", "reason"), [
    (-1, False, "negative_frame_length"),
    (-(2**31), True, "negative_frame_length"),
    (0, False, None),
    (gate.PREAUTH_MAX_FRAME_BYTES, False, None),
    (gate.PREAUTH_MAX_FRAME_BYTES + 1, False, "preauth_frame_too_large"),
    (2**31 - 1, False, "preauth_frame_too_large"),
    (gate.PREAUTH_MAX_FRAME_BYTES + 1, True, None),
    (gate.MAX_FRAME_BYTES, True, None),
    (gate.MAX_FRAME_BYTES + 1, True, "frame_too_large"),
])
def test_length_refusal(length, authenticated, reason):
    assert gate.length_refusal(length, authenticated) == reason


def test_preauth_reads_stop_at_the_header_and_then_at_the_frame():
    assert gate.preauth_bytes_wanted(0, None) == 4
    assert gate.preauth_bytes_wanted(3, None) == 1
    assert gate.preauth_bytes_wanted(4, 228) == 228
    assert gate.preauth_bytes_wanted(100, 228) == 132
    assert gate.preauth_bytes_wanted(232, 228) == 0


def test_refusals_are_counted_by_reason_and_logged_once_per_address(caplog):
    log = gate.RefusalLog()
    with caplog.at_level("WARNING", logger=gate.__name__):
        for _ in range(3):
            log.refuse("10.0.0.9", "preauth_timeout")
        log.refuse("10.0.0.9", "frame_too_large")
        log.refuse("10.0.0.8", "preauth_timeout")
    assert log.counts() == {"preauth_timeout": 4, "frame_too_large": 1}
    assert [(r.getMessage(), r.raftlog_fields["peer"]) for r in caplog.records] == [
        ("quorum_conn_refused", "10.0.0.9"), ("quorum_conn_refused", "10.0.0.8")]
