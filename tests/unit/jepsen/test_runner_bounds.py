"""The runner bounds every client op and close (`runner.OP_TIMEOUT_S`, `CLOSE_TIMEOUT_S`): a client
whose call never returns (librdkafka's close and synchronous commit wait without a deadline)
ends its op info ``op-timeout``, is dropped without being used again, and the run goes on; a
retired client's close runs beside the run, and is abandoned once it outlives its bound."""

from __future__ import annotations

import random
import threading

import trio

from jepsen_style_tests import generator as g
from jepsen_style_tests import runner
from jepsen_style_tests.history import HistoryWriter


class _FirstOneStuck:
    """A client of which the first one made blocks its thread in its first op (`op`) or in its
    close (`close`) until `release` is set; every other call completes at once (sends ok)."""

    stuck_in = "op"
    made: list["_FirstOneStuck"] = []
    release = threading.Event()

    def __init__(self, bootstrap, *, options=None):
        self.ops: list[str] = []
        self.closed = False
        self.made.append(self)

    def invoke_sync(self, op):
        self.ops.append(op.f)
        if self is self.made[0]:
            if self.stuck_in == "op":
                self.release.wait(30)
            return "info", op.value, "lost", {}
        return "ok", [op.value[0], [len(self.ops) - 1, op.value[1]]], None, {}

    def close_sync(self):
        if self is self.made[0] and self.stuck_in == "close":
            self.release.wait(30)
        self.closed = True

    async def invoke(self, op):
        return await trio.to_thread.run_sync(self.invoke_sync, op, abandon_on_cancel=True)

    async def close(self):
        await trio.to_thread.run_sync(self.close_sync, abandon_on_cancel=True)


async def _run(tmp_path, stuck_in: str, seconds: float):
    _FirstOneStuck.stuck_in = stuck_in
    _FirstOneStuck.made = []
    _FirstOneStuck.release.clear()
    gen = g.any_of(g.time_limit(int(seconds * g.SEC_NS), g.clients(g.sends(["t-0"]))))
    try:
        with HistoryWriter(tmp_path / "history.jsonl") as writer, trio.fail_after(seconds + 20):
            interpreter = runner._Interpreter(gen, writer, concurrency=1, rng=random.Random(1), bootstrap=["x:1"],
                                              nemesis=None, out=None, client_class=_FirstOneStuck)
            ops = await interpreter.run()
        # Read before the release: the stuck thread, once released, finishes its close at once.
        closed_at_end = [c.closed for c in _FirstOneStuck.made]
    finally:
        _FirstOneStuck.release.set()
    return [op for op in ops if op.type != "invoke"], _FirstOneStuck.made, closed_at_end


async def test_a_stuck_op_ends_info_and_its_client_is_abandoned(tmp_path, monkeypatch):
    # Well above a thread hop on a loaded machine: at load 13, one of the thousands of quick ops
    # once took over 1.5 s and ended op-timeout too.
    monkeypatch.setattr(runner, "OP_TIMEOUT_S", 4.0)
    monkeypatch.setattr(runner, "CLOSE_TIMEOUT_S", 4.0)
    completions, (stuck, *others), closed = await _run(tmp_path, "op", 5.0)
    assert completions[0].type == "info" and completions[0].error == "op-timeout", completions[0]
    assert completions[0].process == 0 and completions[1].process == 1  # the worker goes on as a new process
    assert len(completions) > 2 and all(op.type == "ok" for op in completions[1:])
    assert stuck.ops == ["send"] and not closed[0]  # never used or closed again
    assert others and all(closed[1:])  # the run's end closes the live client


async def test_a_stuck_close_neither_stalls_the_run_nor_keeps_it_alive(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "CLOSE_TIMEOUT_S", 3.0)
    completions, (stuck, *others), closed = await _run(tmp_path, "close", 2.0)
    assert completions[0].type == "info" and completions[0].error == "lost"
    # The retired client's close hung for the whole workload: the sends went on beside it.
    later = [op for op in completions[1:] if op.time_ns < 1.8 * g.SEC_NS]
    assert len(later) > 2 and all(op.type == "ok" for op in later), completions
    assert not closed[0] and others and all(closed[1:])
