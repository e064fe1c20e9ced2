"""`raftlog produce` and `raftlog perf produce` take Kafka's two producer timeouts, request (30 s) and delivery (120 s), and refuse a delivery timeout shorter than linger plus one request before connecting anywhere."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from raftlog.cli.main import main


@pytest.mark.parametrize("command", [["produce", "t"], ["perf", "produce", "-t", "t", "-n", "1"]])
def test_the_timeouts_and_their_defaults(command):
    help_text = CliRunner().invoke(main, [*command, "--help"]).output
    assert "--request-timeout-ms" in help_text and "--delivery-timeout-ms" in help_text
    assert "30000" in help_text and "120000" in help_text


@pytest.mark.parametrize("command", [["produce", "t"], ["perf", "produce", "-t", "t", "-n", "1"]])
def test_a_delivery_timeout_shorter_than_linger_plus_a_request_is_refused(command):
    # An unused port: the check comes before any connection.
    result = CliRunner().invoke(main, [*command, "--bootstrap", "127.0.0.1:1", "--linger-ms", "5",
                                       "--request-timeout-ms", "5000", "--delivery-timeout-ms", "4000"])
    assert result.exit_code == 2, result.output
    assert "--delivery-timeout-ms" in result.output and "5005" in result.output
