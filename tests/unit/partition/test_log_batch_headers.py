"""Log.batch_headers: every batch header at or above log_start_offset, in order, read without the records; the replica rebuilds producer state from it exactly as from full reads."""

from partition.batch import BatchBuilder, iter_headers
from partition.log import Log, LogConfig
from partition.producer_state import ProducerStateManager


def batch(n, pid=-1, seq=0):
    b = BatchBuilder()
    if pid >= 0:
        b.set_producer_state(pid, 0, seq)
    for i in range(n):
        b.append(b"v%d" % i, timestamp_ms=1000)
    return b.build()


def full_read_headers(log):
    """The old way: read whole batches (one segment per read) and parse their headers."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        hs = [h for _, h in iter_headers(log.read(offset, 1 << 20), verify=False) if h.next_offset > offset]
        out += hs
        offset = hs[-1].next_offset
    return out


def test_headers_cover_every_batch_from_the_log_start_across_segments(tmp_path):
    log = Log.open(tmp_path / "p0", LogConfig(segment_bytes=600, retention_ms=-1), now_ms=0)
    try:
        seqs = {}
        for i in range(30):
            pid = i % 3
            log.append(batch(4, pid, seqs.get(pid, 0)), leader_epoch=1, now_ms=0)
            seqs[pid] = seqs.get(pid, 0) + 4
        assert len(log._segments) > 3
        full = full_read_headers(log)
        headers = list(log.batch_headers())
        assert [(h.base_offset, h.producer_id, h.base_sequence) for h in headers] == \
               [(h.base_offset, h.producer_id, h.base_sequence) for h in full]
        a, b = ProducerStateManager(), ProducerStateManager()
        a.apply_headers(full)
        b.apply_headers(headers)
        retry = (1, 0, seqs[1] - 4, seqs[1] - 1)  # pid 1's last batch sent again
        assert a.check(*retry) == b.check(*retry) is not None
        assert b.check(1, 0, seqs[1], seqs[1] + 3) is None  # its next batch is new
        log.truncate_to(0)
        assert list(log.batch_headers()) == []
    finally:
        log.close()
