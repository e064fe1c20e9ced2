"""Generators are pure and deterministic under a seed, and each combinator (mix, stagger, rate,
time_limit, phases, repeat, once, any_of, each_process, fault_cycle, final_reads) does what it
says, driven on a fake clock by `simulate` — no wall time."""

from __future__ import annotations

import random

import pytest

from jepsen_style_tests import generator as gen
from jepsen_style_tests.checker import check
from jepsen_style_tests.generator import SEC_NS, Context, Fault, GeneratorError, Pending
from jepsen_style_tests.history import NEMESIS, Op

MS = 1_000_000
KEYS = ["t-0", "t-1"]


def ok_after(latency_ns=MS):
    def complete(invoke: Op, rng: random.Random):
        return "ok", invoke.value, latency_ns, None
    return complete


class FakeLog:
    """A correct single-copy log per key, standing in for the cluster in `simulate`."""

    def __init__(self, keys):
        self.log = {k: [] for k in keys}
        self.positions: dict = {}

    def __call__(self, invoke: Op, rng: random.Random):
        latency = rng.randint(1, 5) * MS
        f, p = invoke.f, invoke.process
        if f == "send":
            key, value = invoke.value
            if rng.random() < 0.1:
                return "info", [key, [None, value]], latency, "timeout"  # and it never happened
            self.log[key].append(value)
            return "ok", [key, [len(self.log[key]) - 1, value]], latency, None
        if f == "assign":
            self.positions[p] = {k: 0 for k in invoke.value}
            return "ok", invoke.value, latency, None
        if f == "poll":
            out = {}
            for key, position in self.positions.get(p, {}).items():
                chunk = self.log[key][position : position + 3]
                out[key] = [[position + i, v] for i, v in enumerate(chunk)]
                self.positions[p][key] = position + len(chunk)
            return "ok", out, latency, None
        if f == "end-offsets":
            return "ok", {k: len(self.log[k]) for k in invoke.value}, latency, None
        return "ok", invoke.value, latency, None


def ctx(t=0, free=(0, 1, NEMESIS), processes=(0, 1, NEMESIS), seed=1):
    return Context(t, tuple(processes), frozenset(free), random.Random(seed))


def invokes(history, f=None):
    return [o for o in history if o.is_invoke and (f is None or o.f == f)]


def test_dict_is_one_op_with_extras_and_a_free_process():
    op, nxt = gen.lift({"f": "poll", "poll_ms": 5}).op(ctx(t=7, free=(1,)))
    assert (op.type, op.f, op.process, op.time_ns, op.get("poll_ms")) == ("invoke", "poll", 1, 7, 5)
    assert nxt is None
    pending, same = gen.lift({"f": "poll"}).op(ctx(free=()))
    assert pending == Pending() and same is not None
    pinned, _ = gen.lift({"f": "start-kill", "process": NEMESIS}).op(ctx())
    assert pinned.process == NEMESIS
    with pytest.raises(GeneratorError):
        gen.lift({"value": 1}).op(ctx())
    with pytest.raises(GeneratorError):
        gen.lift(3)


def test_same_seed_same_ops_other_seed_other_ops():
    def run(seed):
        workload = gen.time_limit(2 * SEC_NS, gen.stagger(10 * MS, gen.mix(gen.sends(KEYS), gen.polls())))
        h = gen.simulate(gen.clients(workload), FakeLog(KEYS), concurrency=3, seed=seed)
        return [(o.type, o.f, o.process, o.value, o.time_ns) for o in h]

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_seq_once_repeat_and_limits():
    h = gen.simulate(
        gen.clients(gen.seq({"f": "a"}, gen.repeat({"f": "b"}, 3), [{"f": "c"}, {"f": "d"}], gen.once(gen.polls()))),
        ok_after(), concurrency=1, seed=0,
    )
    assert [o.f for o in invokes(h)] == ["a", "b", "b", "b", "c", "d", "poll"]


def test_callable_spec_is_called_until_none():
    left = [3, 2, 1]
    h = gen.simulate(gen.clients(lambda c: {"f": "x", "value": left.pop()} if left else None),
                     ok_after(), concurrency=2, seed=0)
    assert [o.value for o in invokes(h)] == [1, 2, 3]


def test_mix_draws_from_every_generator():
    h = gen.simulate(gen.clients(gen.time_limit(SEC_NS, gen.mix(gen.repeat({"f": "a"}), gen.repeat({"f": "b"})))),
                     ok_after(), concurrency=2, seed=3)
    fs = [o.f for o in invokes(h)]
    assert len(fs) > 500 and 0.4 < fs.count("a") / len(fs) < 0.6


def test_stagger_spaces_ops_by_random_gaps_with_the_right_mean():
    h = gen.simulate(gen.clients(gen.time_limit(10 * SEC_NS, gen.stagger(50 * MS, gen.repeat({"f": "a"})))),
                     ok_after(), concurrency=4, seed=9)
    times = [o.time_ns for o in invokes(h)]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(0 <= g <= 100 * MS for g in gaps)
    assert len(set(gaps)) > 10  # random, not fixed
    assert 40 * MS < sum(gaps) / len(gaps) < 60 * MS


def test_rate_is_a_fixed_schedule_and_time_limit_stops_it():
    h = gen.simulate(gen.clients(gen.time_limit(SEC_NS, gen.rate(20, gen.repeat({"f": "a"})))),
                     ok_after(), concurrency=2, seed=0, start_ns=5)
    times = [o.time_ns for o in invokes(h)]
    assert times == [5 + i * 50 * MS for i in range(20)]
    with pytest.raises(GeneratorError):
        gen.rate(0, {"f": "a"})


def test_time_limit_ends_a_generator_that_is_waiting():
    h = gen.simulate(gen.seq(gen.time_limit(SEC_NS, gen.sleep(100 * SEC_NS)), {"f": "after"}),
                     ok_after(), concurrency=1, seed=0, with_nemesis=False)
    (only,) = invokes(h)
    assert only.f == "after" and only.time_ns == SEC_NS


def test_phases_wait_for_every_process_to_be_free():
    slow = {"a": 300 * MS, "b": MS}

    def complete(invoke, rng):
        return "ok", None, slow[invoke.f], None

    h = gen.simulate(gen.phases(gen.clients(gen.repeat({"f": "a"}, 3)), gen.clients(gen.repeat({"f": "b"}, 2))),
                     complete, concurrency=3, seed=0)
    last_a_done = max(o.time_ns for o in h if o.f == "a" and o.type == "ok")
    first_b = min(o.time_ns for o in invokes(h, "b"))
    assert first_b >= last_a_done == 300 * MS


def test_clients_and_nemesis_route_to_their_processes_and_any_of_runs_both():
    faults = [Fault("partition", {"f": "start-partition", "value": "halves"}, {"f": "stop-partition"})]
    workload = gen.any_of(
        gen.nemesis(gen.fault_cycle(faults, quiet_ns=SEC_NS, fault_ns=2 * SEC_NS)),
        gen.clients(gen.stagger(10 * MS, gen.sends(KEYS))),
    )
    h = gen.simulate(gen.time_limit(10 * SEC_NS, workload), FakeLog(KEYS), concurrency=3, seed=2)
    for o in h:
        assert (o.process == NEMESIS) == o.f.endswith("-partition")
    starts = [o.time_ns for o in invokes(h, "start-partition")]
    stops = [o.time_ns for o in invokes(h, "stop-partition")]
    # quiet 1 s, fault 2 s, quiet 1 s, ...: starts at 1, 4, 7; stops at 3, 6, 9 (seconds)
    assert starts == [1 * SEC_NS, 4 * SEC_NS, 7 * SEC_NS]
    assert stops == [3 * SEC_NS, 6 * SEC_NS, 9 * SEC_NS]
    values = [o.value[1] for o in invokes(h, "send")]
    assert len(values) == len(set(values)) > 100


def test_fault_cycle_picks_faults_at_random():
    faults = [Fault(n, {"f": f"start-{n}"}, {"f": f"stop-{n}"}) for n in ("kill", "pause", "partition")]
    h = gen.simulate(gen.time_limit(60 * SEC_NS, gen.nemesis(gen.fault_cycle(faults, quiet_ns=SEC_NS, fault_ns=SEC_NS))),
                     ok_after(), concurrency=1, seed=4)
    fs = [o.f for o in invokes(h)]
    starts = fs[0::2]
    assert {f.removeprefix("start-") for f in starts} == {"kill", "pause", "partition"}
    assert fs[1::2] == [s.replace("start-", "stop-") for s in starts][: len(fs[1::2])]


def test_each_process_gives_every_process_its_own_copy():
    h = gen.simulate(gen.clients(gen.each_process(gen.seq({"f": "a"}, {"f": "b"}))), ok_after(),
                     concurrency=3, seed=0)
    by_process = {}
    for o in invokes(h):
        by_process.setdefault(o.process, []).append(o.f)
    assert by_process == {0: ["a", "b"], 1: ["a", "b"], 2: ["a", "b"]}


def test_info_retires_the_process_and_a_new_one_takes_over():
    def complete(invoke, rng):
        return ("info", None, MS, "timeout") if invoke.f == "crash" else ("ok", None, MS, None)

    h = gen.simulate(gen.clients(gen.seq({"f": "crash", "process": 0}, gen.repeat({"f": "a"}, 4))), complete,
                     concurrency=2, seed=0)
    assert {o.process for o in invokes(h, "a")} <= {1, 2}
    assert 2 in {o.process for o in invokes(h, "a")}


def test_pending_forever_is_an_error_not_a_hang():
    with pytest.raises(GeneratorError, match="pending forever"):
        gen.simulate({"f": "x", "process": 42}, ok_after(), concurrency=1, seed=0)


def test_final_phase_heals_waits_then_reads_every_key_to_its_end():
    log = FakeLog(KEYS)
    main = gen.time_limit(3 * SEC_NS, gen.clients(gen.stagger(5 * MS, gen.sends(KEYS))))
    final = gen.final_phase(KEYS, recovery_ns=2 * SEC_NS, read_limit_ns=30 * SEC_NS, poll_ms=10)
    h = gen.simulate(gen.phases(main, final), log, concurrency=3, seed=11)

    heal = [o for o in invokes(h) if o.process == NEMESIS]
    assert [o.f for o in heal] == ["stop-stranger", "stop-partition", "stop-delay", "stop-pause", "stop-disk-full", "stop-kill"]
    last_send = max(o.time_ns for o in h if o.f == "send")
    heal_done = max(o.time_ns for o in h if o.process == NEMESIS)
    (ends,) = invokes(h, "end-offsets")
    assert heal[0].time_ns >= last_send
    assert ends.time_ns >= heal_done + 2 * SEC_NS
    assert invokes(h, "assign") and all(o.get("seek_to_beginning") for o in invokes(h, "assign"))
    assert h[-1].f == "poll"  # it stopped once the ends were reached, well before the limit
    assert h.end_ns < ends.time_ns + 30 * SEC_NS

    result = check(h)
    assert result.verdict == "valid", (result.anomalies, result.unknown_reasons)
    assert result.stats["read_to_offsets"] == {k: len(v) for k, v in log.log.items()}


def test_final_reads_retry_end_offsets_and_reassign_after_info():
    calls = {"end": 0, "poll": 0}
    inner = FakeLog(["t-0"])
    inner.log["t-0"] = [10, 11]

    def complete(invoke, rng):
        if invoke.f == "end-offsets":
            calls["end"] += 1
            if calls["end"] == 1:
                return "fail", None, MS, "not-ready"
        if invoke.f == "poll":
            calls["poll"] += 1
            if calls["poll"] == 1:
                return "info", None, MS, "timeout"
        return inner(invoke, rng)

    h = gen.simulate(gen.clients(gen.final_reads(["t-0"], poll_ms=1)), complete, concurrency=1, seed=0)
    assert calls["end"] == 2
    assigns = invokes(h, "assign")
    assert [o.process for o in assigns] == [0, 1]  # process 0 crashed on its poll; 1 re-assigns
    assert [o.f for o in h][-2:] == ["poll", "poll"]


def test_fault_cycle_draws_every_fault_name_once_per_round():
    # Five partition shapes and one stranger: the stranger still comes once in every two cycles.
    faults = [Fault("partition", {"f": "start-partition", "value": s}, {"f": "stop-partition"}) for s in "abcde"]
    faults.append(Fault("stranger", {"f": "start-stranger"}, {"f": "stop-stranger"}))
    h = gen.simulate(gen.time_limit(40 * SEC_NS, gen.nemesis(gen.fault_cycle(faults, quiet_ns=SEC_NS, fault_ns=SEC_NS))),
                     ok_after(), concurrency=1, seed=7)
    starts = [o.f for o in invokes(h) if o.f.startswith("start-")]
    rounds = [set(starts[i:i + 2]) for i in range(0, len(starts) - 1, 2)]
    assert len(rounds) >= 5 and all(r == {"start-partition", "start-stranger"} for r in rounds), starts
    assert len({o.value for o in invokes(h, "start-partition")}) > 1  # the shapes still vary
