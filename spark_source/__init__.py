"""PySpark Python Data Source `format("raftlog")`. Nothing here yet: it arrives with the Spark
issue.
"""
