"""raftlog: the node process, configuration, native protocol, client library, CLI, and the
PySyncObj bridge (the only module that imports pysyncobj).

The public client API is declared here once it exists; see README's feature table.
"""

__version__ = "0.1.0.dev0"
