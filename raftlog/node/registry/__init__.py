"""The Confluent-compatible Schema Registry every node serves (issue 45).

Pure cores: `compat.py` (levels; `avro.py`, `json_schema.py`, `protobuf.py` the per-format
parsing, canonical forms and compatibility rules), `state.py` (the state machine replayed from
`_schemas`, deciding writes as records + answer), `api.py` (Confluent's REST routes over the
`RegistryPort`). Shells: `service.py` (tails `_schemas`, one writer: the partition's leader),
`log.py` (the partition behind the `SchemasLog` Protocol), `listener.py` (HTTP on Hypercorn's
trio worker), `auth.py` (Basic auth with the cluster's SCRAM users).

The REST proxy (Confluent REST Proxy v3/v2) on the same listener: `proxy.py` (topics, produce),
`proxy_groups.py` (v2 consumer instances, v3 groups and lags), `consumers.py` (the instances'
state, pure), `broker.py` (the `BrokerPort` Protocol: the proxy's one way to produce, fetch,
list offsets and run group and admin ops; `NodeBroker` over the node's client handlers and the
peer op `proxy_call`). `serde.py` / `protobuf_codec.py`: Confluent's wire format (also used by
the console and Spark, with `remote.py`, a registry read over HTTP). `openapi.py`: the
OpenAPI document served at /openapi.json.

May import: `raftlog.base`, `partition.batch`, `partition.keyed`; never the rest of the node, the client or the CLI.
"""
