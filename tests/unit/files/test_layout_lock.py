"""The run lock dies with the process that writes the run, not with the children it forked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from lit_gpu.run.layout import LOCK_NAME, RunLock

HOLD_AND_FORK = """
import os, sys, time
from pathlib import Path
from lit_gpu.run.layout import RunLock
lock = RunLock.create(Path(sys.argv[1]))
child = os.fork()
if child == 0:  # a DataLoader worker or a forked rank: lives on after its parent is killed
    lock.release()  # never ends the parent's run
    print(os.getpid(), flush=True)  # only once it has run: a child not yet scheduled still holds the fd
    time.sleep(30)
    os._exit(0)
time.sleep(30)
"""


def test_a_killed_writer_frees_its_lock_at_once_though_a_forked_child_lives_on(tmp_path: Path) -> None:
    run = tmp_path / "version_0"
    run.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writer = subprocess.Popen(
        [sys.executable, "-c", HOLD_AND_FORK, str(run)], stdout=subprocess.PIPE, env=env
    )
    child = int(writer.stdout.readline())
    try:
        assert (run / LOCK_NAME).is_file()  # the child's release() left the parent's lock alone
        assert RunLock.take(run) is None  # held by the writer
        writer.send_signal(signal.SIGKILL)
        writer.wait(10)
        os.kill(child, 0)  # the child still lives
        taken = RunLock.take(run)
        assert taken is not None, "the dead writer's lock is still held by its forked child"
        taken.release()
    finally:
        writer.kill()
        writer.wait(10)
        os.kill(child, signal.SIGKILL)
