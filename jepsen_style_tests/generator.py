"""Pure, composable generators of operations (Jepsen's generator model, in Python).

A generator is an immutable value. The interpreter (the runner; `simulate` here for tests)
asks it for an op with a `Context` and tells it what happened:

``gen.op(ctx)`` returns one of

* ``None`` — the generator is exhausted;
* ``(op, gen2)`` — dispatch ``op`` (an ``invoke`` `Op` for a process that is free in ``ctx``,
  stamped ``time_ns = ctx.time_ns``) *now*, and continue with ``gen2`` (``None`` if that was
  the last op);
* ``(Pending(wake_ns), gen2)`` — nothing to do now; ask again after the next event, or at
  ``wake_ns`` if that is not None. Nothing is owed: asking early is always allowed.

``gen.update(ctx, event)`` returns the generator after an event (every invoke the
interpreter dispatched and every completion, in history order).

Invariants:

* Pure: no clock (time is ``ctx.time_ns``), no I/O, no global random — randomness comes from
  ``ctx.rng`` (a seeded `random.Random` owned by the interpreter). Given the same seed and the
  same sequence of ``op``/``update`` calls, a generator yields the same ops.
* Combinators consume randomness only when they emit (or on their first ask), so how often an
  idle interpreter polls a generator does not change the sequence of ops — except that the
  process that gets an op is drawn from ``ctx.rng`` at every ask that finds one free.
* Emitted ops always go to a process in ``ctx.free``; with none free a leaf is `Pending`.

Plain values lift to generators (`lift`): a ``dict`` is one op (``{"f": ..., "value": ...,
other keys -> Op.extra}``, an optional ``"process"`` pins it); a callable ``fn(ctx) -> dict |
None`` is called for every op until it returns None; a list or tuple runs its elements in
sequence; ``None`` is an exhausted generator.

Op shapes are documented in `jepsen_style_tests.history`. Nemesis ops go to process
`NEMESIS`; wrap client workloads in `clients` and fault schedules in `nemesis`. The generators
here emit: `sends` -> ``send [key, v]``; `polls` -> ``poll`` (extra ``poll_ms``); `reassigns`
-> ``assign``/``subscribe [key, ...]``; `fault_cycle` -> the start/stop specs of its `Fault`s;
`final_reads` -> ``end-offsets [key, ...]``, ``assign`` (extra ``seek_to_beginning``), ``poll``;
`final_phase` -> ``stop-stranger``, ``stop-partition``, ``stop-delay``, ``stop-pause``,
``stop-disk-full``, ``stop-kill`` first.

The interpreter contract (what `simulate` does and the runner must do the same way):

1. ``ctx = Context(now_ns, processes, free, rng)`` with ``processes`` = the live client ids
   then ``"nemesis"``, ``rng = random.Random(seed)`` created once per run.
2. ``step = gen.op(ctx)``. An `Op`: stamp ``wall_time``, append it to the history, then
   ``gen = gen.update(ctx, op)``, mark its process busy and hand it to that worker; ask again.
   `Pending`: wait for the next completion or until ``wake_ns``, whichever is first.
   ``None``: wait for the ops in flight, record them, and stop.
3. On a completion: append it, ``gen = gen.update(ctx, completion)``, free the process — but a
   client process whose op ended ``info`` is retired and its worker continues as
   ``process + concurrency`` with a fresh client.

Size (issue 13's ~800-line rule): over it because the small generator combinators (as in
Jepsen's generator library) read best beside the interpreter that runs them; the
interpreter is the seam.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Union

from .history import NEMESIS, History, HarnessError, Op

__all__ = [
    "Context",
    "Pending",
    "Generator",
    "Fault",
    "lift",
    "once",
    "repeat",
    "seq",
    "mix",
    "any_of",
    "stagger",
    "delay",
    "rate",
    "time_limit",
    "sleep",
    "synchronize",
    "phases",
    "on_processes",
    "clients",
    "nemesis",
    "each_process",
    "sends",
    "polls",
    "reassigns",
    "fault_cycle",
    "final_reads",
    "final_phase",
    "simulate",
    "GeneratorError",
    "SEC_NS",
]

SEC_NS = 1_000_000_000
Process = Union[int, str]


class GeneratorError(HarnessError):
    code = "generator-invalid"


def _process_sort_key(process: Process) -> tuple[int, Any]:
    # Clients (ints) before the nemesis (str); a stable order keeps rng draws reproducible.
    return (1, str(process)) if isinstance(process, str) else (0, process)


@dataclass(frozen=True)
class Context:
    """What a generator may know when asked: time, processes, randomness.

    `processes` are all live processes (clients then the nemesis), `free` those not running an
    op. `rng` is shared and seeded by the interpreter."""

    time_ns: int
    processes: tuple[Process, ...]
    free: frozenset[Process]
    rng: random.Random

    def restrict(self, keep: Callable[[Process], bool]) -> Context:
        return replace(
            self,
            processes=tuple(p for p in self.processes if keep(p)),
            free=frozenset(p for p in self.free if keep(p)),
        )

    def all_free(self) -> bool:
        return self.free.issuperset(self.processes)

    def some_free(self) -> Process | None:
        """A free process drawn from `rng`, or None if none is free."""
        if not self.free:
            return None
        return self.rng.choice(sorted(self.free, key=_process_sort_key))


@dataclass(frozen=True, slots=True)
class Pending:
    """Nothing to emit now; ask again after the next event or at `wake_ns` (if set)."""

    wake_ns: int | None = None


Step = tuple[Union[Op, Pending], Union["Generator", None]]

_NOT_OP_KEYS = frozenset({"f", "value", "process", "type"})


def _min_wake(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _invoke(ctx: Context, spec: Mapping[str, Any]) -> Op | Pending:
    """An invoke op from a spec dict for a free process (the pinned one, or a random one)."""
    if "f" not in spec:
        raise GeneratorError(f"op spec without 'f': {dict(spec)!r}")
    process = spec.get("process")
    if process is None:
        process = ctx.some_free()
        if process is None:
            return Pending()
    elif process not in ctx.free:
        return Pending()
    return Op(
        type="invoke",
        f=spec["f"],
        process=process,
        value=spec.get("value"),
        time_ns=ctx.time_ns,
        extra={k: v for k, v in spec.items() if k not in _NOT_OP_KEYS},
    )


class Generator:
    """Base class. Subclasses are immutable; `op` and `update` return new generators."""

    def op(self, ctx: Context) -> Step | None:
        raise NotImplementedError

    def update(self, ctx: Context, event: Op) -> Generator:
        return self


def lift(x: Any) -> Generator | None:
    """Turns a dict / callable / list / generator / None into a generator (see module doc)."""
    if x is None or isinstance(x, Generator):
        return x
    if isinstance(x, Mapping):
        return _Once(x)
    if isinstance(x, (list, tuple)):
        return _Seq(tuple(x))
    if callable(x):
        return _Fn(x)
    raise GeneratorError(f"cannot make a generator of {type(x).__name__}: {x!r}")


def _step_of(gen: Generator | None, ctx: Context) -> Step | None:
    return gen.op(ctx) if gen is not None else None


@dataclass(frozen=True)
class _Once(Generator):
    spec: Mapping[str, Any]

    def op(self, ctx: Context) -> Step | None:
        emitted = _invoke(ctx, self.spec)
        if isinstance(emitted, Pending):
            return emitted, self
        return emitted, None


@dataclass(frozen=True)
class _Fn(Generator):
    fn: Callable[[Context], Mapping[str, Any] | None]

    def op(self, ctx: Context) -> Step | None:
        if not ctx.free:
            return Pending(), self  # don't call fn (it may draw randomness) when no one can run it
        spec = self.fn(ctx)
        if spec is None:
            return None
        emitted = _invoke(ctx, spec)
        return emitted, self


def once(spec: Any) -> Generator | None:
    """Emits the first op of `spec` (a dict or any generator) and stops."""
    return _Limit(lift(spec), 1)


@dataclass(frozen=True)
class _Limit(Generator):
    gen: Generator | None
    remaining: int

    def op(self, ctx: Context) -> Step | None:
        if self.remaining <= 0:
            return None
        step = _step_of(self.gen, ctx)
        if step is None:
            return None
        emitted, after = step
        if isinstance(emitted, Pending):
            return emitted, _Limit(after, self.remaining)
        return emitted, _Limit(after, self.remaining - 1)

    def update(self, ctx: Context, event: Op) -> Generator:
        return _Limit(self.gen.update(ctx, event) if self.gen else None, self.remaining)


@dataclass(frozen=True)
class _Repeat(Generator):
    gen: Generator
    remaining: int | None

    def op(self, ctx: Context) -> Step | None:
        if self.remaining is not None and self.remaining <= 0:
            return None
        step = self.gen.op(ctx)
        if step is None:
            return None
        emitted, after = step
        if isinstance(emitted, Pending):
            return emitted, _Repeat(after if after is not None else self.gen, self.remaining)
        # Jepsen's repeat: the wrapped generator's state does not advance on emission.
        left = None if self.remaining is None else self.remaining - 1
        return emitted, _Repeat(self.gen, left)

    def update(self, ctx: Context, event: Op) -> Generator:
        return _Repeat(self.gen.update(ctx, event), self.remaining)


def repeat(spec: Any, limit: int | None = None) -> Generator | None:
    """Emits `spec`'s first op again and again (forever, or `limit` times), not advancing it.

    ``repeat({"f": "poll"})`` polls forever; a callable spec is re-called each time."""
    gen = lift(spec)
    return None if gen is None else _Repeat(gen, limit)


@dataclass(frozen=True)
class _Seq(Generator):
    gens: tuple[Any, ...]

    def op(self, ctx: Context) -> Step | None:
        gens = self.gens
        while gens:
            head = lift(gens[0])
            step = _step_of(head, ctx)
            if step is None:
                gens = gens[1:]
                continue
            emitted, after = step
            rest = gens[1:] if after is None else (after,) + gens[1:]
            return emitted, (_Seq(rest) if rest else None)
        return None

    def update(self, ctx: Context, event: Op) -> Generator:
        if not self.gens:
            return self
        head = lift(self.gens[0])
        if head is None:
            return self
        return _Seq((head.update(ctx, event),) + self.gens[1:])


def seq(*specs: Any) -> Generator:
    """Runs each generator to exhaustion, in order (updates go to the current one)."""
    return _Seq(tuple(specs))


@dataclass(frozen=True)
class _Mix(Generator):
    gens: tuple[Generator, ...]
    chosen: int | None

    def op(self, ctx: Context) -> Step | None:
        gens = self.gens
        chosen = self.chosen
        while gens:
            if chosen is None or chosen >= len(gens):
                chosen = ctx.rng.randrange(len(gens))
            step = gens[chosen].op(ctx)
            if step is None:
                gens = gens[:chosen] + gens[chosen + 1 :]
                chosen = None
                continue
            emitted, after = step
            if after is None:
                left = gens[:chosen] + gens[chosen + 1 :]
            else:
                left = gens[:chosen] + (after,) + gens[chosen + 1 :]
            if isinstance(emitted, Pending):
                keep = chosen if after is not None else None
                return emitted, _Mix(left, keep)
            # The next choice is drawn at emission, so idle asks consume no randomness.
            nxt = ctx.rng.randrange(len(left)) if left else None
            return emitted, (_Mix(left, nxt) if left else None)
        return None

    def update(self, ctx: Context, event: Op) -> Generator:
        return _Mix(tuple(g.update(ctx, event) for g in self.gens), self.chosen)


def mix(*specs: Any) -> Generator:
    """Each op comes from one of `specs` picked at random (uniformly); exhausted ones drop out."""
    gens = tuple(g for g in (lift(s) for s in specs) if g is not None)
    return _Mix(gens, None)


@dataclass(frozen=True)
class _Any(Generator):
    gens: tuple[Generator, ...]

    def op(self, ctx: Context) -> Step | None:
        after_each: list[Generator | None] = list(self.gens)
        wake: int | None = None
        for i, gen in enumerate(self.gens):
            step = gen.op(ctx)
            if step is None:
                after_each[i] = None
                continue
            emitted, after_each[i] = step
            if not isinstance(emitted, Pending):
                # First in argument order wins: put the nemesis schedule first so clients
                # that are always ready cannot starve it. Later gens were not asked.
                return emitted, self._of(after_each)
            wake = _min_wake(wake, emitted.wake_ns)
        nxt = self._of(after_each)
        return None if nxt is None else (Pending(wake), nxt)

    @staticmethod
    def _of(gens: list[Generator | None]) -> _Any | None:
        alive = tuple(g for g in gens if g is not None)
        return _Any(alive) if alive else None

    def update(self, ctx: Context, event: Op) -> Generator:
        return _Any(tuple(g.update(ctx, event) for g in self.gens))


def any_of(*specs: Any) -> Generator:
    """Runs generators side by side: each ask takes the first one (in order) that emits."""
    return _Any(tuple(g for g in (lift(s) for s in specs) if g is not None))


@dataclass(frozen=True)
class _Paced(Generator):
    gen: Generator | None
    interval_ns: int
    jitter: bool
    next_ns: int | None

    def op(self, ctx: Context) -> Step | None:
        if self.gen is None:
            return None
        due = ctx.time_ns if self.next_ns is None else self.next_ns
        if ctx.time_ns < due:
            return Pending(due), replace(self, next_ns=due)
        step = self.gen.op(ctx)
        if step is None:
            return None
        emitted, after = step
        if isinstance(emitted, Pending):
            return emitted, replace(self, gen=after, next_ns=due)
        if self.jitter:
            # stagger: uniform in [0, 2*interval] after now, so the mean gap is the interval.
            nxt = ctx.time_ns + ctx.rng.randint(0, 2 * self.interval_ns)
        else:
            # delay/rate: a fixed schedule; if the runner falls behind it catches up.
            nxt = due + self.interval_ns
        return emitted, replace(self, gen=after, next_ns=nxt)

    def update(self, ctx: Context, event: Op) -> Generator:
        return replace(self, gen=self.gen.update(ctx, event) if self.gen else None)


def stagger(interval_ns: int, spec: Any) -> Generator:
    """Ops spaced by uniformly random gaps in ``[0, 2*interval_ns]`` (mean `interval_ns`)."""
    return _Paced(lift(spec), int(interval_ns), True, None)


def delay(interval_ns: int, spec: Any) -> Generator:
    """Ops on a fixed schedule, `interval_ns` apart (the first at once)."""
    return _Paced(lift(spec), int(interval_ns), False, None)


def rate(ops_per_s: float, spec: Any) -> Generator:
    """Ops at a fixed rate: `delay` with interval ``1e9 / ops_per_s``."""
    if ops_per_s <= 0:
        raise GeneratorError(f"rate must be positive, got {ops_per_s}")
    return delay(max(1, round(SEC_NS / ops_per_s)), spec)


@dataclass(frozen=True)
class _TimeLimit(Generator):
    gen: Generator | None
    limit_ns: int
    deadline_ns: int | None

    def op(self, ctx: Context) -> Step | None:
        deadline = self.deadline_ns if self.deadline_ns is not None else ctx.time_ns + self.limit_ns
        if ctx.time_ns >= deadline or self.gen is None:
            return None
        step = self.gen.op(ctx)
        if step is None:
            return None
        emitted, after = step
        nxt = _TimeLimit(after, self.limit_ns, deadline)
        if isinstance(emitted, Pending):
            return Pending(_min_wake(emitted.wake_ns, deadline)), nxt
        return emitted, nxt

    def update(self, ctx: Context, event: Op) -> Generator:
        return replace(self, gen=self.gen.update(ctx, event) if self.gen else None)


def time_limit(limit_ns: int, spec: Any) -> Generator:
    """Emits `spec`'s ops until `limit_ns` after the first ask; then it is exhausted."""
    return _TimeLimit(lift(spec), int(limit_ns), None)


@dataclass(frozen=True)
class _Sleep(Generator):
    duration_ns: int
    until_ns: int | None

    def op(self, ctx: Context) -> Step | None:
        until = self.until_ns if self.until_ns is not None else ctx.time_ns + self.duration_ns
        if ctx.time_ns >= until:
            return None
        return Pending(until), _Sleep(self.duration_ns, until)


def sleep(duration_ns: int) -> Generator:
    """Emits nothing for `duration_ns` after its first ask (use inside `seq`/`phases`)."""
    return _Sleep(int(duration_ns), None)


@dataclass(frozen=True)
class _Synchronize(Generator):
    gen: Generator | None

    def op(self, ctx: Context) -> Step | None:
        if self.gen is None:
            return None
        if not ctx.all_free():
            return Pending(), self
        return self.gen.op(ctx)  # once started, the plain generator continues

    def update(self, ctx: Context, event: Op) -> Generator:
        return _Synchronize(self.gen.update(ctx, event) if self.gen else None)


def synchronize(spec: Any) -> Generator:
    """Waits until every process in the context is free, then runs `spec`."""
    return _Synchronize(lift(spec))


def phases(*specs: Any) -> Generator:
    """Runs `specs` one after another; each later phase waits for all processes to be free."""
    if not specs:
        return _Seq(())
    return _Seq((specs[0],) + tuple(synchronize(s) for s in specs[1:]))


@dataclass(frozen=True)
class _On(Generator):
    keep: Callable[[Process], bool]
    gen: Generator | None

    def op(self, ctx: Context) -> Step | None:
        step = _step_of(self.gen, ctx.restrict(self.keep))
        if step is None:
            return None
        emitted, after = step
        return emitted, (_On(self.keep, after) if after is not None else None)

    def update(self, ctx: Context, event: Op) -> Generator:
        if self.gen is None or not self.keep(event.process):
            return self
        return _On(self.keep, self.gen.update(ctx.restrict(self.keep), event))


def on_processes(keep: Callable[[Process], bool], spec: Any) -> Generator:
    """Restricts `spec` to processes for which `keep` is true (it sees only their events)."""
    return _On(keep, lift(spec))


def _is_client(process: Process) -> bool:
    return process != NEMESIS


def _is_nemesis(process: Process) -> bool:
    return process == NEMESIS


def clients(spec: Any) -> Generator:
    """`spec` runs on client processes only."""
    return _On(_is_client, lift(spec))


def nemesis(spec: Any) -> Generator:
    """`spec` runs on the nemesis process only."""
    return _On(_is_nemesis, lift(spec))


@dataclass(frozen=True)
class _EachProcess(Generator):
    template: Generator
    copies: tuple[tuple[Process, Generator | None], ...]  # None: that process is done

    def op(self, ctx: Context) -> Step | None:
        copies = dict(self.copies)
        wake: int | None = None
        for process in sorted(ctx.free, key=_process_sort_key):
            gen = copies.get(process, self.template)
            if gen is None:
                continue
            only = ctx.restrict(lambda p, process=process: p == process)
            step = gen.op(only)
            if step is None:
                copies[process] = None
                continue
            emitted, after = step
            copies[process] = after
            if not isinstance(emitted, Pending):
                return emitted, self._with(copies)
            wake = _min_wake(wake, emitted.wake_ns)
        if all(copies.get(p, self.template) is None for p in ctx.processes):
            return None
        return Pending(wake), self._with(copies)

    def _with(self, copies: dict[Process, Generator | None]) -> _EachProcess:
        return _EachProcess(self.template, tuple(sorted(copies.items(), key=lambda kv: _process_sort_key(kv[0]))))

    def update(self, ctx: Context, event: Op) -> Generator:
        copies = dict(self.copies)
        gen = copies.get(event.process, self.template)
        if gen is None:
            return self
        copies[event.process] = gen.update(ctx, event)
        return self._with(copies)


def each_process(spec: Any) -> Generator:
    """Every process runs its own copy of `spec`; done when every live process's copy is."""
    gen = lift(spec)
    if gen is None:
        raise GeneratorError("each_process needs a generator")
    return _EachProcess(gen, ())


# ----------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class _Sends(Generator):
    keys: tuple[str, ...]
    next_value: int
    extra: tuple[tuple[str, Any], ...]

    def op(self, ctx: Context) -> Step | None:
        if not ctx.free:
            return Pending(), self
        key = ctx.rng.choice(self.keys)
        spec = {"f": "send", "value": [key, self.next_value], **dict(self.extra)}
        emitted = _invoke(ctx, spec)
        return emitted, replace(self, next_value=self.next_value + 1)


def sends(keys: Sequence[str], *, first_value: int = 0, **extra: Any) -> Generator:
    """Infinite ``send`` ops to random keys; values are consecutive ints, unique for the run
    (so unique per key, which the checker relies on)."""
    if not keys:
        raise GeneratorError("sends needs at least one key")
    return _Sends(tuple(keys), first_value, tuple(sorted(extra.items())))


def polls(*, poll_ms: int = 100) -> Generator:
    """Infinite ``poll`` ops."""
    return _Repeat(_Once({"f": "poll", "poll_ms": poll_ms}), None)


def reassigns(keys: Sequence[str], *, f: str = "assign", max_keys: int | None = None, **extra: Any) -> Generator:
    """Infinite ``assign`` (or ``subscribe``) ops to a random non-empty subset of `keys`."""
    pool = tuple(keys)
    if not pool:
        raise GeneratorError("reassigns needs at least one key")
    top = min(len(pool), max_keys or len(pool))

    def make(ctx: Context) -> dict[str, Any]:
        chosen = sorted(ctx.rng.sample(pool, ctx.rng.randint(1, top)))
        return {"f": f, "value": chosen, **extra}

    return _Fn(make)


@dataclass(frozen=True)
class Fault:
    """A fault the nemesis can start and stop: two op specs (``process`` is set for you)."""

    name: str
    start: Mapping[str, Any]
    stop: Mapping[str, Any]


@dataclass(frozen=True)
class _FaultCycle(Generator):
    faults: tuple[Fault, ...]
    quiet_ns: int
    fault_ns: int
    active: Fault | None
    due_ns: int | None
    round_left: tuple[str, ...] = ()  # fault names not yet drawn in this round

    def op(self, ctx: Context) -> Step | None:
        due = self.due_ns if self.due_ns is not None else ctx.time_ns + self.quiet_ns
        if ctx.time_ns < due:
            return Pending(due), replace(self, due_ns=due)
        if NEMESIS not in ctx.free:
            return Pending(), replace(self, due_ns=due)
        if self.active is None:
            left = self.round_left or tuple(dict.fromkeys(f.name for f in self.faults))
            name = ctx.rng.choice(left)
            fault = ctx.rng.choice([f for f in self.faults if f.name == name])
            emitted = _invoke(ctx, {**fault.start, "process": NEMESIS})
            return emitted, replace(self, active=fault, due_ns=ctx.time_ns + self.fault_ns,
                                    round_left=tuple(n for n in left if n != name))
        emitted = _invoke(ctx, {**self.active.stop, "process": NEMESIS})
        return emitted, replace(self, active=None, due_ns=ctx.time_ns + self.quiet_ns)


def fault_cycle(faults: Sequence[Fault], *, quiet_ns: int, fault_ns: int) -> Generator:
    """Forever: wait `quiet_ns`, start a fault chosen at random, wait `fault_ns`, stop it.

    Faults are drawn in rounds: each round draws every fault name once, in random order, and
    a fault of that name at random (a name with five shapes, such as a partition, does not
    crowd out a name with one), so a run of k cycles meets k distinct names, up to all.
    Wrap in `time_limit`; the final phase heals whatever is left on."""
    if not faults:
        raise GeneratorError("fault_cycle needs at least one fault")
    return _FaultCycle(tuple(faults), int(quiet_ns), int(fault_ns), None, None)


@dataclass(frozen=True)
class _FinalReads(Generator):
    keys: tuple[str, ...]
    poll_ms: int
    ends: tuple[tuple[str, int], ...] | None  # from the first ok end-offsets
    reached: tuple[tuple[str, int], ...]  # key -> highest next-offset seen by an ok poll
    assigned: frozenset[Process]
    asking_ends: bool

    def _done(self) -> bool:
        if self.ends is None:
            return False
        reached = dict(self.reached)
        return all(reached.get(k, 0) >= end for k, end in self.ends)

    def op(self, ctx: Context) -> Step | None:
        if self._done():
            return None
        if self.ends is None:
            if self.asking_ends:
                return Pending(), self
            return _invoke(ctx, {"f": "end-offsets", "value": list(self.keys)}), self
        process = ctx.some_free()
        if process is None:
            return Pending(), self
        if process not in self.assigned:
            spec = {"f": "assign", "value": list(self.keys), "seek_to_beginning": True}
        else:
            spec = {"f": "poll", "poll_ms": self.poll_ms}
        return _invoke(ctx, {**spec, "process": process}), self

    def update(self, ctx: Context, event: Op) -> Generator:
        if event.f == "end-offsets":
            if event.is_invoke:
                return replace(self, asking_ends=True)
            if event.type == "ok" and isinstance(event.value, Mapping) and self.ends is None:
                ends = tuple(sorted((k, int(event.value.get(k, 0))) for k in self.keys))
                return replace(self, ends=ends, asking_ends=False)
            return replace(self, asking_ends=False)
        if event.is_invoke:
            return self
        if event.type == "info":
            # The client is rebuilt after info: it must assign again.
            return replace(self, assigned=self.assigned - {event.process})
        if event.type != "ok":
            return self
        if event.f == "assign":
            # Only this generator assigns during the final phase, and always from the start.
            return replace(self, assigned=self.assigned | {event.process})
        if event.f == "poll" and isinstance(event.value, Mapping):
            reached = dict(self.reached)
            for key, pairs in event.value.items():
                offsets = [pair[0] for pair in pairs if pair[0] is not None]
                if offsets:
                    reached[key] = max(reached.get(key, 0), max(offsets) + 1)
            for key, position in (event.get("positions") or {}).items():
                reached[key] = max(reached.get(key, 0), int(position))
            return replace(self, reached=tuple(sorted(reached.items())))
        return self


def final_reads(keys: Sequence[str], *, poll_ms: int = 500) -> Generator:
    """Reads every key to its end: one ``end-offsets``, then on every client ``assign`` (seek
    to beginning) and ``poll`` until ok polls have reached each key's end offset.

    Exhausted when every key is read to the end it was told; wrap in `time_limit`."""
    return _FinalReads(tuple(sorted(keys)), poll_ms, None, (), frozenset(), False)


def final_phase(
    keys: Sequence[str],
    *,
    heal: Sequence[Mapping[str, Any]] = (
        {"f": "stop-stranger"},
        {"f": "stop-partition"},
        {"f": "stop-delay"},
        {"f": "stop-pause"},
        {"f": "stop-disk-full"},
        {"f": "stop-kill"},
    ),
    recovery_ns: int = 10 * SEC_NS,
    recovery_op: Mapping[str, Any] | None = None,
    read_limit_ns: int = 60 * SEC_NS,
    poll_ms: int = 500,
) -> Generator:
    """The end of every test: heal everything (nemesis), wait for recovery (`recovery_ns`,
    then `recovery_op` if given, e.g. ``{"f": "await-healthy"}`` for a client), then read
    every key to its end within `read_limit_ns`."""
    steps: list[Any] = [nemesis(seq(*(dict(op, process=NEMESIS) for op in heal)))]
    steps.append(sleep(recovery_ns))
    if recovery_op is not None:
        steps.append(clients(once(recovery_op)))
    steps.append(clients(time_limit(read_limit_ns, final_reads(keys, poll_ms=poll_ms))))
    return phases(*steps)


# ----------------------------------------------------------------------------- simulation

CompleteFn = Callable[[Op, random.Random], tuple[str, Any, int, Union[str, None]]]


def simulate(
    gen: Any,
    complete: CompleteFn,
    *,
    concurrency: int,
    seed: int,
    with_nemesis: bool = True,
    start_ns: int = 0,
    max_ops: int = 100_000,
) -> History:
    """Runs `gen` on a fake clock; returns the history. Pure (no wall time), for tests.

    ``complete(invoke, rng) -> (type, value, latency_ns, error)`` decides each completion.
    Like the runner: a client process whose op ends ``info`` is replaced by process
    ``p + concurrency``. Raises `GeneratorError` if the generator waits forever (pending with
    no wake time and nothing in flight) or more than `max_ops` ops are produced."""
    rng = random.Random(seed)
    gen_now = lift(gen)
    now = start_ns
    processes: list[Process] = list(range(concurrency)) + ([NEMESIS] if with_nemesis else [])
    free: set[Process] = set(processes)
    in_flight: list[tuple[int, int, Op, Op]] = []  # (done_ns, seq, invoke, completion)
    ops: list[Op] = []
    counter = 0
    idle_asks = 0  # asks in a row that neither emitted nor let time pass

    def context() -> Context:
        return Context(now, tuple(processes), frozenset(free), rng)

    def record(op: Op) -> Op:
        op = replace(op, index=len(ops))
        ops.append(op)
        if len(ops) > max_ops:
            raise GeneratorError(f"more than max_ops={max_ops} ops")
        return op

    while True:
        step = gen_now.op(context()) if gen_now is not None else None
        if step is not None and isinstance(step[0], Op):
            invoke, gen_now = step
            invoke = record(replace(invoke, time_ns=now))
            free.discard(invoke.process)
            if gen_now is not None:
                gen_now = gen_now.update(context(), invoke)
            kind, value, latency_ns, error = complete(invoke, rng)
            done = Op(kind, invoke.f, invoke.process, value, now + max(0, latency_ns), error=error)
            counter += 1
            heapq.heappush(in_flight, (done.time_ns, counter, invoke, done))
            continue
        wake = None
        if step is not None:
            wake = step[0].wake_ns
            gen_now = step[1]
            if wake is not None and wake <= now:
                idle_asks += 1
                if idle_asks > 1000:
                    raise GeneratorError(f"generator keeps waking at {wake} <= now {now}")
                continue
        idle_asks = 0
        if not in_flight:
            if step is None:
                break
            if wake is None:
                raise GeneratorError(f"generator is pending forever at {now} ns")
            now = max(now, wake)
            continue
        next_done = in_flight[0][0]
        if step is not None and wake is not None and wake < next_done:
            now = max(now, wake)
            continue
        _, _, invoke, done = heapq.heappop(in_flight)
        now = max(now, done.time_ns)
        done = record(replace(done, time_ns=now))
        if gen_now is not None:
            gen_now = gen_now.update(context(), done)
        process = done.process
        if done.type == "info" and process != NEMESIS:
            processes[processes.index(process)] = process + concurrency  # type: ignore[operator]
            free.add(process + concurrency)  # type: ignore[operator]
        else:
            free.add(process)
    return History(ops)
