"""Jepsen-shaped fault-injection harness over real raftlog node processes: db, net, nemesis,
client, generator, history, checkers, report.
"""
