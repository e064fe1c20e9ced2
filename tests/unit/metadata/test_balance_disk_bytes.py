"""The controller's balancer weighs disk bytes per broker (issue 44): the partition sizes
leaders report with their heartbeats (`record_partition_bytes`) make a plan where replica and
leader counts alone see nothing to move; malformed rows are ignored."""

from __future__ import annotations

import pytest

from metadata.balancer import loads

pytestmark = pytest.mark.unit


def test_reported_sizes_make_the_balancer_even_out_bytes(controller_cluster):
    cl = controller_cluster(brokers=4)
    cl.commit(cl.c.create_topic("t", 8, 2, now_ms=0))
    assert cl.c.balance(dry_run=True, now_ms=0).response == []  # counts are even
    t = cl.image.topic("t")
    heavy = {p.partition for p in t.partitions if 1 in p.replicas and p.preferred_leader != 1}
    sizes = {("t", p): (1000 if p in heavy else 10) << 20 for p in range(8)}  # MiB: over the floor
    cl.c.record_partition_bytes([["t", p, n] for (_, p), n in sizes.items()]
                                + [["t", "x", 5], "junk", ["t", 0, -1]])
    before = loads(cl.image, sizes)
    rows = cl.c.balance(dry_run=True, now_ms=0).response
    assert rows and all("bytes" in r["reason"] for r in rows), rows

    def spread(values):  # total distance from the mean
        values = list(values)
        return sum(abs(v - sum(values) / len(values)) for v in values)

    planned = {("t", r["partition"]): r["replicas"] for r in rows}
    after_bytes = {b: sum(sizes[k] for k, reps in ((k, planned.get(k)) for k in sizes)
                          if b in (reps if reps is not None else t.partitions[k[1]].replicas))
                   for b in (1, 2, 3, 4)}
    assert spread(after_bytes.values()) < spread(b.bytes for b in before.values())
