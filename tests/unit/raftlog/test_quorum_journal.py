"""The metadata quorum's journal checks every byte on load: a flipped byte anywhere in a record written whole (mid-journal or last) stops the load with QuorumStorageError and changes nothing, a torn tail (a record cut short, zeros never written) is cut, and meta and dump files are CRC-checked too."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from metadata.quorum import QuorumStorageError
from raftlog.node.quorum_journal import (
    DUMP_MAGIC,
    META_MAGIC,
    JournalFile,
    read_blob,
    read_dump,
    write_blob,
)

ENTRIES = [(b"\x00command-%02d" % k, k, 1 + k // 4) for k in range(1, 13)]
HEAD_BYTES = 8  # u32 length + u32 CRC-32C before each body (u64 index, u64 term, command)


def _journal(tmp_path: Path, entries=ENTRIES) -> tuple[Path, Path, list[int]]:
    """A closed journal holding `entries`; returns its path, the dump path and each record's
    byte offset."""
    path, dump = tmp_path / "journal", tmp_path / "dump"
    journal = JournalFile(path, dump)
    for entry in entries:
        journal.append(*entry)
    offsets = list(journal._offsets)
    journal.close()
    return path, dump, offsets


def _flip(path: Path, at: int, mask: int = 0x10) -> bytes:
    data = bytearray(path.read_bytes())
    data[at] ^= mask
    path.write_bytes(bytes(data))
    return bytes(data)


def test_entries_and_meta_survive_a_reopen(tmp_path):
    path, dump, _ = _journal(tmp_path)
    journal = JournalFile(path, dump)
    assert journal.entries == ENTRIES
    journal.set_term_and_vote(5, "127.0.0.1:1")
    journal.set_commit_index(9)
    journal.close()
    reopened = JournalFile(path, dump)
    assert (reopened.term, reopened.voted_for, reopened.commit_index) == (5, "127.0.0.1:1", 9)
    reopened.close()


@pytest.mark.parametrize("record", [0, 5, len(ENTRIES) - 1])
def test_every_flipped_byte_of_a_record_is_detected_and_nothing_is_cut(tmp_path, record):
    path, dump, offsets = _journal(tmp_path)
    pristine = path.read_bytes()
    last = record == len(ENTRIES) - 1
    end = len(pristine) if last else offsets[record + 1]
    for at in range(offsets[record], end):  # length, CRC, index, term and command bytes
        if last and at in (offsets[record] + 1, offsets[record] + 2, offsets[record] + 3):
            continue  # the last record's length grown past the end: see the next test
        damaged = _flip(path, at)
        with pytest.raises(QuorumStorageError, match=f"byte {offsets[record]} .*not a torn tail"):
            JournalFile(path, dump)
        assert path.read_bytes() == damaged, at  # the load changed nothing
        path.write_bytes(pristine)
    assert JournalFile(path, dump).entries == ENTRIES


def test_a_last_record_whose_length_grew_past_the_end_reads_as_torn(tmp_path):
    # The one damage the format cannot tell from a short write (documented in quorum_journal):
    # the bytes on disk are exactly a record cut short. It is cut, with a warning.
    path, dump, offsets = _journal(tmp_path)
    _flip(path, offsets[-1] + 1)  # length += 4096
    assert JournalFile(path, dump).entries == ENTRIES[:-1]


def test_a_record_cut_short_is_a_torn_tail_and_is_cut(tmp_path, caplog):
    path, dump, offsets = _journal(tmp_path)
    whole = path.read_bytes()
    path.write_bytes(whole[: offsets[-1] + HEAD_BYTES + 5])  # the last append half written
    with caplog.at_level(logging.WARNING):
        journal = JournalFile(path, dump)
    assert journal.entries == ENTRIES[:-1] and "torn tail" in caplog.text
    assert path.stat().st_size == offsets[-1]
    journal.append(*ENTRIES[-1])  # appends go on from the cut
    journal.close()
    assert path.read_bytes() == whole


@pytest.mark.parametrize("zeros", [8, 100, 4096])
def test_zeros_after_the_last_record_are_a_torn_tail(tmp_path, zeros):
    path, dump, _ = _journal(tmp_path)
    whole = path.read_bytes()
    path.write_bytes(whole + bytes(zeros))  # the file grew, the data never reached the disk
    assert JournalFile(path, dump).entries == ENTRIES
    assert path.read_bytes() == whole


def test_a_record_with_an_unwritten_sector_is_torn_even_with_records_after_it(tmp_path):
    # A power cut before the fsync: the file system kept a later block but not an earlier
    # one. Nothing from the unwritten block on was fsynced, so nothing there was acknowledged.
    big = [(b"\x00" + bytes(range(256)) * 8, 13, 4)]
    later = [(b"\x00later", 14, 4)]
    path, dump, offsets = _journal(tmp_path, ENTRIES + big + later)
    data = bytearray(path.read_bytes())
    sector = -(-(offsets[len(ENTRIES)] + 64) // 512) * 512
    data[sector : sector + 512] = bytes(512)
    path.write_bytes(bytes(data))
    assert JournalFile(path, dump).entries == ENTRIES
    assert path.stat().st_size == offsets[len(ENTRIES)]


def test_meta_and_dump_files_are_crc_checked(tmp_path):
    meta = tmp_path / "journal.meta"
    write_blob(meta, META_MAGIC, {"commit_index": 3, "term": 2, "voted_for": None}, replace=True)
    assert read_blob(meta, META_MAGIC)["term"] == 2
    _flip(meta, len(META_MAGIC) + 6)
    with pytest.raises(QuorumStorageError, match="CRC mismatch"):
        JournalFile(tmp_path / "journal", tmp_path / "dump")
    dump = tmp_path / "dump"
    write_blob(dump, DUMP_MAGIC, {"entry0": [b"a", 1, 1], "entry1": [b"b", 2, 1], "commands": [b"c"]},
               replace=True)
    assert read_dump(dump)[2] == [b"c"]
    _flip(dump, len(dump.read_bytes()) - 2)
    with pytest.raises(QuorumStorageError, match="CRC mismatch"):
        read_dump(dump)


def test_journal_completes_a_compaction_interrupted_after_the_dump(tmp_path):
    entries = [(b"\x00cmd%d" % k, k, 1 + k // 4) for k in range(1, 11)]
    path, dump_path, _ = _journal(tmp_path, entries)
    # The dump was written at raft index 6, then the process died before compacting.
    dump = {"entry0": list(entries[4]), "entry1": list(entries[5]), "commands": [b"c"] * 5}
    write_blob(dump_path, DUMP_MAGIC, dump, replace=True)
    reopened = JournalFile(path, dump_path)
    assert reopened.entries == entries[4:]  # the tail past the dump survives
    reopened.close()
    assert JournalFile(path, dump_path).entries == entries[4:]
