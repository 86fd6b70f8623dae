"""procfs: the one reader of /proc (the executor, the local backend and its supervisor use it)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import wait_for
from primus_runtime import procfs


def test_a_child_is_seen_with_its_parent_group_environment_and_stdin():
    read, write = os.pipe()
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=read,
                             env={**os.environ, "PROCFS_TEST": "here"}, process_group=0)
    os.close(read)
    try:
        found = procfs.stat(child.pid)
        assert found is not None and found.ppid == os.getpid() and found.pgrp == child.pid
        assert child.pid in procfs.all_stats() and procfs.alive(child.pid)
        assert b"PROCFS_TEST=here" in (procfs.environ(child.pid) or [])
        assert procfs.fd_target(child.pid, 0) == os.readlink(f"/proc/self/fd/{write}")  # the pipe, pipe:[N]
        wait_for(lambda: "pipe" in (procfs.wchan(child.pid) or ""), what="the child to wait in a pipe read")
    finally:
        os.close(write)  # end of its input: it exits
        wait_for(lambda: (procfs.stat(child.pid) or procfs.ProcStat(0, "Z", 0, 0, 0)).zombie,
                 what="the child to exit, unreaped")
    assert not procfs.alive(child.pid)  # a zombie is not alive
    child.wait()
    assert procfs.stat(child.pid) is None and procfs.environ(child.pid) is None
    assert procfs.fd_target(child.pid, 0) is None and procfs.wchan(child.pid) is None
