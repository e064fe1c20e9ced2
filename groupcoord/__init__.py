"""Consumer groups and offsets in `__consumer_offsets` (DESIGN §5): Kafka's classic group
protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, static membership) and offset storage.

What lives here:
* `records`     the `__consumer_offsets` key/value codec (canonical CBOR, strict decode) and
                `partition_for_group` (Kafka's `abs(hashCode) % partitions`);
* `state`       one group's state machine (Empty, PreparingRebalance, CompletingRebalance,
                Stable, Dead) and its members;
* `coordinator` the pure coordinator core: handlers take `now_ms` and return records to
                append + a response (or a pending marker answered later), `tick`, replay;
* `assignor`    the client-side assignors (range, roundrobin, sticky, cooperative-sticky);
* `errors`      the typed errors with their wire codes.
The trio shell (`service.py`) appends through the replica manager and owns the waiters.
"""
