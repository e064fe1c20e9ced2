"""Consumer groups and offsets in `__consumer_offsets`. Nothing here yet: it arrives with the
group coordinator issue.
"""
