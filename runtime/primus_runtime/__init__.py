"""Primus runtime: the per-job Application Master, the executors, and the backends.

This package is shipped to cluster nodes with each job. It never imports
Airflow, and ``primus_runtime.executor`` uses the standard library only.
"""

__version__ = "0.1.0"
