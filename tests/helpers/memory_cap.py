"""Run a job in a fork whose address space is capped at what it uses now + a checkpoint's budget + slack."""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

from lit_gpu.checkpoints.read import CheckpointLimits

SLACK = 96 * 2**20


def _address_space() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize")


def capped(size: int, job: Callable[[], Any]) -> dict[str, str]:
    """Run ``job`` in a fork capped at its current address space + budget(size) + slack."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 0
            try:
                os.dup2(err.fileno(), 2)
                sys.stderr = open(err.fileno(), "w", closefd=False)  # noqa: SIM115 - the child's own
                # garbage of earlier tests (tensors in reference cycles, batches in shared memory) collected
                # now, not inside the job: its freed address space would otherwise be room under the cap
                gc.collect()
                cap = _address_space() + CheckpointLimits().budget(size) + SLACK
                resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
                try:
                    result = {"outcome": "returned", "value": repr(job())[:200]}
                except MemoryError:
                    result = {"outcome": "MemoryError"}
                except SystemExit as exit_:
                    result = {"outcome": f"exit {exit_.code}"}
                except BaseException as error:  # noqa: BLE001 - reported to the parent
                    memory = isinstance(error, RuntimeError) and "alloc" in str(error)
                    result = {
                        "outcome": "MemoryError" if memory else type(error).__name__,
                        "value": str(error),
                    }
                    result["trace"] = traceback.format_exc()[-600:]
                sys.stderr.flush()
                out.write(json.dumps(result).encode())
                out.flush()
            except BaseException:  # noqa: BLE001
                code = 3
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        out.seek(0)
        err.seek(0)
        result = json.loads(out.read().decode() or "{}")
        result["stderr"] = err.read().decode(errors="replace")
        return result
