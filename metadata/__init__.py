"""Cluster metadata: canonical-CBOR metadata records, the immutable image they replay into,
and the controller's pure decisions (placement, fencing, validation). The quorum that
orders the records is PySyncObj, reached only through raftlog/node/bridge.py.
"""
