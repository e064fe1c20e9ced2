"""The Confluent-compatible Schema Registry every node serves (issue 45).

Pure cores: `compat.py` (levels; `avro.py`, `json_schema.py`, `protobuf.py` the per-format
parsing, canonical forms and compatibility rules), `state.py` (the state machine replayed from
`_schemas`, deciding writes as records + answer), `api.py` (Confluent's REST routes over the
`RegistryPort`). Shells: `service.py` (tails `_schemas`, one writer: the partition's leader),
`log.py` (the partition behind the `SchemasLog` Protocol), `listener.py` (HTTP on Hypercorn's
trio worker), `auth.py` (Basic auth with the cluster's SCRAM users).

May import: `raftlog.base`, `partition.batch`; never the rest of the node, the client or the CLI.
"""
