"""The data plane: scan input into tasks, hand them out on heartbeats, track progress.

AM side: ``source`` (partitions, scanning through fsspec), ``dispatcher`` (tasks,
attempts, pull dispatch, progress, watermark), ``journal`` (the work-preserve task
store). Shared with the executor (standard library only): ``formats`` (splitting and
reading records). This package's ``__init__`` imports nothing, so the executor can
import ``formats`` without the AM's dependencies.
"""
