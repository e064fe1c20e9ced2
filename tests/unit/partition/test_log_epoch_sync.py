"""The leader-epoch checkpoint is written with the recovery point, not with each new epoch's
first batch (issue 46: 2 fsyncs per replica per election; partition/log.py "Epoch cache").
What a power loss keeps of it is what was fsynced: these tests put back exactly that and
reopen, and recovery must find every epoch of the log again."""

from __future__ import annotations

import pytest

import partition.log as log_module
from partition.batch import BatchBuilder
from partition.checkpoint import decode_checkpoint, encode_checkpoint
from partition.epoch_cache import LeaderEpochCache
from partition.log import ACTIVE_POINT_CHECKPOINT, EPOCH_CHECKPOINT, Log, LogConfig

SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=300, retention_ms=-1)


def mk(ts: int = 1000) -> bytes:
    b = BatchBuilder()
    for i in range(3):
        b.append(bytes([i]) * 40, key=b"k%d" % i, timestamp_ms=ts + i)
    return b.build()


class DurableFiles:
    """Records what each write_durably left durable (by name), for a simulated power loss."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.files: dict[str, bytes] = {}
        real = log_module.write_durably

        def recording(directory, name, data, **kw):
            real(directory, name, data, **kw)
            self.files[name] = bytes(data)

        monkeypatch.setattr(log_module, "write_durably", recording)

    def power_loss(self, d, names=(EPOCH_CHECKPOINT,)) -> None:
        """Each of `names` back to its last durable contents (absent if never durable)."""
        for name in names:
            if name in self.files:
                (d / name).write_bytes(self.files[name])
            else:
                (d / name).unlink(missing_ok=True)


def test_a_new_epochs_append_writes_no_checkpoint_and_a_crash_finds_it_by_the_scan(tmp_path, monkeypatch):
    durable = DurableFiles(monkeypatch)
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig(segment_bytes=1 << 20, retention_ms=-1), now_ms=0)
    for epoch in (1, 2, 3):
        log.append(mk(), leader_epoch=epoch, now_ms=0)
    log.flush()
    assert EPOCH_CHECKPOINT not in durable.files  # no fsync for the three new epochs
    epochs = log.epochs()
    assert [e for e, _ in epochs] == [1, 2, 3]
    log._abandon()
    durable.power_loss(d)
    again = Log.open(d, log.config, now_ms=0)
    try:
        assert again.epochs() == epochs
    finally:
        again.close()


@pytest.mark.parametrize("with_point", [False, True])
def test_epochs_below_a_moved_recovery_point_are_durable_first(tmp_path, monkeypatch, with_point):
    # Rolled segments below the recovery point are trusted, never scanned again: the
    # epochs starting in them must be in the durable checkpoint by the time the point is.
    durable = DurableFiles(monkeypatch)
    d = tmp_path / "t-0"
    log = Log.open(d, SMALL, now_ms=0)
    log.append(mk(), leader_epoch=1, now_ms=0)
    assert log.write_recovery_point(log.recovery_snapshot(0))  # a valid checkpoint: [(1, 0)]
    assert durable.files[EPOCH_CHECKPOINT]
    epoch = 1
    for i in range(40):
        if i % 3 == 0:
            epoch += 1
        log.append(mk(ts=1000 + i), leader_epoch=epoch, now_ms=0)
        if i % 7 == 6:
            log.flush()
    log.flush()
    if with_point:
        point = log.recovery_snapshot(0)
        assert point is not None and log.write_recovery_point(point)
    assert log.segment_count() > 3 and log._clean_below > 0
    epochs = log.epochs()
    log.append(mk(), leader_epoch=epoch + 1, now_ms=0)  # a new one after the last point
    log.flush()
    epochs_after = log.epochs()
    log._abandon()
    durable.power_loss(d)
    kept = LeaderEpochCache.decode(decode_checkpoint(EPOCH_CHECKPOINT, durable.files[EPOCH_CHECKPOINT]))
    assert [e for e in epochs if e[1] < log._clean_below] == [e for e in kept.entries if e[1] < log._clean_below]
    again = Log.open(d, SMALL, now_ms=0)
    try:
        assert again.epochs() == epochs_after
        assert epochs_after[:len(epochs)] == epochs
    finally:
        again.close()


def test_open_rewrites_at_once_a_checkpoint_whose_entries_recovery_removed(tmp_path, monkeypatch):
    # An entry past what survived (its batch was lost): the file must not keep it, or a new
    # epoch written at that offset later and lost with the file's next write would be
    # merged into it (assign_lenient) at the next open.
    d = tmp_path / "t-0"
    log = Log.open(d, SMALL, now_ms=0)
    log.append(mk(), leader_epoch=1, now_ms=0)
    log.close()
    end = 3
    (d / EPOCH_CHECKPOINT).write_bytes(encode_checkpoint(EPOCH_CHECKPOINT, ["1 0", f"5 {end + 10}"]))
    durable = DurableFiles(monkeypatch)
    again = Log.open(d, SMALL, now_ms=0)
    try:
        assert again.epochs() == [(1, 0)]
        assert decode_checkpoint(EPOCH_CHECKPOINT, durable.files[EPOCH_CHECKPOINT]) == ["1 0"]
    finally:
        again.close()


def test_open_of_a_log_with_only_new_epochs_fsyncs_no_checkpoint(tmp_path, monkeypatch):
    d = tmp_path / "t-0"
    log = Log.open(d, SMALL, now_ms=0)
    log.append(mk(), leader_epoch=1, now_ms=0)
    log.append(mk(), leader_epoch=2, now_ms=0)
    log.flush()
    log._abandon()  # a SIGKILL: no close, no point
    written: list[str] = []
    monkeypatch.setattr(Log, "_write_epochs", lambda self: written.append("epochs"))
    monkeypatch.setattr(Log, "_write_log_start", lambda self: written.append("log_start"))
    again = Log.open(d, SMALL, now_ms=0)
    try:
        assert again.epochs() == [(1, 0), (2, 3)]
        assert written == []
        assert not (d / ACTIVE_POINT_CHECKPOINT).exists()
    finally:
        again._abandon()
