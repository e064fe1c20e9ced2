"""The fault-run command line refuses bad settings (counts below 1, unknown nemeses) before anything starts; a fault run kept to a port range: the command line reads --ports LOW-HIGH strictly, and the ports picked are free ones of the range, never one a listener holds."""

import socket

import pytest

from jepsen_style_tests.__main__ import _parser, _port_range, main
from jepsen_style_tests.db import DbError, ports_in


@pytest.mark.parametrize("text,want", [("27000-27499", (27000, 27499)), ("27000-27000", (27000, 27000)), (None, None)])
def test_port_range_reads_low_high(text, want):
    assert _port_range(_parser(), text) == want


@pytest.mark.parametrize("text", ["27000", "27499-27000", "0-10", "a-b", "27000-70000", "-27000"])
def test_a_bad_port_range_is_a_usage_error(text):
    with pytest.raises(SystemExit) as exc:
        _port_range(_parser(), text)
    assert exc.value.code == 2


def test_ports_in_skips_held_ports_and_says_when_too_few():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        low, high = max(1024, port - 20), min(65535, port + 20)
        chosen = ports_in((low, high), 10)
        assert port not in chosen and len(set(chosen)) == 10
        assert all(low <= p <= high for p in chosen) and chosen == sorted(chosen)
        with pytest.raises(DbError, match="free ports"):
            ports_in((port, port), 1)
    with pytest.raises(DbError, match="bad port range"):
        ports_in((5, 4), 1)


@pytest.mark.parametrize("argv,message", [
    (["--partitions", "0"], "must be at least 1"),
    (["--nodes", "-1"], "must be at least 1"),
    (["--nemesis", "kil,pause"], "unknown nemesis kil; known: kill"),
])
def test_bad_run_settings_are_usage_errors_before_anything_starts(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err
