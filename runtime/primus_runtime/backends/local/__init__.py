"""Local backend: the AM and its executors are processes on this machine.

A job lives in ``<home>/jobs/<app_id>/`` (see ``JobDir``); the AM runs
detached (its own session), so the job outlives whoever submitted it, and any
later ``status``/``kill``/``logs`` finds it by id. Executors are forked by a
fork server (``executor/forkserver.py``), each into a session of its own; a
forced stop kills that whole session, the trainer's process group included.

Processes a trainer moves to a session of their own are still ended: where cgroup v2 is
writable, each executor's trainer runs in a cgroup of the job's (``<mount>/<AM's
cgroup>/<app_id>/<incarnation>``), killed when the executor ends and removed with
the job; everywhere, the executor is its trainer's subreaper, and when the job ends the
AM kills every process whose environment carries the job's ``PRIMUS_APP_ID``.
"""
