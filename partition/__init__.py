"""Partitions: Kafka RecordBatch v2 bytes, the segmented log on disk (recovery, retention,
compaction), and the per-partition Raft group in which the partition log is the Raft log.
"""
