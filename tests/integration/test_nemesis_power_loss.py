"""The power-loss nemesis: its fault menu, a node's lazy disk losing what it did not fsync, and the runner leaving the fault out, saying why, where no FUSE filesystem can be mounted."""

from __future__ import annotations

import io
import os

import pytest

import jepsen_style_tests.db as db_module
from jepsen_style_tests.db import DbError, LocalCluster
from jepsen_style_tests.lazyfs import is_mounted
from jepsen_style_tests.nemesis import NemesisError, faults
from jepsen_style_tests.runner import RunConfig, _mount_lazy_disks, power_node_for


def test_fault_menu_has_power_loss_of_one_node_and_of_all():
    menu = {f.start["f"]: f for f in faults(["power-loss"], power_node=2)}
    assert menu["power-loss"].start["value"] == {"node": 2} and menu["power-loss"].stop == {"f": "stop-kill"}
    (everyone,) = faults(["power-loss-all"])
    assert everyone.start == {"f": "power-loss", "value": {"nodes": "all"}} and everyone.name == "power-loss"
    with pytest.raises(NemesisError, match="power_node"):
        faults(["power-loss"])


def test_power_node_is_the_damage_node_unless_disk_full_owns_its_disk():
    assert power_node_for(RunConfig(nemesis=("power-loss",), damage_node=2, nodes=3)) == 2
    assert power_node_for(RunConfig(nemesis=("power-loss", "disk-full"), damage_node=3, nodes=3)) == 1
    assert power_node_for(RunConfig(nemesis=("power-loss", "disk-full"), damage_node=1, nodes=1)) is None


def test_runner_leaves_power_loss_out_and_says_why_without_fuse(tmp_path, monkeypatch):
    monkeypatch.setattr(db_module, "cannot_mount", lambda: "/dev/fuse does not exist")
    out = io.StringIO()
    with LocalCluster(tmp_path, 3) as db:
        config = RunConfig(nemesis=("kill", "power-loss", "power-loss-all"), damage_node=1, power_node=1)
        after = _mount_lazy_disks(db, config, out)
        assert after.nemesis == ("kill",)
        assert db.lazy_disks == {}
    assert "power-loss,power-loss-all left out: /dev/fuse does not exist" in out.getvalue()


def test_a_lazy_disk_loses_what_a_stopped_node_did_not_fsync(tmp_path):
    with LocalCluster(tmp_path, 3) as db:
        why_not = db.make_lazy_disk(2)
        if why_not is not None:
            pytest.skip(f"cannot mount a FUSE filesystem here: {why_not}")
        data = db.data_dir(2)
        (data / "quorum").mkdir()
        with open(data / "quorum" / "journal", "wb") as handle:
            handle.write(b"synced")
            handle.flush()
            os.fsync(handle.fileno())
            handle.write(b"+unsynced")
        for directory in (data, data / "quorum"):
            fd = os.open(directory, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        (data / "partitions").mkdir()  # never made durable
        with pytest.raises(DbError, match="no lazy disk"):
            db.lose_power(1)
        dropped = db.lose_power(2)
        assert dropped["node"] == 2 and dropped["undone_ops"] == 1 and dropped["rolled_back_files"] == 1
        assert sorted(os.listdir(data)) == ["quorum"]
        assert (data / "quorum" / "journal").read_bytes() == b"synced"
        assert (tmp_path / "node-2.backing" / "quorum" / "journal").read_bytes() == b"synced"
    assert os.listdir(data) == []  # unmounted on close
    db.remove_data(2)
    assert not (tmp_path / "node-2.backing").exists() and not data.exists()


def test_a_small_disk_inside_a_lazy_data_dir_survives_a_power_loss(tmp_path):
    with LocalCluster(tmp_path, 3) as db:
        why_not = db.make_lazy_disk(1)
        if why_not is not None:
            pytest.skip(f"cannot mount a FUSE filesystem here: {why_not}")
        why_not = db.make_small_disk(1, size_bytes=2 << 20)
        if why_not is not None:
            pytest.skip(f"no small disk here: {why_not}")
        where = db.data_dir(1) / "partitions"
        (where / "seg").write_bytes(b"kept: a tmpfs loses nothing here")
        (db.data_dir(1) / "unsynced").write_bytes(b"x")
        assert db.lose_power(1)["undone_ops"] == 1  # the unsynced name; the mount point's is durable
        assert is_mounted(where) and (where / "seg").read_bytes().startswith(b"kept")
        assert db.fill_disk(1) > 1 << 20 and db.free_disk(1)
    assert not is_mounted(where) and not is_mounted(db.data_dir(1))
