"""Cluster metadata (DESIGN §3): canonical-CBOR metadata records (`records`), the immutable
image they replay into (`image`, `delta`), topic configs (`topic_config`), and the
controller's pure decisions (`controller`: placement, fencing, validation); the metadata
service that runs them on every node (`service`, composed of `loader`, `active_controller`,
`log_fetch`, `broker_lifecycle`); and the quorum port (`quorum`) that the node implements
with PySyncObj in raftlog/node/metadata_quorum.py. Layer 2, the lowest of the three: may import
`raftlog.base` only.
"""
