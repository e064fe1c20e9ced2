"""The `raftlog` command line: node and local-cluster commands, topic, group, partition and
record commands, perf tools (layer 4: may import raftlog.node, raftlog.client, raftlog.base).

`main.py` builds the click root group from the command modules (`records`, `groups`,
`partitions`); `common.py` holds what they share; `cluster.py` supervises a local cluster;
`perf.py` drives the perf tests. Command modules import `common`, never each other.
"""
