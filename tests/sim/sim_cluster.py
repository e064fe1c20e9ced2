"""Deterministic simulation of one partition's Raft group (partition/raft.py) in memory.

A seeded event queue drives N replicas: per-replica ticks, a network that drops, delays,
duplicates and reorders messages and can be cut (isolate a node, split in two, one-way
links), fsyncs of the quorum state and of the log that complete after a random delay,
crashes that lose the unflushed tail of the log and any quorum state not yet confirmed
durable, crashes with storage damage (a random suffix of the FLUSHED log is gone too, and
the replica restarts with `needs_catch_up` as partition/replica.py sets it from its log
recovery; at most one replica is flagged at a time, so the unflagged replicas can still
elect), restarts, clients writing to whoever accepts writes, and leadership transfers.
Like the replica manager, each node watches its links to the others (raft.py contract 11,
"Quiescence"): a link that breaks (a cut, the other node crashing) wakes the quiescent
followers across it at once (and a crashed node's port refuses connections:
`leader_unreachable(refused=True)` at once); after an election timeout of silence the node
calls `leader_unreachable` and `follower_silent` about the other side (and `follower_silent` again
for leaderships it wins while the link stays down), and `follower_heard` once it heals; while
the link to its leader is up, a follower about to run may hear `leader_alive` first.
Messages dropped at random model losses inside a live link (a full inbox, a dropped frame):
the watch does not see those.

The shell here obeys the contract of partition/raft.py (effects in order; nothing after a
PersistQuorumState until it is confirmed is ever returned by the core, so the sim just
schedules the fsync). Invariants are checked after every step, incrementally so the loop
stays fast:

* one leader per epoch (LeadershipChanged and AppendControl), one vote granted per voter
  per epoch (the VoteResponses it sends: a grant must outlive a crash);
* an (offset, epoch) names one entry everywhere, ever (log matching at the data level);
* `committed` is the prefix below the largest high watermark any leader announced; every
  replica's log equals it below that replica's own high watermark (so any two replicas agree
  below the smaller of their HWs), and a high watermark never goes back;
* no replica ever truncates (Raft-driven) an entry equal to the committed one;
* the committed prefix is flushed on a majority at all times, counting a damaged replica
  that has not caught up yet as holding what it held before the damage (it may not vote
  until it holds it again);
* at the end (everything healed and restarted, run to quiescence) all logs are identical,
  every acknowledged write sits at its offsets, and no write appears twice.

A failure raises SimFailure naming the seed and step and the last events; rerun with
`SIM_SEED=<seed>` to replay it exactly.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass, field

from partition.raft import (
    AppendControl,
    AppendMembership,
    AppendReplicated,
    Flush,
    FetchResponse,
    HighWatermarkChanged,
    LeadershipChanged,
    LogState,
    PersistQuorumState,
    QuorumState,
    RaftConfig,
    RaftCore,
    RaftStateError,
    Role,
    Send,
    TruncateTo,
    VoteResponse,
)

TICK_UNITS = 10  # sim time units per raft tick

SIM_RAFT_CONFIG = RaftConfig(
    election_timeout_ticks=10,
    fetch_max_wait_ticks=2,
    fetch_request_timeout_ticks=4,
    check_quorum_ticks=15,
    transfer_timeout_ticks=10,
    begin_quorum_resend_ticks=3,
)

# event kinds
_TICK, _DELIVER, _FLUSH, _PERSIST, _CLIENT, _NEMESIS, _CRASH = range(7)
_KIND_NAMES = ("tick", "deliver", "flush", "persist", "client", "nemesis", "crash")


class SimFailure(AssertionError):
    pass


@dataclass
class SimParams:
    n: int = 3
    drop_p: float = 0.05
    dup_p: float = 0.03
    delay_max_units: int = 25
    long_delay_p: float = 0.02
    flush_delay_max_units: int = 20
    persist_delay_max_units: int = 20
    crash_in_fsync_p: float = 0.03  # a quorum-state fsync is cut short by a crash
    damage_p: float = 0.3  # a nemesis crash also damages storage (cuts flushed entries)
    client_every_units: int = 6
    # Clients go quiet now and then (their own random stream), so groups quiesce under faults.
    client_pause_p: float = 0.01  # per client event
    client_pause_units: tuple[int, int] = (150, 900)
    # A follower about to run hears `leader_alive` while its leader's link is up, at this rate
    # (its own random stream). More often makes elections, and the planted bugs they expose,
    # rarer: at 0.3 _SendsBeforePersist was first caught at seed 921 instead of 249.
    leader_alive_p: float = 0.1
    nemesis_every_units: int = 150
    max_fetch_entries: int = 8
    max_pending_writes: int = 64
    quiesce_max_steps: int = 40_000
    config: RaftConfig = field(default_factory=lambda: SIM_RAFT_CONFIG)
    core_cls: type = RaftCore  # tests plant bugs with a subclass to prove the checks bite
    spares: int = 0  # nodes outside the initial voters (sim_membership.py adds and removes them)
    # The metadata record names this voter the first leader (raft.py "First term"); None:
    # the group elects its first leader. Its leadership reports update the modelled record.
    first_leader: int | None = None


class MemLog:
    """The partition log's semantics in memory: one entry per offset, (epoch, write id)."""

    __slots__ = ("epochs", "ids", "flushed", "members")

    def __init__(self) -> None:
        self.epochs: list[int] = []
        self.ids: list[int] = []
        self.flushed = 0
        self.members: dict = {}  # offset -> Membership of a membership control batch

    def cut(self, offset: int) -> None:
        del self.epochs[offset:]
        del self.ids[offset:]
        for off in [o for o in self.members if o >= offset]:
            del self.members[off]

    def memberships(self, lo: int = 0, hi: int | None = None) -> tuple:
        hi = self.end if hi is None else hi
        return tuple(sorted((o, m) for o, m in self.members.items() if lo <= o < hi))

    @property
    def end(self) -> int:
        return len(self.ids)

    def epoch_cache(self) -> tuple[tuple[int, int], ...]:
        cache = []
        last = None
        for off, ep in enumerate(self.epochs):
            if ep != last:
                cache.append((ep, off))
                last = ep
        return tuple(cache)


class SimNode:
    __slots__ = (
        "id", "core", "log", "up", "incarnation", "durable_qs", "pending_persists",
        "hw", "pending_writes", "flush_end", "flush_cap", "lost", "silent_ticks",
    )  # fmt: skip

    def __init__(self, node_id: int) -> None:
        self.id = node_id
        self.core: RaftCore | None = None
        self.log = MemLog()
        self.up = False
        self.incarnation = 0
        self.durable_qs = QuorumState()
        self.pending_persists: list[QuorumState] = []
        self.hw = 0  # the HW this incarnation announced last
        self.pending_writes: deque = deque()
        self.flush_end = -1  # log end when the outstanding flush was issued
        self.flush_cap = -1
        self.lost: dict[int, tuple[int, int]] = {}  # offset -> (epoch, id) cut by damage
        self.silent_ticks: dict[int, int] = {}  # other node -> ticks its link has been down


class Cluster:
    def __init__(self, seed: int, params: SimParams | None = None) -> None:
        self.seed = seed
        self.p = params or SimParams()
        self.rng = random.Random(seed)
        # Damage draws from its own stream, so adding it left the other faults' schedule
        # (and the seeds that catch the older planted bugs) as it was.
        self.damage_rng = random.Random(seed * 7919 + 1)
        self.pause_rng = random.Random(seed * 104729 + 3)
        self.alive_rng = random.Random(seed * 15485863 + 5)
        self.clients_paused_until = 0
        n = self.p.n
        self.voters = tuple(range(1, n + 1))  # the initial voters
        self.universe = tuple(range(1, n + self.p.spares + 1))  # every node, spares included
        self.majority = n // 2 + 1
        self.nodes = {i: SimNode(i) for i in self.universe}
        # blocked[src][dst]: the link src -> dst drops everything
        size = len(self.universe) + 1
        self.blocked = [[False] * size for _ in range(size)]
        self.queue: list = []
        self.seq = 0
        self.now = 0
        self.step_no = 0
        self.steps_planned = 0
        self.trace: deque = deque(maxlen=40)
        self.drop_p = self.p.drop_p
        self.dup_p = self.p.dup_p
        self.faults = True
        self.clients = True

        self.leaders: dict[int, int] = {}  # epoch -> leader
        # The partition's metadata record (leader, epoch) as the controller holds it.
        self.record = (self.p.first_leader, 0) if self.p.first_leader is not None else None
        self.votes: dict[tuple[int, int], int] = {}  # (voter, epoch) -> candidate granted
        self.entry_at: dict[tuple[int, int], int] = {}  # (offset, epoch) -> write id
        self.committed_epochs: list[int] = []
        self.committed_ids: list[int] = []
        self.acked: list[tuple[int, tuple[int, ...]]] = []  # (first offset, ids)
        self.next_id = 1
        self.next_control = -1
        self.stats = {"acked": 0, "elections": 0, "crashes": 0, "transfers": 0, "truncations": 0,
                      "damaged": 0, "quiescent_ticks": 0}

        for node in self.nodes.values():
            self._start(node)
        self._push(self.rng.randint(1, self.p.client_every_units), _CLIENT, 0, None, None)
        self._push(self.p.nemesis_every_units, _NEMESIS, 0, None, None)

    # ------------------------------------------------------------------ scheduling

    def _push(self, delay: int, kind: int, a, b, c) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (self.now + delay, self.seq, kind, a, b, c))

    def _start(self, node: SimNode) -> None:
        node.incarnation += 1
        node.up = True
        node.hw = 0
        node.silent_ticks = {}
        node.pending_writes.clear()
        node.pending_persists = []
        node.flush_end = -1
        log = node.log
        log.flushed = log.end  # recovery finds what survived on disk
        node.core = self.p.core_cls(
            node.id,
            self.voters,
            rng=random.Random(self.rng.getrandbits(64)),
            quorum_state=node.durable_qs,
            # As the replica's recovery does: membership entries only where the quorum state
            # says to look for them.
            log_state=LogState(0, log.end, log.flushed, log.epoch_cache(),
                               log.memberships(node.durable_qs.membership_scan_from)
                               if node.durable_qs.membership_scan_from >= 0 else ()),
            config=self.p.config,
            learners=() if node.id in self.voters else (node.id,),  # a spare: never votes
        )
        if self.record is not None and log.end == 0 and node.durable_qs.epoch == 0:
            # As the replica manager does for a new replica: the record's first term.
            self._apply(node, node.core.begin_first_term(*self.record))
        self._push(self.rng.randint(1, TICK_UNITS), _TICK, node.id, node.incarnation, None)

    def _crash(self, node: SimNode) -> None:
        node.up = False
        node.incarnation += 1  # in-flight ticks, flushes and persists become stale
        self.stats["crashes"] += 1
        # An fsync that was running may or may not have made it.
        k = self.rng.randint(0, len(node.pending_persists))
        if k:
            node.durable_qs = node.pending_persists[k - 1]
        log = node.log
        cut = self.rng.randint(log.flushed, log.end)
        log.cut(cut)
        node.pending_writes.clear()
        node.core = None

    def _damage(self, node: SimNode) -> None:
        """Crash `node` and lose a random suffix of its flushed log (a torn tail the log's
        recovery detects), flagging it durably as the shell does before the core starts."""
        self._crash(node)
        self.stats["damaged"] += 1
        log = node.log
        cut = self.damage_rng.randint(0, log.flushed)
        node.lost = {off: (log.epochs[off], log.ids[off]) for off in range(cut, log.flushed)}
        log.cut(cut)
        log.flushed = cut
        qs = node.durable_qs
        node.durable_qs = QuorumState(qs.epoch, qs.voted_for, qs.leader_id, True)
        self.trace.append((self.now, "damage", node.id, cut))

    @staticmethod
    def _flagged(node: SimNode) -> bool:
        return node.durable_qs.needs_catch_up or (
            node.core is not None and node.core.needs_catch_up
        )

    # --------------------------------------------------------------------- running

    def run(self, steps: int) -> None:
        """Process `steps` events with faults and clients on, checking after each."""
        self.steps_planned += steps
        queue = self.queue
        pop = heapq.heappop
        try:
            for _ in range(steps):
                self.step_no += 1
                ev = pop(queue)
                self.now = ev[0]
                self._dispatch(ev)
                self._check_durable_majority()
        except RaftStateError as err:  # the core's own guards count as failures too
            self._fail(f"RaftStateError: {err}")

    def quiesce(self) -> int:
        """Heal everything, stop faults and clients, run until all replicas agree, write once
        through the leader and run until that write is committed everywhere."""
        self.faults = False
        self.clients = False
        self.drop_p = 0.0
        self.dup_p = 0.0
        for row in self.blocked:
            for j in range(len(row)):
                row[j] = False
        for node in self.nodes.values():
            if not node.up:
                self._start(node)
        queue = self.queue
        acked = self.stats["acked"] + 1  # nothing acknowledged before this counts
        try:
            for i in range(self.p.quiesce_max_steps):
                self.step_no += 1
                ev = heapq.heappop(queue)
                self.now = ev[0]
                self._dispatch(ev)
                self._check_durable_majority()
                if i % 25 == 0 and self._converged():
                    if self.stats["acked"] <= acked:
                        # One more write through the healed leader, until one is acknowledged
                        # everywhere (liveness after healing; a run that committed nothing
                        # under faults, e.g. its only leader isolated at once, still commits;
                        # a write lost to a leader change still in flight is written again).
                        acked = self.stats["acked"]
                        self._client_write()
                        continue
                    self._final_checks()
                    return i
        except RaftStateError as err:
            self._fail(f"RaftStateError: {err}")
        self._fail(f"no convergence within {self.p.quiesce_max_steps} steps after healing: "
                   + "; ".join(str(nd.core.status()) for nd in self.nodes.values()))
        return -1

    def _dispatch(self, ev) -> None:
        _, _, kind, a, b, c = ev
        if kind == _DELIVER:
            node = self.nodes[a]
            if not node.up or self.blocked[b.sender][a]:
                return
            self.trace.append((self.now, "deliver", a, b))
            self._apply(node, node.core.handle(b))
        elif kind == _TICK:
            node = self.nodes[a]
            if node.incarnation != b:
                return
            self._push(TICK_UNITS, _TICK, a, b, None)
            if node.core.quiescent:
                self.stats["quiescent_ticks"] += 1
            leader = node.core.leader_id
            if (node.core.runs_on_next_tick() and leader is not None and self._link_up(node.id, leader)
                    and self.alive_rng.random() < self.p.leader_alive_p):
                self._apply(node, node.core.leader_alive(leader))  # its broker answers others
            self._apply(node, node.core.tick())
            self._watch_links(node)
        elif kind == _FLUSH:
            node = self.nodes[a]
            if node.incarnation != b:
                return
            log = node.log
            done = min(node.flush_end, node.flush_cap, log.end)
            if done > log.flushed:
                log.flushed = done
            node.flush_end = -1
            self.trace.append((self.now, "flushed", a, log.flushed))
            self._apply(node, node.core.flushed(log.flushed))
        elif kind == _PERSIST:
            node = self.nodes[a]
            if node.incarnation != b:
                return
            state = node.pending_persists.pop(0)
            node.durable_qs = state
            self.trace.append((self.now, "persisted", a, state))
            self._apply(node, node.core.quorum_state_persisted(c))
        elif kind == _CLIENT:
            self._push(self.rng.randint(1, 2 * self.p.client_every_units), _CLIENT, 0, None, None)
            if self.pause_rng.random() < self.p.client_pause_p:
                self.clients_paused_until = self.now + self.pause_rng.randint(*self.p.client_pause_units)
            if self.clients and self.now >= self.clients_paused_until:
                self._client_write()
        elif kind == _CRASH:
            node = self.nodes[a]
            if node.incarnation == b and self.faults:
                self.trace.append((self.now, "crash in fsync", a, None))
                self._crash(node)
        elif kind == _NEMESIS:
            self._push(self.rng.randint(1, 2 * self.p.nemesis_every_units), _NEMESIS, 0, None, None)
            if self.faults:
                self._nemesis()

    # ------------------------------------------------------------- the shell part

    def _link_up(self, a: int, b: int) -> bool:
        return self.nodes[b].up and not self.blocked[a][b] and not self.blocked[b][a]

    def _watch_links(self, node: SimNode) -> None:
        """The replica manager's watch of its links (module docstring)."""
        silence = self.p.config.election_timeout_ticks
        for other in self.universe:
            if other == node.id:
                continue
            if self._link_up(node.id, other):
                if node.silent_ticks.pop(other, 0) >= silence:
                    self._apply(node, node.core.follower_heard(other))
                continue
            n = node.silent_ticks[other] = node.silent_ticks.get(other, 0) + 1
            if n == 1:
                self._apply(node, node.core.wake(other))
                if not self.nodes[other].up:  # its port refuses connections at once
                    self._apply(node, node.core.leader_unreachable(other, refused=True))
            if n == silence:
                self._apply(node, node.core.leader_unreachable(other))
            if n >= silence and node.core.role is Role.LEADER:
                self._apply(node, node.core.follower_silent(other))

    def _apply(self, node: SimNode, effects: list) -> None:
        for eff in effects:
            kind = type(eff)
            if kind is Send:
                msg = eff.message
                if type(msg) is VoteResponse and msg.granted and not msg.pre_vote:
                    prev = self.votes.setdefault((node.id, msg.epoch), eff.to)
                    if prev != eff.to:
                        self._fail(f"node {node.id} voted for {prev} and {eff.to} in epoch {msg.epoch}")
                self._send(node, eff.to, msg)
            elif kind is PersistQuorumState:
                node.pending_persists.append(eff.state)
                delay = self.rng.randint(2, self.p.persist_delay_max_units)
                self._push(delay, _PERSIST, node.id, node.incarnation, eff.version)
                if self.faults and self.rng.random() < self.p.crash_in_fsync_p:
                    self._push(delay - 1, _CRASH, node.id, node.incarnation, None)
            elif kind is HighWatermarkChanged:
                self._on_hw(node, eff.high_watermark)
            elif kind is AppendReplicated:
                epochs, ids, members = eff.records
                if eff.base_offset != node.log.end or eff.end_offset != eff.base_offset + len(ids):
                    self._fail(f"node {node.id}: bad AppendReplicated {eff.base_offset}.."
                               f"{eff.end_offset} onto end {node.log.end}")
                self._append(node, epochs, ids, members)
            elif kind is Flush:
                if node.flush_end >= 0:
                    self._fail(f"node {node.id}: two flushes outstanding")
                node.flush_end = node.log.end
                node.flush_cap = node.log.end
                self._push(self.rng.randint(1, self.p.flush_delay_max_units), _FLUSH,
                           node.id, node.incarnation, None)
            elif kind is TruncateTo:
                self._truncate(node, eff.offset)
            elif kind is AppendControl:
                if eff.offset != node.log.end:
                    self._fail(f"node {node.id}: control batch at {eff.offset}, end {node.log.end}")
                if self.leaders.get(eff.epoch, node.id) != node.id:
                    self._fail(f"two leaders in epoch {eff.epoch}")
                self.next_control -= 1
                self._append(node, (eff.epoch,), (self.next_control,))
            elif kind is AppendMembership:
                if eff.offset != node.log.end:
                    self._fail(f"node {node.id}: membership at {eff.offset}, end {node.log.end}")
                if self.leaders.get(eff.epoch) != node.id:
                    self._fail(f"node {node.id} appends a membership in epoch {eff.epoch} it does not lead")
                self.next_control -= 1
                self._append(node, (eff.epoch,), (self.next_control,), {eff.offset: eff.membership})
            elif kind is LeadershipChanged:
                self.trace.append((self.now, "leadership", node.id, eff))
                if eff.leader_id == node.id:
                    prev = self.leaders.setdefault(eff.epoch, node.id)
                    if prev != node.id:
                        self._fail(f"two leaders in epoch {eff.epoch}: {prev} and {node.id}")
                    self.stats["elections"] += 1
                    if self.record is not None and eff.epoch > self.record[1]:
                        self.record = (node.id, eff.epoch)  # its report, applied by the controller
                else:
                    node.pending_writes.clear()  # their outcome is unknown now
            else:
                self._fail(f"unknown effect {eff!r}")

    def _send(self, node: SimNode, to: int, msg) -> None:
        if (
            type(msg) is FetchResponse
            and msg.read_offset is not None
            and msg.read_offset < node.log.end
        ):
            log = node.log
            lo = msg.read_offset
            hi = min(log.end, lo + self.rng.randint(1, self.p.max_fetch_entries))
            epochs = tuple(log.epochs[lo:hi])
            ids = tuple(log.ids[lo:hi])
            batches = []
            start = lo
            for off in range(lo + 1, hi + 1):
                if off == hi or log.epochs[off] != log.epochs[start]:
                    batches.append((start, off - 1, log.epochs[start]))
                    start = off
            members = log.memberships(lo, hi)
            msg = msg.with_records((epochs, ids, dict(members)), tuple(batches), members)
        rng = self.rng
        if rng.random() < self.drop_p:
            return
        delay = rng.randint(1, self.p.delay_max_units)
        if rng.random() < self.p.long_delay_p:
            delay += rng.randint(1, 10 * self.p.delay_max_units)
        self._push(delay, _DELIVER, to, msg, None)
        if rng.random() < self.dup_p:
            self._push(rng.randint(1, 4 * self.p.delay_max_units), _DELIVER, to, msg, None)

    def _append(self, node: SimNode, epochs, ids, members=None) -> None:
        log = node.log
        base = log.end
        if members:
            log.members.update(members)
        entry_at = self.entry_at
        for i, (ep, wid) in enumerate(zip(epochs, ids)):
            off = base + i
            prev = entry_at.setdefault((off, ep), wid)
            if prev != wid:
                self._fail(f"node {node.id}: offset {off} epoch {ep} holds {wid}, elsewhere {prev}")
            if log.epochs and ep < log.epochs[-1]:
                self._fail(f"node {node.id}: epoch goes back at offset {off}")
            log.epochs.append(ep)
            log.ids.append(wid)

    def _truncate(self, node: SimNode, offset: int) -> None:
        log = node.log
        if offset < node.hw:
            self._fail(f"node {node.id}: truncation to {offset} below its HW {node.hw}")
        hi = min(log.end, len(self.committed_ids))
        cids, ceps = self.committed_ids, self.committed_epochs
        for off in range(offset, hi):
            if log.ids[off] == cids[off] and log.epochs[off] == ceps[off]:
                self._fail(f"node {node.id}: truncation to {offset} drops committed offset {off}")
        self.trace.append((self.now, "truncate", node.id, offset))
        self.stats["truncations"] += 1
        log.cut(offset)
        if log.flushed > offset:
            log.flushed = offset
        if node.flush_end >= 0 and node.flush_cap > offset:
            node.flush_cap = offset

    def _on_hw(self, node: SimNode, hw: int) -> None:
        lo = node.hw
        if hw <= lo:
            self._fail(f"node {node.id}: HW went from {lo} to {hw}")
        log = node.log
        if hw > log.end:
            self._fail(f"node {node.id}: HW {hw} beyond its log end {log.end}")
        ce, ci = self.committed_epochs, self.committed_ids
        if hw > len(ci):
            if node.core.role is not Role.LEADER:
                self._fail(f"node {node.id}: follower HW {hw} beyond any leader's ({len(ci)})")
            ce.extend(log.epochs[len(ce):hw])
            ci.extend(log.ids[len(ci):hw])
        if log.ids[lo:hw] != ci[lo:hw] or log.epochs[lo:hw] != ce[lo:hw]:
            self._fail(f"node {node.id}: log below its HW {hw} differs from the committed prefix")
        node.hw = hw
        pending = node.pending_writes
        while pending and pending[0][1] < hw:
            first, last, ids = pending.popleft()
            if tuple(ci[first:last + 1]) != ids:
                self._fail(f"acked write {ids} at {first} is not what was committed")
            self.acked.append((first, ids))
            self.stats["acked"] += 1

    def _client_write(self) -> None:
        leaders = [nd for nd in self.nodes.values() if nd.up and nd.core.may_accept_writes]
        if not leaders:
            return
        node = leaders[self.rng.randrange(len(leaders))] if len(leaders) > 1 else leaders[0]
        if len(node.pending_writes) >= self.p.max_pending_writes:
            return
        count = self.rng.randint(1, 3)
        ids = tuple(range(self.next_id, self.next_id + count))
        self.next_id += count
        first = node.log.end
        epoch = node.core.epoch
        self._append(node, (epoch,) * count, ids)
        node.pending_writes.append((first, first + count - 1, ids))
        self.trace.append((self.now, "write", node.id, (first, ids)))
        self._apply(node, node.core.leader_appended(first, first + count - 1))

    def _nemesis(self) -> None:
        rng = self.rng
        nodes = self.nodes
        up = [nd for nd in nodes.values() if nd.up]
        down = [nd for nd in nodes.values() if not nd.up]
        r = rng.random()
        n = len(self.universe)
        leaders = [nd for nd in up if nd.core.role is Role.LEADER]
        if r < 0.12 and leaders:
            # leader-targeted: isolate it (it keeps taking writes it cannot commit) or crash it
            victim = leaders[rng.randrange(len(leaders))]
            if rng.random() < 0.5:
                self._heal()
                self.trace.append((self.now, "isolate leader", victim.id, None))
                for other in self.universe:
                    self.blocked[victim.id][other] = self.blocked[other][victim.id] = True
            elif len(down) < n - self.majority:
                self.trace.append((self.now, "crash leader", victim.id, None))
                self._crash(victim)
            return
        r = rng.random()
        if r < 0.20:
            # crash: usually keep a majority up, sometimes not
            limit = n - self.majority + (1 if rng.random() < 0.2 else 0)
            if up and len(down) < limit:
                # prefer a replica with an fsync of its quorum state in flight
                persisting = [nd for nd in up if nd.pending_persists]
                pool = persisting if persisting and rng.random() < 0.5 else up
                victim = pool[rng.randrange(len(pool))]
                damage = self.damage_rng.random() < self.p.damage_p
                if damage and not any(map(self._flagged, nodes.values())):
                    self._damage(victim)
                else:
                    self.trace.append((self.now, "crash", victim.id, None))
                    self._crash(victim)
        elif r < 0.40:
            if down:
                node = down[rng.randrange(len(down))]
                self.trace.append((self.now, "restart", node.id, None))
                self._start(node)
        elif r < 0.55:
            self._heal()
            victim = rng.choice(self.universe)
            self.trace.append((self.now, "isolate", victim, None))
            for other in self.universe:
                self.blocked[victim][other] = self.blocked[other][victim] = True
        elif r < 0.65:
            self._heal()
            group = set(rng.sample(self.universe, rng.randint(1, n - 1)))
            self.trace.append((self.now, "split", sorted(group), None))
            for a in self.universe:
                for b in self.universe:
                    if (a in group) != (b in group):
                        self.blocked[a][b] = True
        elif r < 0.72:
            a, b = rng.sample(self.universe, 2)
            self.trace.append((self.now, "cut one way", (a, b), None))
            self.blocked[a][b] = True
        elif r < 0.90:
            self.trace.append((self.now, "heal", None, None))
            self._heal()
        else:
            if leaders:
                node = leaders[0]
                target = rng.choice([v for v in node.core.voters if v != node.id] or [node.id])
                self.trace.append((self.now, "transfer", node.id, target))
                self.stats["transfers"] += 1
                self._apply(node, node.core.transfer_leadership(target))

    def _heal(self) -> None:
        for row in self.blocked:
            for j in range(len(row)):
                row[j] = False

    # ------------------------------------------------------------------ checks

    def _check_durable_majority(self) -> None:
        n_committed = len(self.committed_ids)
        if n_committed == 0:
            return
        last = n_committed - 1
        cid, cep = self.committed_ids[last], self.committed_epochs[last]
        holders = 0
        for node in self.nodes.values():
            log = node.log
            if log.flushed >= n_committed and log.ids[last] == cid and log.epochs[last] == cep:
                holders += 1
            elif self._flagged(node) and node.lost.get(last) == (cep, cid):
                holders += 1  # lost it to damage; barred from votes until it is back
        if holders < self.majority:
            self._fail(f"committed prefix [0, {n_committed}) is durable on only {holders} replicas")

    def _converged(self) -> bool:
        nodes = list(self.nodes.values())
        leaders = [nd for nd in nodes if nd.core.role is Role.LEADER]
        if len(leaders) != 1 or not leaders[0].core.may_accept_writes:
            return False
        end = leaders[0].log.end
        for nd in nodes:
            if nd.log.end != end or nd.core.high_watermark != end or nd.log.flushed != end:
                return False
        return True

    def _final_checks(self) -> None:
        nodes = list(self.nodes.values())
        ref = nodes[0].log
        for nd in nodes[1:]:
            if nd.log.ids != ref.ids or nd.log.epochs != ref.epochs:
                self._fail(f"replicas {nodes[0].id} and {nd.id} differ after quiescence")
        n_committed = len(self.committed_ids)
        if ref.ids[:n_committed] != self.committed_ids:
            self._fail("final log does not start with the committed prefix")
        seen: set[int] = set()
        for wid in ref.ids:
            if wid > 0:
                if wid in seen:
                    self._fail(f"write {wid} appears twice in the final log")
                seen.add(wid)
        for first, ids in self.acked:
            if tuple(ref.ids[first:first + len(ids)]) != ids:
                self._fail(f"acknowledged write {ids} at {first} is missing from the final log")

    def _fail(self, reason: str) -> None:
        lines = [f"seed={self.seed} n={self.p.n} step={self.step_no} t={self.now}: {reason}",
                 f"replay: SIM_SEED={self.seed} SIM_STEPS={self.steps_planned}"
                 " pytest tests/sim/test_raft_sim.py -k test_seed", "last events:"]
        for t, what, who, detail in self.trace:
            lines.append(f"  t={t} {what} node={who} {detail!r}")
        raise SimFailure("\n".join(lines))


def run_seed(seed: int, steps: int, n: int | None = None, core_cls: type = RaftCore,
             first_leader: int | None = None) -> Cluster:
    """Run one seeded simulation (3 or 5 replicas chosen by the seed unless `n` is given)
    for `steps` faulty steps, then heal and check convergence. Raises SimFailure.
    `first_leader`: the record names it (raft.py "First term") instead of an election."""
    params = SimParams(n=n if n is not None else (3 if seed % 2 == 0 else 5), core_cls=core_cls,
                       first_leader=first_leader)
    cluster = Cluster(seed, params)
    cluster.run(steps)
    cluster.quiesce()
    return cluster
