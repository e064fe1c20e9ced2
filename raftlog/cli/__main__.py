"""`python -m raftlog.cli ...` is the `raftlog` command (how `raftlog cluster up` starts nodes)."""

from raftlog.cli.main import main

main()
