"""The runner bounds every client op and close (`runner.OP_TIMEOUT_S`, `CLOSE_TIMEOUT_S`): a client
whose call never returns (librdkafka's close and synchronous commit wait without a deadline)
ends its op info ``op-timeout``, is dropped without being used again, and the run goes on."""

from __future__ import annotations

import random
import threading

import trio

from jepsen_style_tests import generator as g
from jepsen_style_tests import runner
from jepsen_style_tests.history import HistoryWriter


class _StuckOnce:
    """A client whose first client's first op blocks its thread until `release` is set; every
    other op completes ok at once. Its close blocks the same way while the op is stuck."""

    made: list[_StuckOnce] = []
    release = threading.Event()

    def __init__(self, bootstrap, *, options=None):
        self.ops: list[str] = []
        self.closed = False
        self.made.append(self)

    def _stuck(self) -> bool:
        return self is self.made[0]

    def invoke_sync(self, op):
        self.ops.append(op.f)
        if self._stuck():
            self.release.wait(30)
            return "ok", op.value, None, {}
        return "ok", [op.value[0], [len(self.ops) - 1, op.value[1]]], None, {}

    def close_sync(self):
        if self._stuck():
            self.release.wait(30)
        self.closed = True

    async def invoke(self, op):
        return await trio.to_thread.run_sync(self.invoke_sync, op, abandon_on_cancel=True)

    async def close(self):
        await trio.to_thread.run_sync(self.close_sync, abandon_on_cancel=True)


async def test_a_stuck_op_ends_info_and_its_client_is_abandoned(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "OP_TIMEOUT_S", 0.3)
    monkeypatch.setattr(runner, "CLOSE_TIMEOUT_S", 0.3)
    _StuckOnce.made.clear()
    _StuckOnce.release.clear()
    gen = g.clients(g.sends(["t-0"]))
    gen = g.any_of(g.time_limit(int(1.0 * g.SEC_NS), gen))
    try:
        with HistoryWriter(tmp_path / "history.jsonl") as writer, trio.fail_after(10):
            interpreter = runner._Interpreter(gen, writer, concurrency=1, rng=random.Random(1), bootstrap=["x:1"],
                                              nemesis=None, out=None, client_class=_StuckOnce)
            ops = await interpreter.run()
    finally:
        _StuckOnce.release.set()
    completions = [op for op in ops if op.type != "invoke"]
    assert completions[0].type == "info" and completions[0].error == "op-timeout", completions[0]
    assert completions[0].process == 0 and completions[1].process == 1  # the worker goes on as a new process
    assert [op.type for op in completions[1:]] == ["ok"] * (len(completions) - 1) and len(completions) > 2
    stuck, *others = _StuckOnce.made
    assert stuck.ops == ["send"] and not stuck.closed  # never used or closed again
    assert others and all(c.closed for c in others)  # the run's end closes the live client
