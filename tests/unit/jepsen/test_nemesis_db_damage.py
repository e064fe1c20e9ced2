"""The nemesis fault menu names what it promises, `LocalCluster.damage_tail` cuts or flips only the tail of a chosen partition's last segment on a stopped node, `flip_bits` flips bits anywhere in any segment or index file, and a small disk fills up and empties again."""

from __future__ import annotations

import random

import pytest

from jepsen_style_tests.db import DbError, LocalCluster
from jepsen_style_tests.nemesis import FAULT_NAMES, NemesisError, faults


def test_fault_menu_covers_every_name_with_start_and_stop():
    menu = faults(FAULT_NAMES, damage_node=2)
    starts = {(f.start["f"], str(f.start.get("value"))) for f in menu}
    assert ("start-kill", "leader") in starts and ("start-kill", "controller") in starts
    assert ("start-partition", "isolate-controller") in starts and ("start-partition", "majorities-ring") in starts
    assert ("corrupt-tail", str({"node": 2, "mode": "bitflip"})) in starts
    assert ("bitflip", str({"node": 2, "flips": 3})) in starts
    assert ("start-disk-full", str({"node": 2})) in starts
    assert ("power-loss", str({"node": 2})) in starts and ("power-loss", str({"nodes": "all"})) in starts
    assert all(f.stop["f"].startswith("stop-") for f in menu)
    assert {f.name for f in menu} >= {"power-loss", "disk-full", "bitflip"}
    with pytest.raises(NemesisError):
        faults(["corrupt"])
    with pytest.raises(NemesisError):
        faults(["flood"])


def _segments(db: LocalCluster, node: int, payload: dict[str, bytes]) -> None:
    for key, data in payload.items():
        directory = db.data_dir(node) / "partitions" / key
        directory.mkdir(parents=True)
        (directory / f"{0:020d}.log").write_bytes(b"old" * 10)
        (directory / f"{30:020d}.log").write_bytes(data)


def test_damage_tail_torn_and_bitflip(tmp_path):
    with LocalCluster(tmp_path, 3) as db:
        data = bytes(range(256)) * 40
        _segments(db, 2, {"t-0": data, "__consumer_offsets-0": data})
        rng = random.Random(7)
        torn = db.damage_tail(2, mode="torn", rng=rng, keys=["t-0"], max_cut_bytes=100)
        path = db.data_dir(2) / "partitions" / "t-0" / f"{30:020d}.log"
        assert torn["key"] == "t-0" and 1 <= torn["cut_bytes"] <= 100
        assert path.read_bytes() == data[: len(data) - torn["cut_bytes"]]
        flipped = db.damage_tail(2, mode="bitflip", rng=rng, keys=["t-0"], max_cut_bytes=100)
        after = path.read_bytes()
        diff = [i for i, (a, b) in enumerate(zip(after, data)) if a != b]
        assert diff == [flipped["position"]] and flipped["position"] >= len(after) - 100
        assert (db.data_dir(2) / "partitions" / "__consumer_offsets-0" / f"{30:020d}.log").read_bytes() == data
        assert db.damage_tail(1, mode="torn", rng=rng)["skipped"]
        with pytest.raises(DbError):
            db.damage_tail(2, mode="shred", rng=rng)


def test_flip_bits_hits_any_segment_or_index_file_of_a_stopped_node(tmp_path):
    with LocalCluster(tmp_path, 3) as db:
        d = db.data_dir(1) / "partitions" / "t-0"
        d.mkdir(parents=True)
        originals = {}
        for base in (0, 40, 90):
            for suffix in (".log", ".index", ".timeindex"):
                p = d / f"{base:020d}{suffix}"
                p.write_bytes(bytes(range(200)))
                originals[p.name] = p.read_bytes()
        (d / "quorum-state").write_bytes(b"q" * 50)
        seen = set()
        rng = random.Random(3)
        for _ in range(40):
            done = db.flip_bits(1, rng=rng, flips=2)
            path = d / done["file"]
            seen.add(done["file"])
            diff = [i for i, (a, b) in enumerate(zip(path.read_bytes(), originals[done["file"]])) if a != b]
            assert diff and set(diff) <= {pos for pos, _ in done["flips"]}
            path.write_bytes(originals[done["file"]])
        assert {n.rsplit(".", 1)[1] for n in seen} == {"log", "index", "timeindex"}
        assert len({n for n in seen if n.endswith(".log")}) >= 2  # closed segments too
        assert (d / "quorum-state").read_bytes() == b"q" * 50
        assert db.flip_bits(2, rng=rng)["skipped"]


def test_a_small_disk_fills_and_empties(tmp_path):
    with LocalCluster(tmp_path, 3) as db:
        why_not = db.make_small_disk(2, size_bytes=2 << 20)
        if why_not is not None:
            pytest.skip(f"no small disk here: {why_not}")
        where = db.data_dir(2) / "partitions"
        written = db.fill_disk(2)
        assert written > 1 << 20
        with pytest.raises(OSError):
            (where / "more").write_bytes(b"x" * 8192)
        assert db.free_disk(2) and not db.free_disk(2)
        (where / "more").write_bytes(b"x" * 8192)
    assert not any(where.iterdir()) if where.exists() else True  # unmounted on close
