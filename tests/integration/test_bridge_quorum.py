"""The metadata quorum (raftlog.node.metadata_quorum over the PySyncObj bridge): elects, commits everywhere, redirects, fails over on SIGKILL, replays after restarts, cuts a torn journal tail and refuses a damaged one."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import trio

from metadata.quorum import (
    CommandTooLargeError,
    NotQuorumLeaderError,
    ProposalTimedOutError,
    QuorumNotRunningError,
    QuorumStorageError,
)
from raftlog.node.metadata_quorum import MetadataQuorum, QuorumConfig


import bridge_node as harness
MAX_COMMAND = bytes(range(256)) * 256  # exactly max_command_bytes (64 KiB), worst-case pickling


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    clusters: list[Any] = []

    def make(size: int, **kwargs: Any) -> Any:
        cluster = harness.Cluster(tmp_path / f"cluster{len(clusters)}", size, **kwargs)
        clusters.append(cluster)
        return cluster

    try:
        yield make
    finally:
        for cluster in clusters:
            cluster.stop_all()


def _wait_applied(node: Any, expected: list[bytes], timeout_s: float = 10.0) -> None:
    node.wait_for(lambda n: n.applied() == expected, timeout_s, f"{len(expected)} commands")


def test_three_voters_commit_everywhere_and_redirect(make_cluster: Callable[..., Any]) -> None:
    cluster = make_cluster(3).start_all()
    leader_id = cluster.wait_leader()
    leader = cluster.nodes[leader_id]
    commands = [b"create-topic:a", b"\x00\xff" * 100, MAX_COMMAND]
    for expected_index, command in enumerate(commands, start=1):
        reply = leader.propose(command)
        assert reply == {**reply, "event": "proposed", "index": expected_index}
    for node in cluster.nodes.values():
        _wait_applied(node, commands)

    follower = next(n for n in cluster.nodes.values() if n.node_id != leader_id)
    reply = follower.propose(b"on-a-follower")
    assert (reply["event"], reply["code"], reply["leader_id"]) == (
        "error",
        "NOT_CONTROLLER",
        leader_id,
    )
    reply = leader.propose(MAX_COMMAND + b"!")
    assert (reply["event"], reply["code"]) == ("error", "MESSAGE_TOO_LARGE")  # CommandTooLargeError

    status = leader.status()
    assert status["is_leader"] and status["has_quorum"] and status["leader_id"] == leader_id
    assert status["commit_index"] == 3 and status["term"] >= 1
    assert set(status["voters"]) == {"1", "2", "3"}
    assert follower.applied() == commands  # nothing from the refused proposals


def test_sigkill_leader_fails_over_and_restarted_voter_catches_up(
    make_cluster: Callable[..., Any],
) -> None:
    # Small compaction threshold: the new leader compacts while the old one is down, so the
    # restarted voter must install a dump (our CBOR format) sent over the wire.
    cluster = make_cluster(3, log_compaction_min_entries=8).start_all()
    old_leader_id = cluster.wait_leader()
    commands = [b"before-%d" % k for k in range(3)]
    for command in commands:
        assert cluster.nodes[old_leader_id].propose(command)["event"] == "proposed"

    cluster.nodes[old_leader_id].kill()
    new_leader_id = cluster.wait_leader(timeout_s=8.0, exclude=old_leader_id)
    assert new_leader_id != old_leader_id
    new_leader = cluster.nodes[new_leader_id]
    for k in range(12):
        command = b"after-%d" % k
        reply = new_leader.propose(command)
        assert reply["event"] == "proposed", reply
        commands.append(command)
    for node in cluster.live():
        _wait_applied(node, commands)

    restarted = cluster.start(old_leader_id)
    restarted.wait_ready()
    _wait_applied(restarted, commands)
    # It had 3 commands; the leader's journal no longer reaches back that far.
    assert "loaded dump" in (restarted.data_dir / "stderr.log").read_text()
    assert cluster.wait_leader() == new_leader_id
    reply = new_leader.propose(b"after-restart")
    assert reply["event"] == "proposed"
    commands.append(b"after-restart")
    for node in cluster.live():
        _wait_applied(node, commands)


def test_restarting_all_voters_replays_the_same_list(make_cluster: Callable[..., Any]) -> None:
    cluster = make_cluster(3).start_all()
    leader_id = cluster.wait_leader()
    commands = [b"cmd-%d" % k for k in range(6)]
    for command in commands:
        assert cluster.nodes[leader_id].propose(command)["event"] == "proposed"
    for node in cluster.nodes.values():
        _wait_applied(node, commands)

    # Graceful stop (SIGTERM) of all three, then restart.
    for node in list(cluster.nodes.values()):
        assert node.terminate() == 0
        assert node._find("stopped")
    cluster.start_all()
    for node in cluster.nodes.values():
        _wait_applied(node, commands)
    leader_id = cluster.wait_leader()
    assert cluster.nodes[leader_id].propose(b"second-life")["event"] == "proposed"
    commands.append(b"second-life")
    for node in cluster.nodes.values():
        _wait_applied(node, commands)

    # kill -9 of all three, then restart: every acknowledged command is still there.
    cluster.stop_all()
    cluster.start_all()
    for node in cluster.nodes.values():
        _wait_applied(node, commands)
    leader_id = cluster.wait_leader()
    assert cluster.nodes[leader_id].propose(b"third-life")["index"] == len(commands) + 1


async def _wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    with trio.fail_after(timeout_s):
        while not predicate():
            await trio.sleep(0.01)


async def test_single_voter_in_process_commits_and_replays(tmp_path: Path) -> None:
    port = harness.free_ports(1)[0]
    config = QuorumConfig(
        node_id=7,
        self_address=f"127.0.0.1:{port}",
        peers={},
        data_dir=tmp_path,
        password="secret",
        log_compaction_min_entries=4,  # exercise dump + journal compaction on restart
    )
    trio_thread = threading.get_ident()

    async def one_life(expect_replayed: list[bytes], new: list[bytes]) -> list[bytes]:
        applied: list[bytes] = []
        leaders: list[tuple[int | None, int]] = []

        def on_commit(index: int, command: bytes) -> None:
            assert threading.get_ident() == trio_thread
            assert index == len(applied) + 1
            applied.append(command)

        quorum = MetadataQuorum(
            config, on_commit=on_commit, on_leader_change=lambda *a: leaders.append(a)
        )
        with pytest.raises(QuorumNotRunningError):
            await quorum.propose(b"too-early", timeout_s=1)
        async with trio.open_nursery() as nursery:
            await nursery.start(quorum.run)
            await _wait_until(lambda: quorum.is_leader)
            assert quorum.leader_id == 7 and quorum.has_quorum
            assert leaders[-1] == (7, quorum.term)
            await _wait_until(lambda: len(applied) >= len(expect_replayed))
            assert applied == expect_replayed
            for command in new:
                index = await quorum.propose(command, timeout_s=5)
                assert index == len(applied) and applied[-1] == command  # on_commit came first
            with pytest.raises(CommandTooLargeError):
                await quorum.propose(b"x" * (64 * 1024 + 1), timeout_s=5)
            assert quorum.commit_index == len(applied)
            assert quorum.status()["last_applied"] == len(applied)
            nursery.cancel_scope.cancel()
        return applied

    first = await one_life([], [b"one-%d" % k for k in range(10)])
    second = await one_life(first, [b"two"])
    assert second == first + [b"two"]
    assert (tmp_path / "quorum" / "dump").exists()


async def test_timeout_leaves_outcome_unknown_and_refusal_without_leader(tmp_path: Path) -> None:
    ports = harness.free_ports(3)
    applied: list[bytes] = []
    solo = QuorumConfig(
        node_id=1, self_address=f"127.0.0.1:{ports[0]}", peers={}, data_dir=tmp_path / "a",
        password="secret",
    )
    quorum = MetadataQuorum(
        solo, on_commit=lambda i, c: applied.append(c), on_leader_change=lambda *a: None
    )
    # A voter whose two peers never start: never leader, so it refuses and names no leader.
    lonely = QuorumConfig(
        node_id=1, self_address=f"127.0.0.1:{ports[1]}", peers={2: f"127.0.0.1:{ports[2]}",
        3: f"127.0.0.1:{harness.free_ports(1)[0]}"}, data_dir=tmp_path / "b", password="secret",
    )
    refuser = MetadataQuorum(lonely, on_commit=lambda i, c: None, on_leader_change=lambda *a: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(quorum.run)
        await nursery.start(refuser.run)
        await _wait_until(lambda: quorum.is_leader)
        with pytest.raises(ProposalTimedOutError):
            await quorum.propose(b"maybe", timeout_s=0)
        # Unknown outcome: it was queued, so it commits after all (callers dedupe by request id).
        await _wait_until(lambda: applied == [b"maybe"])
        with pytest.raises(NotQuorumLeaderError) as info:
            await refuser.propose(b"nope", timeout_s=1)
        assert info.value.leader_id is None and not refuser.has_quorum
        nursery.cancel_scope.cancel()


def test_config_requires_a_password(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="password"):
        QuorumConfig(node_id=1, self_address="127.0.0.1:1", peers={}, data_dir=tmp_path,
                     password="")


async def test_torn_journal_tail_is_cut_on_restart(tmp_path: Path) -> None:
    port = harness.free_ports(1)[0]
    config = QuorumConfig(node_id=1, self_address=f"127.0.0.1:{port}", peers={},
                          data_dir=tmp_path, password="secret")

    async def life(new: list[bytes]) -> list[bytes]:
        applied: list[bytes] = []
        quorum = MetadataQuorum(config, on_commit=lambda i, c: applied.append(c),
                                on_leader_change=lambda *a: None)
        async with trio.open_nursery() as nursery:
            await nursery.start(quorum.run)
            await _wait_until(lambda: quorum.is_leader)
            for command in new:
                await quorum.propose(command, timeout_s=5)
            nursery.cancel_scope.cancel()
        return applied

    first = await life([b"a", b"b", b"c"])
    journal = tmp_path / "quorum" / "journal"
    size = journal.stat().st_size
    with open(journal, "ab") as f:  # half a record, as a power cut mid-write would leave
        f.write(b"\x40\x00\x00\x00\x12\x34\x56\x78" + b"\x01" * 10)
    second = await life([b"d"])
    assert second == first + [b"d"] and first == [b"a", b"b", b"c"]
    data = journal.read_bytes()
    assert len(data) > size and b"\x12\x34\x56\x78" + b"\x01" * 10 not in data  # cut, appended


async def test_a_flipped_byte_mid_journal_stops_the_voter_and_nothing_is_applied(tmp_path: Path) -> None:
    port = harness.free_ports(1)[0]
    config = QuorumConfig(node_id=1, self_address=f"127.0.0.1:{port}", peers={},
                          data_dir=tmp_path, password="secret")
    applied: list[bytes] = []
    commands = [b"command-%02d" % k for k in range(12)]
    quorum = MetadataQuorum(config, on_commit=lambda i, c: applied.append(c),
                            on_leader_change=lambda *a: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(quorum.run)
        await _wait_until(lambda: quorum.is_leader)
        for command in commands:
            await quorum.propose(command, timeout_s=5)
        nursery.cancel_scope.cancel()
    assert applied == commands
    journal = tmp_path / "quorum" / "journal"
    data = bytearray(journal.read_bytes())
    at = data.index(b"command-05")
    data[at + 8] ^= 0x10  # "command-05" becomes "command-%5": a CRC mismatch mid-journal
    journal.write_bytes(bytes(data))

    applied.clear()
    damaged = MetadataQuorum(config, on_commit=lambda i, c: applied.append(c),
                             on_leader_change=lambda *a: None)
    async with trio.open_nursery() as nursery:
        with pytest.raises(QuorumStorageError, match="not a torn tail") as info:
            await nursery.start(damaged.run)
    assert str(journal) in str(info.value)
    assert applied == [] and journal.read_bytes() == bytes(data)  # nothing applied, nothing cut
