"""Issue 39, private data: a secure cluster made and run under umask 022 leaves every file 0600 and every directory 0700 (keys, certificates, quorum journal and dump, segments, indexes, checkpoints, pid files), and a node refuses a data dir other users may write."""

from __future__ import annotations

import dataclasses
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from raftlog.cli.secure import SecureMaterial
from raftlog.client import Producer

import node_harness as harness


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The usual umask for what this test makes and the nodes it starts (they inherit it)."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _loose(root: Path) -> list[str]:
    """Every path under `root` (itself included) that group or other may use."""
    found = []
    for path in [root, *root.rglob("*")]:
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue  # a temp file renamed away while we walked
        if stat.S_ISLNK(st.st_mode):
            continue
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077 or (stat.S_ISDIR(st.st_mode) and mode != 0o700):
            found.append(f"{path.relative_to(root)} {mode:04o}")
    return found


def test_a_cluster_under_umask_022_keeps_its_files_private(tmp_path: Path, loose_umask: None) -> None:
    root = tmp_path / "cluster"
    root.mkdir(mode=0o700)
    material, _ = SecureMaterial.ensure(root, [1, 2, 3], ["127.0.0.1"], admin_password="files-" + os.urandom(6).hex())
    with harness.NodeCluster(root, size=3, security=material.admin_security()) as cluster:
        for node_id in cluster.voters:
            cluster.configs[node_id] = dataclasses.replace(cluster.configs[node_id], **material.node_settings(node_id))
        cluster.start_all()
        cluster.wait_ready(timeout_s=60)
        cluster.call(1, "create_topic", name="private", partitions=3, replication_factor=3)
        with Producer(cluster.bootstrap(), security=str(material.client_properties), acks="all") as producer:
            futures = [producer.send("private", b"v%d" % i, key=b"k%d" % i) for i in range(200)]
            for future in futures:
                future.result(timeout=30)
        node_dirs = [cluster.configs[n].data_dir for n in cluster.voters]
        for data_dir in node_dirs:  # what a running node made: pid file, quorum, segments
            assert (data_dir / "node.pid").exists() and (data_dir / "quorum" / "journal").exists()
            assert list(data_dir.rglob("*.log")), f"no segment under {data_dir}"
        assert _loose(root) == []
        assert all(code == 0 for code in cluster.stop_all().values())
    assert _loose(root) == []  # and what a clean stop wrote (quorum meta, checkpoints)


def test_a_node_refuses_a_data_dir_others_may_write(tmp_path: Path) -> None:
    with harness.NodeCluster(tmp_path / "c", size=1) as cluster:
        data_dir = cluster.configs[1].data_dir
        data_dir.mkdir(parents=True)
        data_dir.chmod(0o777)
        process = cluster.start(1)
        assert process.proc is not None
        assert process.proc.wait(60) != 0
        log = (data_dir / "node.log").read_text()
        assert f"{data_dir}: data dir has mode 0777: other users may write it" in log, log
        assert not (data_dir / "meta.properties").exists()  # refused before writing anything


def test_cluster_up_refuses_a_data_dir_others_may_write(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    done = subprocess.run([sys.executable, "-m", "raftlog.cli", "cluster", "up", "--data-dir", str(root),
                           "--no-console"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"{root}: data dir has mode 0777: other users may write it" in done.stderr, done.stderr
    assert list(root.iterdir()) == []  # refused before making anything
