"""Consumer groups and offsets in `__consumer_offsets` (DESIGN §5): Kafka's classic group
protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, static membership) and offset storage.
Layer 2, above `metadata` and `partition`: may import `raftlog.base`, `metadata` and
`partition`, never the node (the node injects what the service needs).

What lives here:
* `records`     the `__consumer_offsets` key/value codec (canonical CBOR, strict decode);
* `state`       one group's state machine (Empty, PreparingRebalance, CompletingRebalance,
                Stable, Dead) and its members;
* `coordinator` the pure coordinator core's public API (`GroupCoordinator`): handlers take
                `now_ms` and return records to append + a response (or a pending marker
                answered later); it runs the functions of
  `context`     (state, effects, routing, timers), `membership` (join, sync, heartbeat,
                leave, the rebalance, `tick`), `offsets` (commit, fetch), `admin` (list,
                describe, delete, reset) and `replay` (load and unload a partition);
* KIP-848 consumer groups (docs/kip848.md), beside the classic ones in the same core:
  `consumer_group_records` (their record kinds 3-8, and the codec for every kind),
  `consumer_group` (one group's state and reconciliation), `consumer_assignor` (uniform,
  range), `consumer_group_ops` (heartbeat, describe, timers, commit fencing, replay),
  `consumer_group_classic` (the classic <-> consumer conversions of Kafka 4's online upgrade,
  group.consumer.migration.policy), `classic_member` (classic members inside a consumer
  group: JoinGroup, SyncGroup, Heartbeat, LeaveGroup), `consumer_group_service` (the shell's
  two ops);
* `errors`      the package's own exception (a bad `__consumer_offsets` record);
* `service`     the trio shell: appends through the replica manager, owns the waiters, the
                timer and partition ownership;
* `partition_load` replaying an internal topic's partition into a core (both shells);
* `txn_records`, `txn_coordinator`, `txn_service`: the transaction coordinator over
                `__transaction_state` (issue 42; docs/transactions.md), same shape.
Which partition holds a group is `raftlog.base.topics.partition_for_group`; the client-side
assignors are `raftlog.client.assignor`.
"""
