"""The node process (layer 3): listeners, the composition of services, config, the metadata quorum.

* `main`: `run_node` builds the services (metadata/, partition/, groupcoord/), injects what they
  need (config values, the metadata quorum, the peer pool) and serves them on the listeners;
* `server`: the native-protocol listener; `http`: /health and /metrics;
* `config`: NodeConfig from TOML, RAFTLOG_* and flags;
* `metadata_quorum`: the metadata quorum's trio API (metadata/quorum.py's port) over `bridge`,
  PySyncObj with our guardrails (the only module that imports pysyncobj or pickle), which
  keeps its journal, meta and dump files in `quorum_journal`'s CRC-checked formats and holds
  strangers on its port to `quorum_gate`'s limits;
* `pidfile`: who runs on a data dir, and that it is private (umask 077, no group/other write).

May import: raftlog.base, metadata, partition, groupcoord. Never raftlog.client or raftlog.cli;
the services below never import this package (the node hands them what they need).
"""
