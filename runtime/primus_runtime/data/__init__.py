"""The data plane: scan input into tasks, hand them out on heartbeats, track progress.

AM side: ``source`` (partitions, scanning through fsspec), ``dispatcher`` (tasks,
attempts, pull dispatch, progress, watermark), ``dispatch_views`` (what the status and
the page show of it), ``journal`` (the work-preserve task store). Shared with the executor
(standard library only): ``formats`` and the modules that split and read records
(``records`` and the readers it dispatches to). This package's ``__init__`` imports
nothing, so the executor can import them without the AM's dependencies.
"""
