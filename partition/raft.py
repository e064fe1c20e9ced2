"""Per-partition Raft: a pure state machine in which the partition log is the Raft log.

After KIP-595 (Raft for Kafka: pull-based, terms are leader epochs, divergence found through
the leader-epoch cache) and KIP-996 (pre-vote), shaped like etcd-io/raft: no I/O, no clock,
no threads. Time is `tick()` (the shell calls it every `tick_ms`); randomness comes from the
injected `random.Random`. Every event method returns the list of effects the shell must
perform, in order.

Roles
-----
UNATTACHED   knows an epoch, no leader (may have voted in it).
FOLLOWER     knows the leader of its epoch and fetches from it.
PROSPECTIVE  ran out of patience (no successful fetch for a randomized election timeout) and
             asks for pre-votes; pre-votes never change anybody's epoch or vote (KIP-996).
CANDIDATE    won the pre-vote, bumped the epoch, voted for itself, asks for real votes.
             Refused by half its fellow voters (a split vote), it runs again within a
             stagger window of its own instead of a whole election timeout.
LEADER       won a majority of votes; appends a control batch in its epoch (unless its log
             is empty with nothing uncommitted below it: a new partition's first record is
             at offset 0); serves fetches.
RESIGNED     was leader of its epoch and gave up (check-quorum failure, `resign()`, or a
             restart with leader_id == self in the persisted state); never leads that epoch
             again, answers fetches NOT_LEADER, and runs for a later epoch after a timeout.

Messages (every message carries `sender` and the sender's `epoch`)
-------------------------------------------------------------------
VoteRequest(sender, epoch, last_epoch, log_end_offset, pre_vote, unclean)
    Real vote: `epoch` is the candidate's new epoch. A voter with a lower epoch adopts it
    first. Granted iff the epochs are equal, the voter has no leader in it, has not voted in
    it for somebody else, and (last_epoch, log_end_offset) >= its own. Pre-vote: `epoch` is
    the epoch the prospective would run in (its epoch + 1); changes nothing at the receiver;
    granted iff epoch > receiver's epoch, the log is at least as up to date, and the receiver
    is not a leader and not a follower that fetched successfully within
    `election_timeout_ticks` (the leader lease that stops a rejoining node from disrupting).
    `unclean` (default false): the candidate's flag was cleared by an operator
    (`clear_catch_up`); a voter flagged `needs_catch_up` grants such a request by the rules
    above instead of refusing it (see "Damaged storage"). Unflagged voters ignore it.
VoteResponse(sender, epoch, granted, pre_vote, leader_id)
    `epoch`/`leader_id` are the responder's, so a stale prospective learns the current leader
    (and follows it) instead of bumping the epoch.
BeginQuorumEpoch(sender, epoch)
    A new leader announces itself; receivers follow it at once. Re-sent every
    `begin_quorum_resend_ticks` to voters that have not fetched in the epoch yet.
EndQuorumEpoch(sender, epoch)
    A resigning leader tells its voters; they drop the lease so the election is quick.
TimeoutNow(sender, epoch)
    Leadership transfer: the leader tells a caught-up target to become a candidate at once
    (no pre-vote, no timeout; like etcd's MsgTimeoutNow / Kafka's EndQuorumEpoch).
FetchRequest(sender, epoch, fetch_offset, last_fetched_epoch, flushed_offset, fetch_id,
             log_start_offset)
    Follower -> leader; doubles as the heartbeat. `fetch_offset` is the follower's
    log_end_offset, `last_fetched_epoch` the epoch of its last entry (0 for an empty log),
    `flushed_offset` how much of it is durable, `log_start_offset` its durable log start. At most one in flight per follower; a new
    one after `fetch_request_timeout_ticks` without an answer (a new `fetch_id`).
FetchResponse(sender, epoch, leader_id, fetch_id, error, high_watermark, fetch_offset,
              diverging_epoch, diverging_end_offset, read_offset, records, batches)
    Leader -> follower. One of: `error` ("FENCED_LEADER_EPOCH": the request epoch is stale;
    "NOT_LEADER": the responder does not lead that epoch; `leader_id` is its hint);
    a divergence (`diverging_epoch`, `diverging_end_offset`) = the leader's
    end_offset_for_epoch(last_fetched_epoch) when that is inconsistent with the request;
    or data: `read_offset` (= fetch_offset, or None when there is nothing to read) tells the
    LEADER's shell to attach `records = log.read(read_offset, max_bytes)` (whole batches)
    and the FOLLOWER's shell to fill `batches` = ((base_offset, last_offset, leader_epoch),
    ...) from the batch headers before handing the response to `handle()` (use
    `FetchResponse.with_records`). The core never parses record bytes.
    The leader answers at once if it has data past fetch_offset or a high watermark the
    follower has not seen; otherwise it parks the fetch (one per follower) until data arrives,
    the high watermark moves, or `fetch_max_wait_ticks` pass (a long poll, as Kafka's).
    "OFFSET_OUT_OF_RANGE" (with the leader's `log_start_offset`): the fetch offset is below the
    leader's log start (retention deleted what the follower still needs); the follower empties
    its log and restarts it at that offset (`TruncateFully`), then fetches from there. A
    fetch at exactly the leader's log start from an empty log (last_fetched_epoch 0; epochs
    start at 1) is consistent.

Consistency and the high watermark
----------------------------------
* A fetch (f, e) is consistent iff f == 0, or the leader's end_offset_for_epoch(e) is
  (e, o) with o >= f. Then the follower's [0, f) equals the leader's (log matching).
* On divergence (E, O) the follower truncates to min(O, its own end offset for E) (or its log
  start when either side has no epoch <= E) and fetches again; every round strictly shortens
  its log, and the cut never falls inside the prefix it shares with the leader. Cutting below
  the follower's high watermark raises RaftStateError (KIP-595: that would lose a commit).
* The leader counts, per voter, the durable end it reported (min(flushed_offset,
  fetch_offset) from a consistent fetch) and, for itself, its flushed_offset
  (`require_flush=True`, flush_policy=always) or its log_end_offset. The high watermark
  (exclusive: offsets < HW are committed) is the majority-th largest of these; it moves only
  forward, and only once it passes the first offset of the leader's epoch (its control
  batch, or with none its first record: an offset of the current epoch is on a majority). A follower takes max(its HW, min(response HW,
  its log_end_offset)).
* Check quorum: a leader that has not had fetches from a majority (itself included) within a
  window of `check_quorum_ticks` resigns, so an isolated leader stops acknowledging writes.

The contract with the shell (read this before writing one)
-----------------------------------------------------------
1. Effects are performed in the order returned, all of them, before the next event is
   delivered to this core (or `may_accept_writes` is asked). Sends may be coalesced per
   destination broker and dropped on failure; everything else must happen.
2. Persist before send: after `PersistQuorumState(state, version)` the core returns NO other
   effect until the shell reports `quorum_state_persisted(version)`, i.e. the state is
   fsynced (file + directory). Events arriving meanwhile are processed; their effects are
   held and released, in order, by that call. So a vote grant, a candidate's vote requests
   and a new leader's control batch and BeginQuorumEpoch all go out only once durable.
3. `AppendControl(epoch, offset)`: append one control batch (LEADER_CHANGE, one record)
   with `log.append(..., leader_epoch=epoch)`; it must land at exactly `offset`. Do NOT report
   it with `leader_appended`: the core has already counted it. A leader whose log is empty
   and whose high watermark covers it (a new partition) emits none: its epoch starts with
   its first `leader_appended`.
   `AppendReplicated(records, base_offset, end_offset)`: `log.append_replicated(records)`;
   the new end must be `end_offset`. `TruncateTo(offset)`: `log.truncate_to(offset)`.
   `TruncateFully(offset)`: empty the log and restart it at `offset` (Kafka's
   truncateFullyAndStartAt); everything below `offset` is committed on the leader.
4. `Flush()`: run `log.flush()` and report `flushed(log.flushed_offset)`. At most one is
   outstanding; the core asks again when more is unflushed (group commit). Under
   `require_flush` a follower sends its next fetch only after its appended data is flushed,
   or after `fetch_request_timeout_ticks` of waiting for that flush (a slow disk must not
   look like a dead leader, nor make the leader resign for want of fetches).
5. Leader writes: append only while `may_accept_writes` is true, with
   `leader_epoch=core.epoch`, then call `leader_appended(first_offset, last_offset)`.
6. `HighWatermarkChanged(high_watermark)`: answer acks=all produce requests whose last
   offset < high_watermark; expose it to consumers. `LeadershipChanged(epoch, leader_id)`:
   emitted whenever (epoch, active leader) changes; leader_id is None while unknown or
   resigned. On losing leadership, fail pending acks=all requests as NOT_LEADER (their
   outcome is unknown: they may still commit). Tell the controller.
7. On restart, construct the core from the durable quorum state and the recovered log
   (`LogState`) and a high watermark no larger than the flushed offset (or 0); a replica
   that was leader restarts RESIGNED and never leads that epoch again.
8. Serialize log mutations per partition: a TruncateTo must not run while a Flush or the
   read for an earlier FetchResponse is still in progress on another thread.
9. A RaftStateError means a broken contract or a corrupt peer: take the partition offline.
10. Retention: pass the high watermark to the log's retention (never delete above it) and
   report a moved log start with `log_start_advanced(log_start_offset)`.
   `AdvanceLogStart(offset)`: raise the log's start to `offset` durably (its checkpoint
   fsynced; whole segments below it may go) before any later effect, in particular before
   the next FetchRequest that reports it. `LowWatermarkChanged(offset)` (leader): a majority
   holds log starts >= offset: answer DeleteRecords requests up to it. `start_election()`
   runs for election now (a new partition's preferred leader, instead of waiting a timeout);
   `begin_first_term(leader_id, leader_epoch)` skips that election (below, "First term").
   `leader_unreachable(broker_id)`: a connection to that broker was refused, or the link to
   it has been silent for an election timeout; its followers run soon (staggered) instead of
   after a full, load-stretched election timeout. `leader_alive(broker_id)`: that broker
   answered this one just now; ask it of a follower whose next tick would run
   (`runs_on_next_tick`), which then waits up to LEADER_ALIVE_GRACE_TIMEOUTS election
   timeouts more for its own answer before it runs.
11. Quiescence (below): `quiescent` true means `tick()` does nothing, so the shell may stop
   calling it; it must call it again once any other event made `quiescent` false. The shell
   keeps the session with each other broker alive and tells the core what it sees of it:
   `wake(broker_id)` when the connection to that broker broke (a held fetch may have died
   with the leader's process), `leader_unreachable(broker_id)` when it stays silent for an
   election timeout (or refuses connections), `follower_silent(broker_id)` when that broker
   has sent nothing for an election timeout (a leader stops counting it). Before it drops a
   core (offline, reopen, close), it sends what `abandon()` returns.

First term (issue 46: a new partition is led from the moment it exists)
-----------------------------------------------------------------------
As Kafka's controller does, the metadata controller names each new partition's first leader
in the committed topic record: leader L at record epoch 0, "named, not yet confirmed". Every
replica of the new group opens with an empty log at epoch 0 and calls
`begin_first_term(L, 0)`: L becomes leader of FIRST_EPOCH (1), voted for itself, the others
its followers in FIRST_EPOCH; nobody votes. Safe because no vote is ever granted in epoch 1:
every replica of the group is at epoch >= 1 from its first event (`begin_first_term` is the
first thing the shell asks of a fresh core), so every candidacy is for epoch >= 2, and the
one leader of epoch 1 is the L that all replicas read from the same committed record. L's
leadership is announced (LeadershipChanged) and reported; the controller then records
(L, 1), and from then on a fresh replica adopts the record's (leader, epoch) as a follower
(L itself, opened fresh after losing its directory, only adopts the epoch, unattached): it
never leads an epoch it did not win. Only a fresh core acts (epoch 0, empty log, no vote);
anything else keeps the election path. The first term also quiesces at once: the leader
counts every follower as told HW 0 (a fresh follower's own), and a fresh follower's first
fetch asks to be held, so one round trip per follower makes the group idle.
Gap: the named leader losing its directory after it led epoch 1 but before the controller
recorded its report (about a second) would lead epoch 1 again from an empty log.

Damaged storage (protocol-aware recovery, Alagappan et al., FAST'18)
--------------------------------------------------------------------
Raft assumes an fsynced entry survives. When log recovery drops data (a torn or corrupt
tail: bytes_dropped or offsets_lost > 0), the replica may have lost entries it reported
durable, so a commit may have counted it: if it then voted by its shortened log, a majority
without the committed entry could elect a leader lacking it (seen: a damaged node voted at
once after restart and an acknowledged write was lost). So the shell sets
`QuorumState.needs_catch_up` and persists it BEFORE building the core (a second restart
would find a clean log). While it is set the replica grants no votes or pre-votes (but see
`unclean` below), never becomes prospective or candidate (timeouts, `start_election`,
TimeoutNow are ignored), and only follows. It is cleared (a PersistQuorumState with it
false) once, as follower of the leader of its epoch, after a successful fetch response with
high watermark H (a response to a fetch sent after the damage, so the leader had replaced
our pre-damage durable offset), it durably holds [0, H) and an entry of the leader's epoch
(so all earlier-epoch commits too). Safety then needs only that a committed entry is intact
on one member of every majority of unflagged replicas, which a damaged minority cannot
break. Limits:
* Liveness: with a majority flagged at once (e.g. power lost everywhere, every tail torn)
  nobody can be elected until an operator clears the flag; a single voter ignores it.
  `clear_catch_up()` is that operator step (Kafka's unclean leader election; `raftlog
  partitions recover --unclean`): it clears this replica's flag durably and marks its
  pre-votes and votes `unclean` until it leads or follows somebody; a flagged voter grants
  an unclean request by the usual rules (epoch, one vote per epoch, lease, candidate's log
  at least as up to date as its own), so at most one leader per epoch still holds and the
  most up-to-date log still wins, but a commit that no voter of that majority kept is LOST
  for good (the flagged voters then catch up from the new leader and clear themselves as
  above). The shell refuses it while a leader is live. A flagged voter whose log is ahead
  of the candidate's still refuses: recover on the replica with the longest log. An
  UNFLAGGED follower that held the lost commit below its high watermark would have to cut
  it and goes offline (RaftStateError); restart it to rejoin (it restarts with HW 0). The
  `unclean` mark is not persisted: if this replica restarts before it is elected, recover
  through another flagged replica (this one, no longer flagged, refuses a second clear).
* A cut exactly at a batch boundary leaves a clean-looking log (no bytes dropped) and is not
  detected (Kafka has the same gap; KIP-966 adds unclean-shutdown detection). A cheap check
  would compare the recovered log end with a durable flushed-end mark; not built.
* A pre-damage fetch delivered after a post-damage one can make the leader count the old
  durable offset again; fetches carry no incarnation to tell them apart.

Log start (DeleteRecords, after Kafka's: the leader appends nothing)
-------------------------------------------------------------------
`delete_records(offset)` on the leader raises its log start to `offset` <= high watermark.
Data answers carry the leader's log start; a follower raises its own to min(that, its high
watermark), so a replica only ever drops committed records. Fetch requests carry the
follower's durable log start; the leader's low watermark is the majority-th largest log
start, and a request is answered once the low watermark reaches it. A deletion must survive
a change of leader: a new leader adopts the largest log start any voter reports, capped at
its high watermark (re-checked as that moves). Any leader that commits in its epoch has had
a consistent fetch from a member of the majority that held the deletion, so by then the
deletion is back. Gap: between its election and that fetch (one round trip; BeginQuorumEpoch
makes followers fetch at once), a leader elected from the minority that had not applied it
may still serve records below the deleted offset. Retention's moves take the same path, so
all replicas converge on the largest log start.

Quiescence (issue 19: 1,000 idle partitions per node must cost next to nothing)
-------------------------------------------------------------------------------
An idle partition stops exchanging per-partition messages and stops counting ticks, like
CockroachDB's quiescent ranges: the liveness of a quiescent group is the liveness of the
links between brokers, which the shell watches once per broker pair (contract 11).
* A follower that got a response bringing no news (no records, no new high watermark: the
  leader parked its fetch for the whole wait), holding the leader's whole log durably with
  the high watermark at its end (and not flagged needs_catch_up), sends its next fetch with
  `quiescent=True`: "hold this until there is news". (After every response, under load,
  it would cost two messages more per write.) The leader parks such a
  fetch as HELD when the follower is caught up (fetch offset = log end, durable to it, has
  the current HW and log start) and tells it so with `FetchHeld(fetch_id)`; the follower is
  quiescent only from that message on (a lost request or FetchHeld just leaves it ticking).
* A held fetch has no timeout. It is answered as any parked fetch is: data appended, the
  high watermark or the log start moved. A leader that stops leading answers every parked
  fetch NOT_LEADER (with its epoch and leader hint), so no follower waits on a fetch nobody
  holds; `abandon()` does the same for a shell that drops a core without a role change.
* A quiescent follower's tick does nothing (its lease and fetch timer are frozen: its
  leader is alive as far as the broker link shows). It resumes on any fetch response, any
  role change, `wake`, `leader_unreachable`, a BeginQuorumEpoch from its leader (the
  leader's wake for an answer that was lost), and a pre-vote request: it refuses that one
  (its lease holds) but fetches at once to check its leader, so a held fetch that was lost
  without a trace only delays an election by one election timeout.
* A leader is quiescent when every other voter is silent (`follower_silent`, the shell's
  word that its broker sent nothing for an election timeout) or has its fetch held, the
  held ones that are not silent plus itself a majority, with no transfer and no persist
  pending. Its tick then does nothing. While it ticks for other reasons, held voters count as fetching (check
  quorum, in sync) and their idle timers stand still; a voter neither held nor parked and
  idle for half an election timeout is sent BeginQuorumEpoch again (backing off), which
  wakes a follower whose answer was lost.

Membership changes (docs/reassignment.md; tests/sim/sim_membership.py)
---------------------------------------------------------------------
The group's `Membership` is voters (elect, count toward every majority) and learners (fetch,
never vote or count). A change is an entry: `change_membership` on the leader emits
`AppendMembership(epoch, offset, membership)` (a control batch at exactly `offset`, not
reported with `leader_appended`); a follower's shell lists the membership batches among
fetched records in `FetchResponse.memberships` (`with_records(..., memberships)`). The last
membership in the log is in force at once, committed or not; entries below the high
watermark fold into the persisted `QuorumState.membership` (with its offset), and
`QuorumState.membership_scan_from`, persisted before a first uncommitted entry is written,
tells recovery where to look for the others (`LogState.memberships`). Single-server rule,
with the dissertation's fix: one change in flight; none before an entry of the leader's
epoch is committed; at most one voter added or removed; a new voter must be a caught-up
learner. A leader whose removal commits hands over (TimeoutNow) and resigns on its next
tick; a voter whose removal is not committed may still run (so a self-removed leader that
lost its quorum does not leave a group that can never elect), counting the new voters only.
A replica outside every membership it knows (removed) never runs; the leader ignores
fetches from non-members. A learner (a catching-up replica: it counts toward no commit)
sends its next fetch as soon as a response's records are appended, while their flush runs
(a voter waits for its flush, as its fetch reports what is durable): the round trip and the
fsync overlap, so a move's catch-up is not one fsync per answer slower (issue 44); its
durable offset, which the leader's promotion check reads, rides on the fetch after the flush.

Invariants (checked by tests/sim after every step): at most one leader per epoch; a
committed offset is never lost or changed; two replicas agree below the smaller of their high
watermarks; a high watermark never goes back. Per-event work is O(number of voters).

Size (issue 13's ~800-line rule): over it because this is one pure state machine
(election, replication, high watermark, log start, transfer) whose invariants tests/sim checks
together; leader transfer and log-start tracking are the seam to cut along.
"""

from __future__ import annotations

import bisect
import enum
import random
from dataclasses import dataclass
from typing import Any

from partition.errors import RaftStateError
from raftlog.base.errors import (
    InvalidReplicaAssignmentError,
    NotLeaderError,
    ReassignmentInProgressError,
)

__all__ = [
    "AdvanceLogStart",
    "AppendControl",
    "AppendMembership",
    "AppendReplicated",
    "BeginQuorumEpoch",
    "EndQuorumEpoch",
    "FIRST_EPOCH",
    "FetchHeld",
    "FetchRequest",
    "FetchResponse",
    "Flush",
    "HighWatermarkChanged",
    "LeadershipChanged",
    "LogState",
    "LowWatermarkChanged",
    "Membership",
    "NotLeaderError",
    "PersistQuorumState",
    "QuorumState",
    "RaftConfig",
    "RaftCore",
    "RaftStateError",
    "Role",
    "Send",
    "TimeoutNow",
    "TruncateFully",
    "TruncateTo",
    "VoteRequest",
    "VoteResponse",
]

FENCED_LEADER_EPOCH = "FENCED_LEADER_EPOCH"
NOT_LEADER = "NOT_LEADER"
OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
FIRST_EPOCH = 1  # a new partition's first term, led by the replica its record names


class Role(enum.Enum):
    UNATTACHED = "unattached"
    FOLLOWER = "follower"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"
    RESIGNED = "resigned"


_UNATTACHED = Role.UNATTACHED
_FOLLOWER = Role.FOLLOWER
_PROSPECTIVE = Role.PROSPECTIVE
_CANDIDATE = Role.CANDIDATE
_LEADER = Role.LEADER
_RESIGNED = Role.RESIGNED


@dataclass(frozen=True, slots=True)
class Membership:
    """A configuration of the group (module docstring "Membership changes"): who votes
    (and counts toward commits and elections) and who only receives the log."""

    voters: tuple[int, ...]
    learners: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.voters:
            raise InvalidReplicaAssignmentError("a membership needs at least one voter")
        if (tuple(sorted(set(self.voters))) != self.voters
                or tuple(sorted(set(self.learners))) != self.learners):
            raise InvalidReplicaAssignmentError(
                f"voters {self.voters} and learners {self.learners} must be sorted, no duplicates")
        if set(self.voters) & set(self.learners):
            raise InvalidReplicaAssignmentError(
                f"replicas {sorted(set(self.voters) & set(self.learners))} are voters and learners")

    @classmethod
    def of(cls, voters: Any, learners: Any = ()) -> Membership:
        """From any iterables of broker ids (sorted and deduplicated here)."""
        return cls(tuple(sorted(set(voters))), tuple(sorted(set(learners))))

    @property
    def members(self) -> tuple[int, ...]:
        return tuple(sorted(self.voters + self.learners))


@dataclass(frozen=True, slots=True)
class QuorumState:
    """What must survive a crash: the epoch, the vote cast in it, the leader known in it,
    and the last committed membership folded out of the log (with its offset), so that
    retention or a snapshot cutting its entry away keeps it."""

    epoch: int = 0
    voted_for: int | None = None
    leader_id: int | None = None
    # Log recovery dropped data that may have been fsynced (and counted toward a commit):
    # no votes, no candidacy until caught up from an established leader (see "Damaged
    # storage" in the module docstring).
    needs_catch_up: bool = False
    membership: Membership | None = None  # None: the membership the shell constructs with
    membership_offset: int = -1
    # The offset of the first membership entry in the log above `membership` (-1: none).
    # Persisted before that entry is written: recovery scans the log from here for
    # membership control batches (LogState.memberships) instead of reading all of it.
    membership_scan_from: int = -1


@dataclass(frozen=True, slots=True)
class LogState:
    """The log as recovered at start: offsets and the leader-epoch cache [(epoch, start)]."""

    log_start_offset: int = 0
    log_end_offset: int = 0
    flushed_offset: int = 0
    epochs: tuple[tuple[int, int], ...] = ()
    memberships: tuple[tuple[int, Membership], ...] = ()  # (offset, membership) entries in the log


UNREACHABLE_WINDOW_DIVISOR = 4  # leader_unreachable: each follower's window, election_timeout/4 wide
LEADER_ALIVE_GRACE_TIMEOUTS = 2  # leader_alive: election timeouts a follower waits at most on top
WAKE_BACKOFF_MAX_TIMEOUTS = 8  # a leader's wakes of an idle voter back off to one per 8 election timeouts


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Timeouts in ticks (defaults assume tick_ms=50: election timeout 1 s)."""

    election_timeout_ticks: int = 20  # randomized in [T, 2T); also the follower's lease
    fetch_max_wait_ticks: int = 5  # leader parks a caught-up fetch at most this long
    fetch_request_timeout_ticks: int = 8  # follower re-sends an unanswered fetch
    check_quorum_ticks: int = 30  # leader resigns without majority fetches in this window
    transfer_timeout_ticks: int = 20  # leadership transfer gives up, writes resume
    begin_quorum_resend_ticks: int = 5
    require_flush: bool = True  # flush_policy=always: only fsynced offsets count

    def __post_init__(self) -> None:
        if not 0 < self.fetch_max_wait_ticks < self.fetch_request_timeout_ticks:
            raise ValueError("need 0 < fetch_max_wait_ticks < fetch_request_timeout_ticks")
        if self.fetch_request_timeout_ticks >= self.election_timeout_ticks:
            raise ValueError("need fetch_request_timeout_ticks < election_timeout_ticks")
        if self.check_quorum_ticks < self.election_timeout_ticks:
            raise ValueError("need check_quorum_ticks >= election_timeout_ticks")
        if self.transfer_timeout_ticks < 1 or self.begin_quorum_resend_ticks < 1:
            raise ValueError("timeouts must be at least one tick")


# ---------------------------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class VoteRequest:
    sender: int
    epoch: int
    last_epoch: int
    log_end_offset: int
    pre_vote: bool
    # Sent by a candidate whose needs_catch_up an operator cleared (unclean recovery): a
    # flagged voter may grant it. Off the wire it defaults to false (a refusal, never a
    # wrong grant).
    unclean: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    sender: int
    epoch: int
    granted: bool
    pre_vote: bool
    leader_id: int | None


@dataclass(frozen=True, slots=True)
class BeginQuorumEpoch:
    sender: int
    epoch: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpoch:
    sender: int
    epoch: int


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    sender: int
    epoch: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    sender: int
    epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    flushed_offset: int
    fetch_id: int
    log_start_offset: int = 0  # the follower's (DeleteRecords); absent from old peers: 0
    quiescent: bool = False  # "hold this until there is news" (module docstring "Quiescence")


@dataclass(frozen=True, slots=True)
class FetchHeld:
    """Leader -> follower: the fetch `fetch_id` is held until there is news (no timeout)."""

    sender: int
    epoch: int
    fetch_id: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    sender: int
    epoch: int
    leader_id: int | None
    fetch_id: int
    error: str | None = None
    high_watermark: int = 0
    fetch_offset: int = 0
    diverging_epoch: int | None = None
    diverging_end_offset: int = -1
    read_offset: int | None = None
    records: Any = None  # bytes of whole RecordBatch v2 batches in production; opaque here
    batches: tuple[tuple[int, int, int], ...] = ()  # (base_offset, last_offset, leader_epoch)
    log_start_offset: int = -1  # the leader's (with OFFSET_OUT_OF_RANGE, and on data answers)
    # (offset, membership) of the membership control batches among `records` (the
    # follower's shell reads them from the batches, as it reads `batches`).
    memberships: tuple[tuple[int, Membership], ...] = ()

    def with_records(
        self, records: Any, batches: tuple[tuple[int, int, int], ...],
        memberships: tuple[tuple[int, Membership], ...] = (),
    ) -> FetchResponse:
        """A copy carrying `records`, their header summary `batches` and the memberships
        their control batches hold."""
        return FetchResponse(
            self.sender, self.epoch, self.leader_id, self.fetch_id, self.error,
            self.high_watermark, self.fetch_offset, self.diverging_epoch,
            self.diverging_end_offset, self.read_offset, records, batches,
            self.log_start_offset, memberships,
        )  # fmt: skip


Message = (
    VoteRequest | VoteResponse | BeginQuorumEpoch | EndQuorumEpoch | TimeoutNow
    | FetchRequest | FetchResponse | FetchHeld
)

# ----------------------------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class PersistQuorumState:
    state: QuorumState
    version: int


@dataclass(frozen=True, slots=True)
class Send:
    to: int
    message: Message


@dataclass(frozen=True, slots=True)
class AppendControl:
    epoch: int
    offset: int


@dataclass(frozen=True, slots=True)
class AppendMembership:
    """Append one control batch holding `membership` (Kafka's KRaft VotersRecord, KIP-853)
    with leader_epoch=`epoch`, at exactly `offset`; not reported with `leader_appended`."""

    epoch: int
    offset: int
    membership: Membership


@dataclass(frozen=True, slots=True)
class AppendReplicated:
    records: Any
    base_offset: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class TruncateTo:
    offset: int


@dataclass(frozen=True, slots=True)
class TruncateFully:
    offset: int


@dataclass(frozen=True, slots=True)
class Flush:
    pass


@dataclass(frozen=True, slots=True)
class HighWatermarkChanged:
    high_watermark: int


@dataclass(frozen=True, slots=True)
class LeadershipChanged:
    epoch: int
    leader_id: int | None


@dataclass(frozen=True, slots=True)
class AdvanceLogStart:
    offset: int


@dataclass(frozen=True, slots=True)
class LowWatermarkChanged:
    low_watermark: int


Effect = (
    PersistQuorumState | Send | AppendControl | AppendMembership | AppendReplicated
    | TruncateTo | TruncateFully
    | Flush | HighWatermarkChanged | LeadershipChanged | AdvanceLogStart | LowWatermarkChanged
)

_FLUSH = Flush()


class _Peer:
    """What a leader knows of one other voter (reset at every election)."""

    __slots__ = ("fetch_offset", "durable_offset", "hw_sent", "parked", "parked_ticks", "fetched",
                 "idle_ticks", "log_start", "caught_up_ticks", "held", "silent", "wake_at")

    def __init__(self) -> None:
        self.log_start = 0  # as its last consistent fetch reported it
        self.fetch_offset = -1
        self.idle_ticks = 0  # ticks since its last fetch request (in sync while < check_quorum)
        self.durable_offset = -1  # counted toward the high watermark
        self.hw_sent = -1
        self.parked: FetchRequest | None = None
        self.parked_ticks = 0
        self.fetched = False  # has fetched in this epoch (stop BeginQuorumEpoch re-sends)
        self.caught_up_ticks = -1  # leader ticks since a fetch of ours reached our end (-1: never)
        self.held = False  # `parked` is held: no timeout (module docstring "Quiescence")
        self.silent = False  # the shell says its broker went silent (follower_silent)
        self.wake_at = 0  # idle_ticks at which BeginQuorumEpoch goes again (0: not set)


class RaftCore:
    """The Raft state machine of one partition replica. See the module docstring.

    Concurrency: none; one caller at a time. Every public event method returns list[Effect].
    """

    def __init__(
        self,
        replica_id: int,
        voters: tuple[int, ...] | list[int],
        *,
        rng: random.Random,
        quorum_state: QuorumState = QuorumState(),
        log_state: LogState = LogState(),
        high_watermark: int = 0,
        config: RaftConfig = RaftConfig(),
        learners: tuple[int, ...] | list[int] = (),
    ):
        # The membership below every entry in the log: the persisted committed one, else
        # the one the shell constructs with (the replica set the metadata assigned).
        base = Membership.of(voters, learners)
        base_offset = -1
        if quorum_state.membership is not None:
            base, base_offset = quorum_state.membership, quorum_state.membership_offset
        if replica_id not in base.members and base_offset < 0 and not log_state.memberships:
            raise ValueError(f"replica {replica_id} is not one of the voters {base.voters}"
                             f" or learners {base.learners}")
        self.replica_id = replica_id
        self._base_membership = base
        self._base_membership_offset = base_offset
        # Membership entries in the log above the base, in offset order (the last one is in
        # force, committed or not).
        self._mem_offsets: list[int] = []
        self._mem_entries: list[Membership] = []
        for offset, membership in log_state.memberships:
            if offset > base_offset and offset < log_state.log_end_offset:
                self._mem_offsets.append(offset)
                self._mem_entries.append(membership)
        self._peers: dict[int, _Peer] = {}
        self._transfer_target: int | None = None
        self._set_membership(self._mem_entries[-1] if self._mem_entries else base)
        self._cfg = config
        self._rng = rng
        self._require_flush = config.require_flush

        self._epoch = quorum_state.epoch
        self._voted_for = quorum_state.voted_for
        self._leader_id = quorum_state.leader_id
        # A single voter has nobody to catch up from: what it lost is lost either way.
        self._needs_catch_up = quorum_state.needs_catch_up and bool(self._others)
        self._catch_up_hw: int | None = None  # HW of our leader's last good fetch response
        # An operator cleared our flag (clear_catch_up): our vote requests say `unclean`
        # until we lead or follow somebody.
        self._unclean_election = False
        self._qs_version = 0
        self._qs_pending = False  # a PersistQuorumState is out and not yet confirmed
        self._qs_awaited = 0
        self._held: list[Effect] = []
        self._out: list[Effect] = []

        # Mirror of the log: offsets and the epoch cache, kept in step by the effects.
        self._log_start = log_state.log_start_offset
        self._end = log_state.log_end_offset
        self._flushed = min(log_state.flushed_offset, self._end)
        self._ep_epochs = [e for e, _ in log_state.epochs]
        self._ep_starts = [s for _, s in log_state.epochs]
        self._hw = min(high_watermark, self._end)
        self._flush_in_flight = False
        self._flush_cap: int | None = None  # a truncation while the flush ran caps its result

        self._election_elapsed = 0
        self._election_timeout = 0
        self._reset_election_timer()
        self._unreachable_seen: tuple[int, int] | None = None  # (epoch, leader) leader_unreachable acted on
        self._graced = 0  # leader_alive: election timeouts waited on top since the leader last answered
        self._unreachable_retried = False  # a pre-vote refused for that leader was retried soon
        self._unreachable_refused = False  # ... and its connections were refused: no pre-vote
        # Counters for /metrics (read-only outside): candidacies started, and changes of the
        # (epoch, leader) this replica announced.
        self.elections_started = 0
        self.leader_unreachable_signals = 0  # leader_unreachable calls acted on
        self.leader_changes = 0
        self._grants: set[int] = set()
        self._refusals: set[int] = set()  # candidate: voters that refused us this epoch

        # Fetch ids start at random on every construction (every restart), so that a delayed
        # response to a fetch of the last incarnation does not pass for one of ours: a stale
        # "diverging" answer could otherwise cut entries below the high watermark, and after
        # damage a stale HW may have been computed from our pre-damage offset.
        self._fetch_id = rng.randrange(1 << 30)
        self._fetch_inflight = False
        self._fetch_elapsed = 0
        self._fetch_after_flush = False
        self._flush_wait_ticks = 0
        self._quiesced = False  # follower: our in-flight fetch is held by the leader
        self._orphans: list[tuple[int, int]] = []  # (voter, fetch id) parked when leadership ended
        self._first_term = False  # begin_first_term made this core leader or follower of epoch 1

        self._epoch_start_offset = -1
        self._epoch_committed = False  # leader: an entry of its own epoch is committed
        self._low_wm = 0  # leader: the log start a majority holds (last LowWatermarkChanged)
        self._cq_elapsed = 0
        self._cq_fetched: set[int] = set()
        self._begin_elapsed = 0
        self._transfer_elapsed = 0

        if self._leader_id == replica_id:
            self._role = _RESIGNED
        elif self._leader_id is not None:
            self._role = _FOLLOWER  # the first tick sends the first fetch
        else:
            self._role = _UNATTACHED
        self._announced = (self._epoch, self._active_leader())

    # ------------------------------------------------------------------------ queries

    @property
    def role(self) -> Role:
        return self._role

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def leader_id(self) -> int | None:
        """The active leader as far as this replica knows (None if unknown)."""
        return self._active_leader()

    @property
    def quorum_state(self) -> QuorumState:
        folded = self._base_membership_offset >= 0  # else the shell's own: nothing to keep
        return QuorumState(self._epoch, self._voted_for, self._leader_id, self._needs_catch_up,
                           self._base_membership if folded else None, self._base_membership_offset,
                           self._mem_offsets[0] if self._mem_offsets else -1)

    @property
    def membership(self) -> Membership:
        """The membership in force: the last in the log, committed or not."""
        return self._membership

    @property
    def committed_membership(self) -> Membership:
        """The last membership below the high watermark (the one persisted)."""
        return self._base_membership

    @property
    def membership_change_pending(self) -> bool:
        """True while a membership entry in the log is not committed yet."""
        return bool(self._mem_offsets)

    @property
    def needs_catch_up(self) -> bool:
        """True while this replica lost data to damaged storage and has not caught up."""
        return self._needs_catch_up

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def log_end_offset(self) -> int:
        return self._end

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    @property
    def last_epoch(self) -> int:
        return self._ep_epochs[-1] if self._ep_epochs else 0

    def runs_on_next_tick(self) -> bool:
        """True when the next `tick()` starts a pre-vote or a candidacy (a candidacy persists
        the quorum state first). A query: it changes nothing. The shell runs such a tick
        where waiting on its fsync holds up no other partition."""
        return (self._role is not _LEADER and not self.quiescent and not self._needs_catch_up
                and self._can_campaign() and self._election_elapsed + 1 >= self._election_timeout)

    @property
    def quiescent(self) -> bool:
        """True while `tick()` does nothing (module docstring "Quiescence"): a follower whose
        fetch the leader holds, or a leader all of whose voters are held or silent."""
        role = self._role
        if role is _FOLLOWER:
            return self._quiesced
        if role is not _LEADER or self._qs_pending or self._transfer_target is not None:
            return False
        live = 1 if self._is_voter else 0
        voters = self._voter_set
        for v, peer in self._peers.items():
            if peer.silent:
                continue
            if not peer.held:
                return False
            if v in voters:
                live += 1
        return live >= self._majority

    @property
    def may_accept_writes(self) -> bool:
        """True iff this replica leads a durable epoch and is not handing leadership over."""
        return (
            self._role is _LEADER and not self._qs_pending and self._transfer_target is None
        )

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """KIP-279: (largest known epoch <= `epoch`, its end offset); (-1, -1) if none."""
        i = bisect.bisect_right(self._ep_epochs, epoch) - 1
        if i < 0:
            return (-1, -1)
        end = self._ep_starts[i + 1] if i + 1 < len(self._ep_starts) else self._end
        return (self._ep_epochs[i], end)

    # ------------------------------------------------------------------------- events

    def tick(self, *, answer_parked: bool = False) -> list[Effect]:
        """One tick of `tick_ms` has passed. `answer_parked`: a leader also answers every
        parked fetch now, however long it waited. The shell says so on the same tick for all
        its partitions, every `fetch_max_wait_ticks`: then the idle answers to one follower
        broker leave together, one round trip per broker pair instead of one per partition at
        staggered times (no wait grows: a parked fetch still goes at `fetch_max_wait_ticks`).
        Held fetches are not answered here, and a quiescent core does nothing at all."""
        out = self._out = []
        if self.quiescent:
            return out
        role = self._role
        if role is _LEADER:
            self._tick_leader()
            if answer_parked and self._role is _LEADER:
                self._answer_parked(held=False)
            return out
        if role is _FOLLOWER:
            if self._fetch_inflight:
                self._fetch_elapsed += 1
                if self._fetch_elapsed >= self._fetch_timeout_ticks():
                    self._send_fetch()
            elif not self._fetch_after_flush:
                self._send_fetch()
            else:
                # Our own fsync is slow (a loaded disk): fetch anyway, reporting what is
                # durable, so neither the leader's check-quorum nor our election timer blames
                # the leader for it.
                self._flush_wait_ticks += 1
                if self._flush_wait_ticks >= self._cfg.fetch_request_timeout_ticks:
                    self._send_fetch()
        self._election_elapsed += 1
        # A flagged replica never runs (its log may lack committed entries: only an
        # established leader may lead). Its timer is left expired, not reset: it holds no
        # live leader's lease, so an operator's unclean candidate may win its pre-vote, and
        # once an operator clears its own flag the next tick runs for election.
        if self._election_elapsed >= self._election_timeout and not self._needs_catch_up:
            if not self._can_campaign():
                self._election_elapsed = 0  # a learner (or a removed replica) never runs
                return out
            if (role is _FOLLOWER and self._unreachable_refused
                    and self._unreachable_seen == (self._epoch, self._leader_id)):
                self._start_candidacy()  # its leader's process is gone: no pre-vote
            else:
                self._start_prevote()
        return out

    def handle(self, message: Message) -> list[Effect]:
        """A message from another voter (from any epoch; stale ones are ignored)."""
        out = self._out = []
        if message.sender == self.replica_id:
            return out
        # From any replica: one may be a member in a membership this replica has not seen
        # yet. Votes count only from the voters of the candidate's membership; a leader
        # ignores fetches from a replica that is not a member of its membership.
        kind = type(message)
        if kind is FetchRequest:
            self._on_fetch_request(message)
        elif kind is FetchResponse:
            self._on_fetch_response(message)
        elif kind is FetchHeld:
            self._on_fetch_held(message)
        elif kind is VoteRequest:
            self._on_vote_request(message)
        elif kind is VoteResponse:
            self._on_vote_response(message)
        elif kind is BeginQuorumEpoch:
            self._on_begin_quorum_epoch(message)
        elif kind is EndQuorumEpoch:
            self._on_end_quorum_epoch(message)
        elif kind is TimeoutNow:
            self._on_timeout_now(message)
        else:
            raise TypeError(f"not a raft message: {message!r}")
        return out

    def quorum_state_persisted(self, version: int) -> list[Effect]:
        """The shell fsynced the PersistQuorumState of `version`; releases held effects."""
        out = self._out = []
        if not self._qs_pending or version != self._qs_awaited:
            return out  # stale (a confirmation for a superseded write)
        self._qs_pending = False
        held = self._held
        i = 0
        while i < len(held):
            eff = held[i]
            i += 1
            out.append(eff)
            if type(eff) is PersistQuorumState:
                self._qs_pending = True
                self._qs_awaited = eff.version
                break
        del held[:i]
        return out

    def leader_appended(self, first_offset: int, last_offset: int) -> list[Effect]:
        """The shell appended [first_offset, last_offset] with leader_epoch=self.epoch."""
        out = self._out = []
        if self._role is not _LEADER or self._qs_pending:
            raise RaftStateError(f"append while not an established leader ({self._role.value})")
        if first_offset != self._end or last_offset < first_offset:
            raise RaftStateError(
                f"append of [{first_offset}, {last_offset}] does not follow end {self._end}"
            )
        if not self._ep_epochs or self._ep_epochs[-1] < self._epoch:
            self._ep_epochs.append(self._epoch)  # the first entry of an epoch with no control batch
            self._ep_starts.append(first_offset)
        self._end = last_offset + 1
        if self._require_flush:
            self._request_flush()
        else:
            self._maybe_advance_hw()
        self._answer_parked()
        return out

    def flushed(self, flushed_offset: int) -> list[Effect]:
        """The Flush effect completed; `flushed_offset` is the log's flushed offset now."""
        out = self._out = []
        self._flush_in_flight = False
        if self._flush_cap is not None:
            flushed_offset = min(flushed_offset, self._flush_cap)
            self._flush_cap = None
        flushed_offset = min(flushed_offset, self._end)
        if flushed_offset > self._flushed:
            self._flushed = flushed_offset
            if self._role is _LEADER:
                self._maybe_advance_hw()
            elif self._needs_catch_up:
                self._maybe_caught_up()
        if self._flushed < self._end:
            self._request_flush()
        elif self._role is _FOLLOWER and self._fetch_after_flush:
            self._send_fetch()
        return out

    def transfer_leadership(self, target: int) -> list[Effect]:
        """Hand leadership to `target`: stop taking writes, wait until the target has our
        whole log, then tell it to run for election at once. Gives up (writes resume) after
        `transfer_timeout_ticks`. Raises NotLeaderError, ValueError (target not a voter).
        Shells should ask `transfer_refusal(target)` first: writes stop until the transfer
        ends, so a target that is behind would only stall them for the timeout."""
        out = self._out = []
        if self._role is not _LEADER:
            raise NotLeaderError(leader_id=self._active_leader(), epoch=self._epoch)
        if target == self.replica_id:
            return out
        if target not in self._voter_set:
            raise ValueError(f"transfer target {target} is not a voter")
        self._transfer_target = target
        self._transfer_elapsed = 0
        self._maybe_send_timeout_now()
        return out

    def transfer_refusal(self, target: int) -> str | None:
        """Why leadership should not go to `target` now (None: it may): it is not a voter, or
        it is behind: it holds less than the high watermark durably and has not fetched up to
        our log end within the last `election_timeout_ticks` (Kafka's ISR lag rule), e.g. a
        replica repairing damaged storage. A follower a fetch behind under steady writes is
        not behind. A query: no effects, no state change."""
        if self._role is not _LEADER or target == self.replica_id:
            return None
        peer = self._peers.get(target)
        if peer is None or target not in self._voter_set:
            return f"transfer target {target} is not a voter"
        return self._behind(target, peer, "transfer target")

    def _behind(self, target: int, peer: _Peer, what: str) -> str | None:
        recent = 0 <= peer.caught_up_ticks <= self._cfg.election_timeout_ticks
        if not peer.fetched or peer.silent or (peer.durable_offset < self._hw and not recent):
            return (f"{what} {target} is behind: durable offset {peer.durable_offset}"
                    f" < high watermark {self._hw}, not caught up lately")
        return None

    def start_election(self) -> list[Effect]:
        """Run for election now (pre-vote first), as if the election timeout had passed: for
        a new partition's preferred leader. A no-op for a leader, a follower or a candidate."""
        out = self._out = []
        if (self._role in (_UNATTACHED, _RESIGNED, _PROSPECTIVE) and not self._needs_catch_up
                and self._can_campaign()):
            self._start_prevote()
        return out

    def begin_first_term(self, leader_id: int, leader_epoch: int) -> list[Effect]:
        """A fresh core (epoch 0, empty log, no vote) learns its partition's leader from the
        committed metadata record (module docstring "First term"): at record epoch 0 the named
        `leader_id` leads FIRST_EPOCH without an election and the others follow it; at a
        later epoch a replica follows the recorded leader (or, being it, only adopts the
        epoch). A no-op for a core that is not fresh, or with `leader_id` -1."""
        out = self._out = []
        if (self._epoch != 0 or self._end != 0 or self._ep_epochs or self._voted_for is not None
                or self._role is not _UNATTACHED or self._needs_catch_up or leader_id < 0):
            return out
        me = self.replica_id
        if leader_epoch > 0:
            self._adopt_epoch(leader_epoch, leader_id)
        elif leader_id != me:
            self._first_term = True
            self._become_follower(FIRST_EPOCH, leader_id)
        elif self._can_campaign():
            self._first_term = True
            self._set_quorum_state(FIRST_EPOCH, me, me)
            self._become_leader(begin=False)
        return out

    def leader_unreachable(self, broker_id: int, *, refused: bool = False) -> list[Effect]:
        """The shell could not even connect to broker `broker_id` (`refused`: nothing listens
        there, e.g. its process died) or the link to it went silent for an election timeout
        (a paused process, a cut network). A follower of it drops its lease (grants pre-votes)
        and runs soon instead of after a whole election timeout, whose ticks slow down with
        the node's load (at 1,000 partitions a dead leader was noticed seconds late). Of the
        leader's followers each runs at a random tick of its own window (election timeout
        / UNREACHABLE_WINDOW_DIVISOR wide; who goes first rotates with the epoch), so the
        first one's requests find the others granting rather than running themselves (no
        split vote), and a broker's hundreds of orphaned groups do not all run in the same
        tick (all at once, their elections took 1.5 s instead of 0.3 s and overloaded the
        node into false elections of healthy groups). Pre-vote still
        guards a live leader: a follower that hears from it keeps its lease and refuses. With
        `refused`, there is no live leader to guard (no process listens where it lived), so
        the first-ranked follower skips the pre-vote and stands as candidate at once: one
        round trip less per election, which for hundreds of orphaned groups is what the
        failover is made of. The others still pre-vote (issue 46): on a starved node their
        ticks ran ahead of the first one's vote request, and two candidacies for one epoch
        split the vote (1.86 candidacies per orphan at 10,000 partitions); a pre-vote does
        not bump the epoch, so the first one's request still wins in one round.
        A no-op unless this replica follows `broker_id`."""
        out = self._out = []
        if (self._role is not _FOLLOWER or self._leader_id != broker_id or self._needs_catch_up
                or not self._can_campaign()):
            return out
        if self._unreachable_seen == (self._epoch, broker_id):
            return out  # said again (every refused fetch): the timer set the first time stands
        self._unreachable_seen = (self._epoch, broker_id)
        self._unreachable_retried = False
        self._quiesced = False
        self.leader_unreachable_signals += 1
        self._election_elapsed = max(self._election_elapsed, self._cfg.election_timeout_ticks)  # no lease
        contenders = sorted((set(self.voters) | {self.replica_id}) - {broker_id})
        self._unreachable_refused = refused and self._rank(contenders) == 0
        self._election_timeout = self._election_elapsed + self._stagger(contenders)
        return out

    def leader_alive(self, broker_id: int) -> list[Effect]:
        """The shell heard from broker `broker_id` just now: it answered one of this broker's
        fetch sessions. A follower of it whose election timer runs out on the next tick waits
        one election timeout more, at most LEADER_ALIVE_GRACE_TIMEOUTS times until its own
        fetch is answered. Under full load at 1,000 partitions a leader broker answered some
        partitions a second late while it answered others, and their followers ran against a
        live leader; a leader replica that stays silent on a live broker is still replaced,
        only later. Elections stay safe whatever the timing; this only makes them rarer.
        Not after `leader_unreachable` for that leader. A no-op otherwise."""
        out = self._out = []
        if (
            self._role is _FOLLOWER and self._leader_id == broker_id
            and self._unreachable_seen != (self._epoch, broker_id)
            and self._election_elapsed + 1 >= self._election_timeout
            and self._graced < LEADER_ALIVE_GRACE_TIMEOUTS
        ):
            self._graced += 1
            self._election_elapsed = max(0, self._election_elapsed - self._cfg.election_timeout_ticks)
        return out

    def wake(self, broker_id: int) -> list[Effect]:
        """The shell's connection to broker `broker_id` broke: a quiescent follower of it
        fetches now, since its held fetch may have gone with the leader's process (a leader
        restarted within an election timeout holds nothing). A no-op otherwise."""
        out = self._out = []
        if self._role is _FOLLOWER and self._quiesced and self._leader_id == broker_id:
            self._send_fetch()
        return out

    def follower_silent(self, broker_id: int) -> list[Effect]:
        """The shell heard nothing from broker `broker_id` for an election timeout. A leader
        stops counting that voter as live (check quorum, in sync) even if it holds its fetch,
        and stops waking it; `follower_heard` or the voter's next fetch undoes this. The held
        fetch stays held: a silence that was only a stall costs nothing. A no-op otherwise."""
        out = self._out = []
        peer = self._peers.get(broker_id) if self._role is _LEADER else None
        if peer is not None and not peer.silent:
            peer.silent = True
            self._cq_fetched.discard(broker_id)  # an isolated leader resigns within a window
        return out

    def follower_heard(self, broker_id: int) -> list[Effect]:
        """The shell hears from broker `broker_id` again after `follower_silent`: a leader
        ticks for that voter again (BeginQuorumEpoch goes to it if it has not fetched in our
        epoch), so a rejoining replica follows at once. A no-op otherwise."""
        out = self._out = []
        peer = self._peers.get(broker_id) if self._role is _LEADER else None
        if peer is not None:
            peer.silent = False
        return out

    def abandon(self) -> list[Effect]:
        """For a shell about to stop using this core without a role change (the replica goes
        offline, is reopened or repaired, or closes): the messages that release what other
        voters wait on here. A leader answers its parked fetches NOT_LEADER (a quiescent
        follower would wait for them forever); a quiescent follower sends a fetch that is not
        held, so its leader stops counting it as live. Returns Send effects only, never held
        back by a pending persist (they claim nothing); the core is not to be used after."""
        out: list[Effect] = []
        if self._role is _LEADER:
            for v, peer in self._peers.items():
                if peer.parked is not None:
                    out.append(Send(v, FetchResponse(
                        self.replica_id, self._epoch, None, peer.parked.fetch_id, NOT_LEADER,
                    )))  # fmt: skip
                    peer.parked = None
                    peer.held = False
        elif self._role is _FOLLOWER and self._quiesced and self._leader_id is not None:
            self._quiesced = False
            self._fetch_id += 1
            durable = self._flushed if self._require_flush else self._end
            out.append(Send(self._leader_id, FetchRequest(
                self.replica_id, self._epoch, self._end, self.last_epoch, durable, self._fetch_id,
                self._log_start,
            )))  # fmt: skip
        return out

    def clear_catch_up(self) -> list[Effect]:
        """Operator override (unclean recovery) for a majority flagged at once: clear this
        replica's `needs_catch_up` and persist that; until this replica leads or follows,
        its pre-votes and votes are marked `unclean`, which flagged voters grant (module
        docstring, "Damaged storage"). Commits this replica's log lacks may be lost for
        good. Does not itself start an election: call `start_election()` next (a follower
        of a dead leader runs at its next tick: its lease has lapsed).

        Returns the effects (a PersistQuorumState with the flag false). Raises
        RaftStateError if the flag is not set (nothing to clear; a single voter never has it).
        """
        out = self._out = []
        if not self._needs_catch_up:
            raise RaftStateError(f"replica {self.replica_id} is not flagged needs_catch_up")
        self._needs_catch_up = False
        self._catch_up_hw = None
        self._unclean_election = True
        self._persist_quorum_state()
        return out

    def delete_records(self, offset: int) -> list[Effect]:
        """DeleteRecords on the leader: raise the log start to `offset` (at most the high
        watermark: only committed records are deleted) here at once (AdvanceLogStart) and on
        the followers through their fetches; LowWatermarkChanged reports each rise of the log
        start that a majority of voters holds durably (the shell answers the request then).
        An offset at or below the log start changes nothing. Raises NotLeaderError,
        RaftStateError (past the high watermark: the shell checks first)."""
        out = self._out = []
        if self._role is not _LEADER:
            raise NotLeaderError(leader_id=self._active_leader(), epoch=self._epoch)
        if offset > self._hw:
            raise RaftStateError(f"delete_records({offset}) past the high watermark {self._hw}")
        self._raise_log_start(offset)
        self._maybe_advance_low_wm()
        return out

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def low_watermark(self) -> int:
        """Leader: the largest log start a majority of voters reported (0 otherwise)."""
        return self._low_wm if self._role is _LEADER else 0

    def log_start_advanced(self, log_start_offset: int) -> list[Effect]:
        """Retention moved the log start (it never passes the high watermark)."""
        out = self._out = []
        if log_start_offset > self._log_start:
            if log_start_offset > self._end:
                raise RaftStateError(
                    f"log start {log_start_offset} is past the log end {self._end}"
                )
            self._log_start = log_start_offset
            if self._role is _LEADER:
                self._maybe_advance_low_wm()
                self._answer_parked()  # held followers learn the new log start
        return out

    def change_membership(self, membership: Membership) -> list[Effect]:
        """Leader: append `membership` to the log (AppendMembership); it is in force at once,
        on this replica and on each follower as the entry reaches it, committed or not.
        Raises NotLeaderError, ReassignmentInProgressError (a change is not committed yet, or
        nothing of this epoch is: ask again later), InvalidReplicaAssignmentError (more than
        one voter added or removed, a new voter that was not a caught-up learner: see
        `membership_change_refusal`)."""
        out = self._out = []
        if self._role is not _LEADER:
            raise NotLeaderError(leader_id=self._active_leader(), epoch=self._epoch)
        refusal = self._membership_refusal(membership)
        if refusal is not None:
            raise refusal[0](refusal[1])
        if membership == self._membership:
            return out
        offset = self._end
        self._mem_offsets.append(offset)
        self._mem_entries.append(membership)
        self._persist_quorum_state()  # where recovery must look for it, before it is written
        self._emit(AppendMembership(self._epoch, offset, membership))
        if not self._ep_epochs or self._ep_epochs[-1] < self._epoch:
            self._ep_epochs.append(self._epoch)  # the first entry of an epoch with no control batch
            self._ep_starts.append(offset)
        self._end = offset + 1
        self._set_membership(membership)
        if self._require_flush:
            self._request_flush()
        else:
            self._maybe_advance_hw()
        self._answer_parked()
        return out

    def membership_change_refusal(self, membership: Membership) -> str | None:
        """Why `membership` may not be appended now (None: it may). The single-server rule
        (Ongaro's dissertation, 4.1 and its fix): one change in flight at a time, none before
        an entry of this leader's epoch is committed, at most one voter added or removed,
        and a new voter must be a learner that has caught up. A query: no effects."""
        refusal = self._membership_refusal(membership)
        return None if refusal is None else refusal[1]

    def _membership_refusal(self, membership: Membership) -> tuple[type[Exception], str] | None:
        busy = ReassignmentInProgressError
        if self._role is not _LEADER:
            return NotLeaderError, f"replica {self.replica_id} does not lead"
        if self._mem_offsets:
            return busy, f"the membership change at offset {self._mem_offsets[-1]} is not committed"
        if not self._epoch_committed or self._qs_pending:
            return busy, f"nothing of epoch {self._epoch} is committed yet"
        old = set(self._membership.voters)
        new = set(membership.voters)
        bad = InvalidReplicaAssignmentError
        if len(old ^ new) > 1:
            return bad, (f"voters {sorted(old)} -> {sorted(new)} changes more than one voter:"
                         " add or remove one at a time")
        for added in new - old:
            if added not in self._membership.learners:
                return bad, f"replica {added} must join as a learner and catch up before it votes"
            behind = self._behind(added, self._peers[added], "learner")
            return None if behind is None else (bad, behind)
        return None

    def resign(self) -> list[Effect]:
        """Step down as leader (graceful shutdown); a no-op otherwise."""
        out = self._out = []
        if self._role is _LEADER:
            self._resign()
        return out

    def follower_states(self) -> dict[int, tuple[int, bool]]:
        """On the leader, every other voter's (fetch_offset, in_sync): in sync means it sent
        a fetch within the last check-quorum period (Kafka's ISR rule, by time), or its fetch
        is held (a quiescent follower; its broker is live, else the shell said
        `follower_silent`). Followers not heard from in this epoch have fetch_offset -1.
        Empty on a non-leader."""
        if self._role is not _LEADER:
            return {}
        limit = self._cfg.check_quorum_ticks
        return {v: (p.fetch_offset, p.fetched and not p.silent and (p.held or p.idle_ticks < limit))
                for v, p in self._peers.items()}

    def status(self) -> dict[str, Any]:
        """A snapshot for logs and debugging."""
        return {
            "replica_id": self.replica_id,
            "role": self._role.value,
            "epoch": self._epoch,
            "voted_for": self._voted_for,
            "leader_id": self._active_leader(),
            "log_end_offset": self._end,
            "flushed_offset": self._flushed,
            "high_watermark": self._hw,
            "last_epoch": self.last_epoch,
            "persist_pending": self._qs_pending,
            "transfer_target": self._transfer_target,
            "needs_catch_up": self._needs_catch_up,
            "unclean_election": self._unclean_election,
            "quiescent": self.quiescent,
            "voters": list(self._membership.voters),
            "learners": list(self._membership.learners),
        }

    # ---------------------------------------------------------------------- internals

    def _quorum_voters(self) -> tuple[int, ...]:
        """The voters every majority is counted among (the membership in force)."""
        return self._membership.voters

    def _set_membership(self, membership: Membership) -> None:
        self._membership = membership
        voters = self._quorum_voters()
        self.voters = voters
        self._voter_set = frozenset(voters)
        self._is_voter = self.replica_id in self._voter_set
        self._others = tuple(v for v in voters if v != self.replica_id)
        self._majority = len(voters) // 2 + 1
        members = set(membership.members) | self._voter_set
        members.discard(self.replica_id)
        self._members_others = tuple(sorted(members))
        if self._peers or getattr(self, "_role", None) is _LEADER:
            for v in self._members_others:
                if v not in self._peers:
                    self._peers[v] = _Peer()
            for v in [v for v in self._peers if v not in members]:
                del self._peers[v]  # its parked fetch, if any, is left unanswered: not a member
                self._cq_fetched.discard(v)
        if self._transfer_target is not None and self._transfer_target not in self._voter_set:
            self._transfer_target = None

    def _can_campaign(self) -> bool:
        """A voter runs for election; so does a voter whose removal is not committed yet
        (counting votes among the new voters, not its own), or a group whose only
        up-to-date log sits on a leader that removed itself and lost its quorum before the
        removal committed would never elect again."""
        return self._is_voter or (
            bool(self._mem_offsets) and self.replica_id in self._base_membership.voters
        )

    def _fold_committed_memberships(self) -> None:
        """Membership entries below the high watermark are committed: the last becomes the
        base (persisted with the quorum state, so retention may drop its entry)."""
        offsets = self._mem_offsets
        if not offsets or offsets[0] >= self._hw:
            return
        while offsets and offsets[0] < self._hw:
            self._base_membership_offset = offsets.pop(0)
            self._base_membership = self._mem_entries.pop(0)
        self._persist_quorum_state()

    def _step_down_if_removed(self) -> bool:
        """Leader (from its tick): once its own removal is committed, hand leadership to a
        caught-up voter (TimeoutNow) and resign. True if it did."""
        if self._is_voter or self._mem_offsets:
            return False
        for v in self._others:
            if self._peers[v].fetch_offset == self._end:
                self._send(v, TimeoutNow(self.replica_id, self._epoch))
                break
        self._resign()
        return True

    def _drop_memberships_from(self, offset: int) -> None:
        if self._mem_offsets and self._mem_offsets[-1] >= offset:
            while self._mem_offsets and self._mem_offsets[-1] >= offset:
                self._mem_offsets.pop()
                self._mem_entries.pop()
            self._set_membership(self._mem_entries[-1] if self._mem_entries else self._base_membership)

    def _emit(self, effect: Effect) -> None:
        if self._qs_pending:
            self._held.append(effect)
        else:
            self._out.append(effect)

    def _send(self, to: int, message: Message) -> None:
        if self._qs_pending:
            self._held.append(Send(to, message))
        else:
            self._out.append(Send(to, message))

    def _set_quorum_state(self, epoch: int, voted_for: int | None, leader_id: int | None) -> None:
        if (epoch, voted_for, leader_id) == (self._epoch, self._voted_for, self._leader_id):
            return
        if epoch < self._epoch:
            raise RaftStateError(f"epoch would go back from {self._epoch} to {epoch}")
        if epoch != self._epoch or leader_id != self._leader_id:
            self._catch_up_hw = None  # only a response from the leader of our epoch counts
        self._epoch, self._voted_for, self._leader_id = epoch, voted_for, leader_id
        self._persist_quorum_state()

    def _persist_quorum_state(self) -> None:
        self._qs_version += 1
        eff = PersistQuorumState(self.quorum_state, self._qs_version)
        if self._qs_pending:
            self._held.append(eff)
        else:
            self._out.append(eff)
            self._qs_pending = True
            self._qs_awaited = self._qs_version

    def _active_leader(self) -> int | None:
        role = self._role
        if role is _LEADER or role is _FOLLOWER:
            return self._leader_id
        return None

    def _announce(self) -> None:
        now = (self._epoch, self._active_leader())
        if now != self._announced:
            self._announced = now
            self.leader_changes += 1
            self._emit(LeadershipChanged(now[0], now[1]))

    def _reset_election_timer(self) -> None:
        t = self._cfg.election_timeout_ticks
        self._graced = 0
        self._election_elapsed = 0
        self._election_timeout = self._rng.randrange(t, 2 * t)

    # -- log mirror

    def _truncate(self, offset: int) -> None:
        if offset >= self._end:
            return
        if offset < self._hw:
            raise RaftStateError(
                f"truncation to {offset} is below the high watermark {self._hw}"
            )
        self._emit(TruncateTo(offset))
        self._end = offset
        if self._flushed > offset:
            self._flushed = offset
        if self._flush_in_flight:
            cap = self._flush_cap
            self._flush_cap = offset if cap is None or offset < cap else cap
        starts = self._ep_starts
        while starts and starts[-1] >= offset:
            starts.pop()
            self._ep_epochs.pop()
        self._drop_memberships_from(offset)

    def _truncate_fully(self, offset: int) -> None:
        # Everything we hold is below the leader's log start, which is committed (retention
        # stays below the high watermark): drop it all and restart empty at `offset`.
        self._emit(TruncateFully(offset))
        self._log_start = self._end = self._flushed = offset
        if self._flush_in_flight:
            self._flush_cap = offset
        self._ep_epochs.clear()
        self._ep_starts.clear()
        # Entries below the leader's log start are committed: fold ours (a gap: a change
        # committed there that we never held stays unknown until a later entry; see
        # "Membership changes").
        if self._mem_offsets:
            self._base_membership_offset = self._mem_offsets[-1]
            self._base_membership = self._mem_entries[-1]
            self._mem_offsets.clear()
            self._mem_entries.clear()
            self._persist_quorum_state()
        if offset > self._hw:
            self._hw = offset
            self._emit(HighWatermarkChanged(offset))

    def _request_flush(self) -> None:
        if not self._flush_in_flight and self._flushed < self._end:
            self._flush_in_flight = True
            self._emit(_FLUSH)

    def _raise_log_start(self, offset: int) -> None:
        if offset > self._log_start:
            self._log_start = offset
            self._emit(AdvanceLogStart(offset))
            if self._role is _LEADER:
                self._answer_parked()  # held followers learn the new log start

    def _adopt_reported_log_start(self) -> None:
        # A voter reported a log start above ours: some leader deleted below it, and it was
        # committed there; follow it once our high watermark covers it, so a deletion that a
        # majority held survives a change of leader.
        reported = max((p.log_start for p in self._peers.values()), default=0)
        start = reported if reported < self._hw else self._hw
        if start > self._log_start:
            self._raise_log_start(start)

    def _maybe_advance_low_wm(self) -> None:
        voters = self._voter_set
        values = [self._log_start] if self._is_voter else []
        for v, peer in self._peers.items():
            if v in voters:
                values.append(peer.log_start)
        values.sort(reverse=True)
        low = values[self._majority - 1]
        if low > self._low_wm:
            self._low_wm = low
            self._emit(LowWatermarkChanged(low))

    # -- role changes

    def _leave_leader(self) -> None:
        # Parked fetches are answered NOT_LEADER once the new role is set (_release_parked):
        # a quiescent follower's held fetch would otherwise wait for nobody.
        self._orphans = [(v, p.parked.fetch_id) for v, p in self._peers.items() if p.parked is not None]
        self._peers = {}
        self._transfer_target = None

    def _release_parked(self) -> None:
        """After leaving leadership: answer the fetches that were parked, with our epoch and
        leader hint as they are now."""
        orphans, self._orphans = self._orphans, []
        for v, fetch_id in orphans:
            self._send(v, FetchResponse(
                self.replica_id, self._epoch, self._active_leader(), fetch_id, NOT_LEADER,
            ))  # fmt: skip

    def _become_unattached(self, epoch: int, *, lease_expired: bool = False) -> None:
        if self._role is _LEADER:
            self._leave_leader()
        self._role = _UNATTACHED
        self._quiesced = False
        voted = self._voted_for if epoch == self._epoch else None
        self._set_quorum_state(epoch, voted, None)
        self._fetch_inflight = False
        self._reset_election_timer()
        if lease_expired:
            # The leader told us it is gone: run soon rather than after a full timeout.
            half = self._cfg.election_timeout_ticks // 2
            self._election_timeout = self._rng.randrange(1, half + 2)
        self._announce()
        self._release_parked()

    def _become_follower(self, epoch: int, leader_id: int) -> None:
        if self._role is _LEADER:
            self._leave_leader()
        self._role = _FOLLOWER
        self._quiesced = False
        self._unclean_election = False
        voted = self._voted_for if epoch == self._epoch else None
        self._set_quorum_state(epoch, voted, leader_id)
        self._reset_election_timer()
        self._announce()
        self._release_parked()
        self._fetch_after_flush = False
        self._flush_wait_ticks = 0
        # The first term's fresh follower holds its leader's whole (empty) log: held at once.
        first = self._first_term and self._end == 0 and self._hw == 0 and self._log_start == 0
        self._send_fetch(quiescent=first)

    def _adopt_epoch(self, epoch: int, leader_id: int | None) -> None:
        if leader_id is not None and leader_id != self.replica_id:
            self._become_follower(epoch, leader_id)
        else:
            self._become_unattached(epoch)

    def _start_prevote(self) -> None:
        if self._role is _LEADER:
            self._leave_leader()
        self._role = _PROSPECTIVE
        self._quiesced = False
        self._fetch_inflight = False
        self._grants = {self.replica_id}
        self._reset_election_timer()
        self._announce()
        self._release_parked()
        if len(self._grants & self._voter_set) >= self._majority:
            self._start_candidacy()
            return
        req = VoteRequest(self.replica_id, self._epoch + 1, self.last_epoch, self._end, True,
                          self._unclean_election)
        for v in self._others:
            self._send(v, req)

    def _start_candidacy(self) -> None:
        self.elections_started += 1
        self._role = _CANDIDATE
        self._quiesced = False
        self._fetch_inflight = False
        self._set_quorum_state(self._epoch + 1, self.replica_id, None)
        self._grants = {self.replica_id}
        self._refusals = set()
        self._reset_election_timer()
        self._announce()
        if len(self._grants & self._voter_set) >= self._majority:
            self._become_leader()
            return
        req = VoteRequest(self.replica_id, self._epoch, self.last_epoch, self._end, False,
                          self._unclean_election)
        for v in self._others:
            self._send(v, req)

    def _become_leader(self, *, begin: bool = True) -> None:
        """`begin` False: the first term, whose followers know their leader from the record
        (BeginQuorumEpoch goes only to one that has not fetched after a resend interval)."""
        self._role = _LEADER
        self._unclean_election = False
        self._set_quorum_state(self._epoch, self._voted_for, self.replica_id)
        self._peers = {v: _Peer() for v in self._members_others}
        if not begin:
            for peer in self._peers.values():
                peer.hw_sent = 0  # a fresh follower's own high watermark: nothing to tell
        self._low_wm = 0
        self._cq_elapsed = 0
        self._cq_fetched = set()
        self._begin_elapsed = 0
        self._transfer_target = None
        # The control batch: the first offset of this epoch. The high watermark may pass it
        # only once it is on a majority, which commits every earlier entry with it. A log
        # with no entries, all below it known committed (a new partition), has no earlier
        # entry to commit: no control batch, so its first record sits at offset 0 (Kafka's
        # convention); the epoch enters the epoch cache with the first append.
        offset = self._end
        self._epoch_start_offset = offset
        self._epoch_committed = True  # nothing earlier to commit, until a control batch below
        if offset > self._log_start or self._hw < offset:
            self._epoch_committed = False
            self._emit(AppendControl(self._epoch, offset))
            if not self._ep_epochs or self._ep_epochs[-1] < self._epoch:
                self._ep_epochs.append(self._epoch)
                self._ep_starts.append(offset)
            self._end = offset + 1
        self._announce()
        if begin:
            message = BeginQuorumEpoch(self.replica_id, self._epoch)
            for v in self._members_others:
                self._send(v, message)
        if self._require_flush:
            self._request_flush()
        else:
            self._maybe_advance_hw()

    def _resign(self) -> None:
        self._leave_leader()
        self._role = _RESIGNED
        end = EndQuorumEpoch(self.replica_id, self._epoch)
        for v in self._members_others:
            self._send(v, end)
        self._reset_election_timer()
        self._announce()
        self._release_parked()

    # -- leader

    def _tick_leader(self) -> None:
        cfg = self._cfg
        if self._step_down_if_removed():
            return
        for v, peer in self._peers.items():
            if peer.held:
                continue  # alive as far as its broker's link shows: no timers
            peer.idle_ticks += 1
            if peer.caught_up_ticks >= 0:
                peer.caught_up_ticks += 1
            if peer.parked is not None:
                peer.parked_ticks += 1
                if peer.parked_ticks >= cfg.fetch_max_wait_ticks:
                    self._respond_fetch(peer, peer.parked)
            elif peer.fetched and not peer.silent:
                # Neither fetching nor parked: maybe a quiescent follower whose answer was
                # lost. BeginQuorumEpoch wakes it (a no-op for one that is not quiescent),
                # again at doubling intervals (a dead replica on a live broker costs little).
                if peer.wake_at == 0:
                    peer.wake_at = max(1, cfg.election_timeout_ticks // 2)
                if peer.idle_ticks >= peer.wake_at:
                    peer.wake_at = min(2 * peer.wake_at, peer.idle_ticks
                                       + WAKE_BACKOFF_MAX_TIMEOUTS * cfg.election_timeout_ticks)
                    self._send(v, BeginQuorumEpoch(self.replica_id, self._epoch))
        self._begin_elapsed += 1
        if self._begin_elapsed >= cfg.begin_quorum_resend_ticks:
            self._begin_elapsed = 0
            begin = None
            for v, peer in self._peers.items():
                if not peer.fetched:
                    begin = begin or BeginQuorumEpoch(self.replica_id, self._epoch)
                    self._send(v, begin)
        self._cq_elapsed += 1
        if self._cq_elapsed >= cfg.check_quorum_ticks:
            voters = self._voter_set
            alive = len(self._cq_fetched & voters) + (1 if self._is_voter else 0)
            for v, peer in self._peers.items():
                if peer.held and not peer.silent and v not in self._cq_fetched and v in voters:
                    alive += 1
            if alive < self._majority:
                self._resign()
                return
            self._cq_elapsed = 0
            self._cq_fetched.clear()
        if self._transfer_target is not None:
            self._transfer_elapsed += 1
            if self._transfer_elapsed >= cfg.transfer_timeout_ticks:
                self._transfer_target = None  # give up; writes resume

    def _maybe_advance_hw(self) -> None:
        own = self._flushed if self._require_flush else self._end
        voters = self._voter_set
        values = [own] if self._is_voter else []
        for v, peer in self._peers.items():
            if v in voters:
                values.append(peer.durable_offset)
        values.sort(reverse=True)
        candidate = values[self._majority - 1]
        if candidate > self._hw and candidate > self._epoch_start_offset:
            self._hw = candidate
            self._epoch_committed = True
            self._emit(HighWatermarkChanged(candidate))
            self._adopt_reported_log_start()
            self._fold_committed_memberships()
            if self._role is _LEADER:
                self._answer_parked()

    def _answer_parked(self, *, held: bool = True) -> None:
        """Answer every parked fetch (`held=False`: leave held ones parked)."""
        for peer in self._peers.values():
            if peer.parked is not None and (held or not peer.held):
                self._respond_fetch(peer, peer.parked)

    def _respond_fetch(self, peer: _Peer, req: FetchRequest) -> None:
        if peer.held and not peer.silent:
            # Held until now: live as far as the link shows. It counts as fetching in this
            # check-quorum window, which stood still while we were quiescent and may close
            # before its next fetch is back.
            self._cq_fetched.add(req.sender)
        peer.parked = None
        peer.held = False
        peer.hw_sent = self._hw
        f = req.fetch_offset
        self._send(
            req.sender,
            FetchResponse(
                self.replica_id, self._epoch, self.replica_id, req.fetch_id, None, self._hw, f,
                None, -1, f if f < self._end else None, log_start_offset=self._log_start,
            ),
        )

    def _maybe_send_timeout_now(self) -> None:
        target = self._transfer_target
        if target is None:
            return
        if self._peers[target].fetch_offset == self._end:  # a voter: _set_membership
            self._send(target, TimeoutNow(self.replica_id, self._epoch))

    def _on_fetch_request(self, m: FetchRequest) -> None:
        if m.epoch < self._epoch:
            self._send(m.sender, FetchResponse(
                self.replica_id, self._epoch, self._active_leader(), m.fetch_id,
                FENCED_LEADER_EPOCH,
            ))  # fmt: skip
            return
        if m.epoch > self._epoch:
            self._adopt_epoch(m.epoch, None)
        if self._role is not _LEADER:
            self._send(m.sender, FetchResponse(
                self.replica_id, self._epoch, self._active_leader(), m.fetch_id, NOT_LEADER,
            ))  # fmt: skip
            return
        peer = self._peers.get(m.sender)
        if peer is None:
            return  # not a member of our membership (removed, or not added yet)
        peer.idle_ticks = 0
        peer.wake_at = 0
        peer.silent = False
        peer.parked = None  # superseded: the follower has one fetch in flight
        peer.held = False
        self._cq_fetched.add(m.sender)
        f = m.fetch_offset
        if f < self._log_start:
            peer.fetched = True
            self._send(m.sender, FetchResponse(
                self.replica_id, self._epoch, self.replica_id, m.fetch_id, OFFSET_OUT_OF_RANGE,
                self._hw, f, log_start_offset=self._log_start,
            ))  # fmt: skip
            return
        if f > 0 and not (f == self._log_start and m.last_fetched_epoch == 0):
            e = m.last_fetched_epoch
            div_epoch, div_end = self.end_offset_for_epoch(e)
            if div_epoch != e or div_end < f:
                peer.fetched = True
                self._send(m.sender, FetchResponse(
                    self.replica_id, self._epoch, self.replica_id, m.fetch_id, None, self._hw,
                    f, div_epoch, div_end,
                ))  # fmt: skip
                return
        peer.fetched = True
        peer.fetch_offset = f
        if f >= self._end:
            peer.caught_up_ticks = 0
        durable = m.flushed_offset if self._require_flush else f
        peer.durable_offset = durable if durable < f else f
        if m.log_start_offset > peer.log_start:
            peer.log_start = m.log_start_offset
            self._adopt_reported_log_start()
            self._maybe_advance_low_wm()
        self._maybe_advance_hw()
        if f < self._end or peer.hw_sent != self._hw:
            self._respond_fetch(peer, m)
        else:
            peer.parked = m
            peer.parked_ticks = 0
            if m.quiescent and peer.durable_offset == f and m.log_start_offset >= self._log_start:
                peer.held = True  # no timeout: answered when there is news
                self._send(m.sender, FetchHeld(self.replica_id, self._epoch, m.fetch_id))
        if self._transfer_target == m.sender:
            self._maybe_send_timeout_now()

    # -- follower

    def _send_fetch(self, *, quiescent: bool = False) -> None:
        self._fetch_id += 1
        self._fetch_inflight = True
        self._fetch_elapsed = 0
        self._fetch_after_flush = False
        self._flush_wait_ticks = 0
        self._quiesced = False
        durable = self._flushed if self._require_flush else self._end
        self._send(self._leader_id, FetchRequest(
            self.replica_id, self._epoch, self._end, self.last_epoch, durable, self._fetch_id,
            self._log_start, quiescent,
        ))  # fmt: skip

    def _fetch_timeout_ticks(self) -> int:
        """A learner waits an election timeout for an answer (a leader's replication throttle
        holds its fetch up to one answer's worth of the rate, and an answer asked for again
        is sent and charged twice: issue 44); it counts toward no commit or lease, so a lost
        fetch only delays its catch-up. A voter waits fetch_request_timeout_ticks."""
        if self.replica_id in self._membership.learners:
            return max(self._cfg.fetch_request_timeout_ticks, self._cfg.election_timeout_ticks)
        return self._cfg.fetch_request_timeout_ticks

    def fetch_left(self, fetch_id: int) -> None:
        """The shell sent fetch `fetch_id` only now (a replication throttle held it back:
        partition/throttle.py): its timeout counts from now, so an answer on its way is not
        asked for again (issue 44: those answers, charged twice, cost a throttled move 6 %
        of its rate). No effects."""
        if self._fetch_inflight and fetch_id == self._fetch_id:
            self._fetch_elapsed = 0

    def _on_fetch_held(self, m: FetchHeld) -> None:
        if (
            m.epoch == self._epoch and self._role is _FOLLOWER and m.sender == self._leader_id
            and self._fetch_inflight and m.fetch_id == self._fetch_id
        ):
            self._quiesced = True

    def _on_fetch_response(self, m: FetchResponse) -> None:
        if m.epoch > self._epoch:
            self._adopt_epoch(m.epoch, m.leader_id)
            return
        if (
            m.epoch < self._epoch
            or self._role is not _FOLLOWER
            or m.sender != self._leader_id
            or not self._fetch_inflight
            or m.fetch_id != self._fetch_id
        ):
            return  # stale, duplicated or reordered
        self._fetch_inflight = False
        self._quiesced = False
        self._unreachable_seen = None  # the leader answered: a later silence counts again
        self._graced = 0
        if m.error == OFFSET_OUT_OF_RANGE:
            self._election_elapsed = 0
            if m.log_start_offset > self._end:
                self._truncate_fully(m.log_start_offset)
            self._send_fetch()
            return
        if m.error is not None:
            # Same epoch, and our leader says it does not lead: it resigned.
            self._become_unattached(self._epoch, lease_expired=True)
            return
        self._election_elapsed = 0
        if m.diverging_epoch is not None:
            self._truncate(self._divergence_point(m.diverging_epoch, m.diverging_end_offset))
            self._send_fetch()
            return
        if m.fetch_offset != self._end:
            self._send_fetch()
            return
        if m.batches:
            self._append_replicated(m)
        elif m.records:
            raise RaftStateError("fetch response carries records but no batch summary")
        hw = m.high_watermark
        if self._needs_catch_up:
            self._catch_up_hw = hw
        if hw > self._end:
            hw = self._end
        news = bool(m.batches) or hw > self._hw
        if hw > self._hw:
            self._hw = hw
            self._emit(HighWatermarkChanged(hw))
            self._fold_committed_memberships()
        # The leader's log start (DeleteRecords, retention), never past our high watermark:
        # we drop only committed records, which the leader no longer serves either.
        start = m.log_start_offset if m.log_start_offset < self._hw else self._hw
        if start > self._log_start:
            self._raise_log_start(start)
        if self._needs_catch_up:
            self._maybe_caught_up()
        if self._require_flush and self._flushed < self._end and (
                self.replica_id not in self._membership.learners or not m.batches):
            self._request_flush()
            self._fetch_after_flush = True
            self._flush_wait_ticks = 0
        elif self._require_flush and self._flushed < self._end:
            self._request_flush()  # a learner: fetch on while it runs (docstring "Membership changes")
            self._send_fetch()
        else:
            # The leader parked our fetch for its whole wait and nothing came (no records, no
            # new high watermark), and nothing is pending here: ask it to hold the next one
            # until there is news (module docstring "Quiescence"). Not after a response that
            # brought news: under load that would cost two messages more per write.
            self._send_fetch(quiescent=(
                not news and self._hw == self._end and self._flushed == self._end
                and not self._needs_catch_up and self._log_start >= m.log_start_offset
            ))  # fmt: skip

    def _maybe_caught_up(self) -> None:
        # Caught up = we durably hold (a) the leader's high watermark as of a fetch we sent
        # after the damage (the leader counted our report of that fetch, not our pre-damage
        # one), and (b) an entry of the leader's epoch, i.e. its control batch, so everything
        # committed in earlier epochs too (a new leader's HW may still be below those).
        target = self._catch_up_hw
        if target is None or self._role is not _FOLLOWER or self.last_epoch != self._epoch:
            return
        durable = self._flushed if self._require_flush else self._end
        if durable >= target and durable > self._ep_starts[-1]:
            self._needs_catch_up = False
            self._catch_up_hw = None
            self._persist_quorum_state()

    def _divergence_point(self, epoch: int, end_offset: int) -> int:
        if end_offset < 0:
            return self._log_start  # the leader has no epoch <= ours: nothing is shared
        own_epoch, own_end = self.end_offset_for_epoch(epoch)
        if own_epoch < 0:
            return self._log_start
        point = end_offset if end_offset < own_end else own_end
        return point if point < self._end else self._end

    def _append_replicated(self, m: FetchResponse) -> None:
        expected = self._end
        last_epoch = self.last_epoch
        for base, last, epoch in m.batches:
            if base != expected or last < base or epoch < last_epoch or epoch > m.epoch:
                raise RaftStateError(
                    f"replicated batch [{base}, {last}] epoch {epoch} does not follow"
                    f" end {expected} epoch {last_epoch} (leader epoch {m.epoch})"
                )
            expected = last + 1
            last_epoch = epoch
        previous = self._end
        for offset, _membership in m.memberships:
            if not previous <= offset < expected:
                raise RaftStateError(f"membership entry at {offset} outside [{self._end}, {expected})")
            previous = offset + 1
        if m.memberships:
            first = not self._mem_offsets
            for offset, membership in m.memberships:
                self._mem_offsets.append(offset)
                self._mem_entries.append(membership)
            if first:  # where recovery must look for them, durable before they are written
                self._persist_quorum_state()
        self._emit(AppendReplicated(m.records, self._end, expected))
        for base, _last, epoch in m.batches:
            if not self._ep_epochs or epoch > self._ep_epochs[-1]:
                self._ep_epochs.append(epoch)
                self._ep_starts.append(base)
        self._end = expected
        if m.memberships:
            self._set_membership(self._mem_entries[-1])

    # -- elections

    def _on_vote_request(self, m: VoteRequest) -> None:
        # A replica that lost data cannot judge whether the candidate's log holds every
        # committed entry: it refuses (but still learns a higher epoch from a real vote),
        # unless an operator accepted that loss on the candidate (`unclean`).
        log_ok = (
            (not self._needs_catch_up or m.unclean)
            and (m.last_epoch, m.log_end_offset) >= (self.last_epoch, self._end)
        )
        if m.pre_vote:
            lease = self._role is _LEADER or (
                self._role is _FOLLOWER
                and self._election_elapsed < self._cfg.election_timeout_ticks
            )
            granted = m.epoch > self._epoch and log_ok and not lease
            self._send(m.sender, VoteResponse(
                self.replica_id, self._epoch, granted, True, self._active_leader(),
            ))  # fmt: skip
            if self._quiesced:
                # Somebody misses our leader. Our lease holds (refused above), but check the
                # leader with a fetch now: if it no longer holds ours, the lease runs out.
                self._send_fetch()
            return
        if m.epoch > self._epoch:
            self._become_unattached(m.epoch)
        granted = (
            m.epoch == self._epoch
            and self._leader_id is None
            and (self._voted_for is None or self._voted_for == m.sender)
            and log_ok
        )
        if granted and self._voted_for is None:
            self._set_quorum_state(self._epoch, m.sender, None)
            self._reset_election_timer()
        self._send(m.sender, VoteResponse(
            self.replica_id, self._epoch, granted, False, self._active_leader(),
        ))  # fmt: skip

    def _on_vote_response(self, m: VoteResponse) -> None:
        if m.epoch > self._epoch:
            self._adopt_epoch(m.epoch, m.leader_id)
            return
        if m.pre_vote:
            if self._role is not _PROSPECTIVE:
                return
            if m.granted:
                self._grants.add(m.sender)
                if len(self._grants & self._voter_set) >= self._majority:
                    self._start_candidacy()
            elif (
                m.epoch == self._epoch
                and m.leader_id is not None
                and m.leader_id != self.replica_id
            ):
                if self._unreachable_seen == (self._epoch, m.leader_id) and not self._unreachable_retried:
                    # We could not reach that leader; the responder has not noticed yet (it
                    # learns within moments: a refused connection or the link's silence).
                    # Ask again within one stagger window instead of following a leader we
                    # know is gone and waiting a whole timeout. Once per leader_unreachable:
                    # with only a partial partition, the responder's lease is right.
                    self._unreachable_retried = True
                    self._election_elapsed = 0
                    self._election_timeout = self._stagger([self.replica_id])
                    return
                self._become_follower(self._epoch, m.leader_id)  # a live leader exists
                # ... or so the responder believes: we have not heard from it ourselves, so
                # hold no lease for it (grant pre-votes) and run again within one timeout if
                # its fetches fail too. Two followers of a dead leader otherwise keep
                # sending each other back to it, a full election timeout each time.
                self._election_elapsed = self._cfg.election_timeout_ticks
            return
        if self._role is _CANDIDATE and m.epoch == self._epoch:
            if m.granted:
                self._grants.add(m.sender)
                if len(self._grants & self._voter_set) >= self._majority:
                    self._become_leader()
            elif m.sender not in self._refusals and m.sender in self._voter_set:
                self._refusals.add(m.sender)
                if 2 * len(self._refusals) >= len(self._others):
                    self._retry_split_vote()

    def _retry_split_vote(self) -> None:
        """A candidate refused by half its fellow voters (most often they voted for another
        this epoch: in a group of three, the other survivor of a dead leader ran at the
        same time) can win only with every vote still out, and a dead leader's never comes.
        Instead of a whole randomized election timeout (1-2 s, longer as ticks slow under
        load: the tail of a node kill's failover), each contender runs again within its
        own stagger window (as `leader_unreachable`: ranked among the refusers and itself,
        first place rotating with the epoch), so the first one's pre-vote and vote find the
        other granting. Only the timing changes: the retry is a pre-vote, which a live
        leader's lease refuses, and so does a voter whose log is ahead of ours."""
        retry = self._stagger(sorted(self._refusals | {self.replica_id}))
        if retry < self._election_timeout - self._election_elapsed:
            self._election_elapsed = 0
            self._election_timeout = retry

    def _stagger(self, contenders: list[int]) -> int:
        """Ticks until this replica runs, one of `contenders` (this replica among them, in
        an order all of them share) who would otherwise run at once: each gets a window of
        its own, election timeout / UNREACHABLE_WINDOW_DIVISOR wide, in rank order (first
        place rotating with the epoch), and runs at a random tick of it."""
        window = max(1, self._cfg.election_timeout_ticks // UNREACHABLE_WINDOW_DIVISOR)
        return 1 + self._rank(contenders) * window + self._rng.randrange(window)

    def _rank(self, contenders: list[int]) -> int:
        """This replica's place among `contenders` (`_stagger`): first place rotates with the epoch."""
        return (contenders.index(self.replica_id) - self._epoch) % len(contenders)

    def _on_begin_quorum_epoch(self, m: BeginQuorumEpoch) -> None:
        if m.epoch > self._epoch:
            self._become_follower(m.epoch, m.sender)
        elif m.epoch == self._epoch and self._role is not _LEADER and self._role is not _RESIGNED:
            if self._role is not _FOLLOWER or self._leader_id != m.sender:
                self._become_follower(m.epoch, m.sender)
            elif self._quiesced:
                self._send_fetch()  # the leader's wake: the answer to our held fetch was lost

    def _on_end_quorum_epoch(self, m: EndQuorumEpoch) -> None:
        if m.epoch == self._epoch and self._role is _FOLLOWER and self._leader_id == m.sender:
            self._become_unattached(self._epoch, lease_expired=True)
        elif m.epoch > self._epoch:
            self._become_unattached(m.epoch, lease_expired=True)

    def _on_timeout_now(self, m: TimeoutNow) -> None:
        if (
            m.epoch == self._epoch and self._role is _FOLLOWER and self._leader_id == m.sender
            and not self._needs_catch_up and self._can_campaign()
        ):
            self._start_candidacy()
