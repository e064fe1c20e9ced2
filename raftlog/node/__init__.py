"""The node process (layer 3): listeners, the composition of services, config, the quorum bridge.

* `main`: `run_node` builds the services (metadata/, partition/, groupcoord/), injects what they
  need (config values, the metadata quorum, the peer pool) and serves them on the listeners;
* `server`: the native-protocol listener; `http`: /health and /metrics;
* `config`: NodeConfig from TOML, RAFTLOG_* and flags; `bridge`: the PySyncObj metadata quorum
  (the only module that imports pysyncobj or pickle).

May import: raftlog.base, metadata, partition, groupcoord. Never raftlog.client or raftlog.cli;
the services below never import this package (the node hands them what they need).
"""
