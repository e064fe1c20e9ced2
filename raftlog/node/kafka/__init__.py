"""The Kafka wire-protocol listener (DESIGN §9, issue 15): a second front door of the node,
beside the native one, over the same services. listener.py says how it works and how an API
is added; codec.py the framing and codecs; one module per API family (versions, metadata,
produce, fetch, admin, configs, groups).

Layer: node. May import raftlog.base, metadata/partition/groupcoord (their services' public
methods, `metadata.topic_config`, `partition.port.RecordsSlice`) and kafka-python's message
classes; nothing above the node.
"""
