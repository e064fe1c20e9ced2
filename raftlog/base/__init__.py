"""The shared bottom layer: what every other layer may import, and which imports nothing of ours.

* `errors`: the one registry of wire error codes (definite failures vs unknown outcomes);
* `protocol`: the native protocol's frame codec and request/response shapes (PROTOCOL.md);
* `peer`: address-keyed links between nodes over that protocol;
* `aio`: small trio helpers (`acquire_free`);
* `eventlog`: structured one-line logging; `metrics`: metric primitives for /metrics;
* `topics`: internal topic names and the group -> `__consumer_offsets` partition hash;
* security shared by clients and nodes: `sasl` (SCRAM and PLAIN exchanges), `peer_auth` (the
  HMAC peer handshake), `acl` (Kafka's ACL model), `tls` (contexts, certificate principals),
  `certs` (cluster CA and certificates), `client_properties` (the client properties file).

May import: the standard library and third-party packages only (import-linter checks it).
"""
