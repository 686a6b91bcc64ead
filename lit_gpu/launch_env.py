"""The launcher's and the cluster's environment variables, read as data (standard library only).

torchrun, SLURM, MPI and the user set the variables lit_gpu and Lightning read to place a process
(``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_PORT``, ``SLURM_*``, ``CUDA_VISIBLE_DEVICES``...).
Lightning and torchmetrics read some of them with ``int()`` at import time, so :func:`problem` is called
by the ``lit-gpu`` front door before anything imports them: a malformed value is one line naming the
variable and what a valid value looks like (exit 2) instead of a traceback.

A SLURM job id is also a word Lightning's requeue handler puts in ``scontrol requeue <id>``, through a
shell where ``scontrol`` is not on the ``PATH``: :func:`requeue_problem` keeps any id that is not a
number (``123``, or an array job's ``123_4``) from reaching it (``CheckpointOnInterrupt`` checks it before
Lightning registers the handler).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_WHOLE = re.compile(r"[0-9]+")
_HOST = re.compile(r"[A-Za-z0-9._:%\[\]-]+")  # a host name, an IPv4 or (bracketed) IPv6 address
_NODELIST = re.compile(r"[A-Za-z0-9._,\[\] -]+")  # host names and SLURM ranges: node[1-4,7]
_DEVICE = re.compile(r"-?[0-9]+|(GPU|MIG)-[A-Za-z0-9/-]+")  # an index, or a GPU/MIG UUID

#: variable -> (check, what a valid value looks like)
_WHOLE_NUMBER = "a whole number >= 0, e.g. {name}=0"
_COUNT = "a whole number >= 1, e.g. {name}=2"

RULES: dict[str, tuple[str, str]] = {
    "RANK": ("whole", _WHOLE_NUMBER),
    "LOCAL_RANK": ("whole", _WHOLE_NUMBER),
    "NODE_RANK": ("whole", _WHOLE_NUMBER),
    "GROUP_RANK": ("whole", _WHOLE_NUMBER),
    "WORLD_SIZE": ("count", _COUNT),
    "LOCAL_WORLD_SIZE": ("count", _COUNT),
    "MASTER_PORT": ("port", "a port number 1-65535, e.g. MASTER_PORT=29500"),
    "MASTER_ADDR": ("host", "a host name or IP address, e.g. MASTER_ADDR=127.0.0.1"),
    "SLURM_NTASKS": ("count", _COUNT),
    "SLURM_NNODES": ("count", _COUNT),
    "SLURM_NTASKS_PER_NODE": ("count", _COUNT),
    "SLURM_PROCID": ("whole", _WHOLE_NUMBER),
    "SLURM_LOCALID": ("whole", _WHOLE_NUMBER),
    "SLURM_NODEID": ("whole", _WHOLE_NUMBER),
    "SLURM_JOB_ID": ("whole", "a job number, e.g. SLURM_JOB_ID=123456"),
    "SLURM_ARRAY_JOB_ID": ("whole", "a job number, e.g. SLURM_ARRAY_JOB_ID=123456"),
    "SLURM_ARRAY_TASK_ID": ("whole", "a task number, e.g. SLURM_ARRAY_TASK_ID=3"),
    "SLURM_NODELIST": ("nodes", "host names or a SLURM range, e.g. SLURM_NODELIST=node[1-4]"),
    "CUDA_VISIBLE_DEVICES": (
        "devices",
        "GPU indices or UUIDs separated by commas, e.g. CUDA_VISIBLE_DEVICES=0,1 (empty: no GPU)",
    ),
}

BAD_VARIABLE = "environment variable {name}={value}: {valid}; fix or unset it (set by you or the launcher)"


def _valid(kind: str, value: str) -> bool:
    if kind == "whole":
        return _WHOLE.fullmatch(value) is not None
    if kind == "count":
        return _WHOLE.fullmatch(value) is not None and int(value) >= 1
    if kind == "port":
        return _WHOLE.fullmatch(value) is not None and 1 <= int(value) <= 65535
    if kind == "host":
        return _HOST.fullmatch(value) is not None
    if kind == "nodes":
        return _NODELIST.fullmatch(value) is not None and value.strip() != ""
    if kind == "devices":  # empty hides every GPU
        return value.strip() == "" or all(_DEVICE.fullmatch(item.strip()) for item in value.split(","))
    raise ValueError(kind)


def problem(environ: Mapping[str, str]) -> str | None:
    """The first malformed launcher or cluster variable, as one line (what it is, a valid example); None."""
    for name, (kind, valid) in RULES.items():
        value = environ.get(name)
        if value is not None and not _valid(kind, value):
            return BAD_VARIABLE.format(name=name, value=repr(value)[:80], valid=valid.format(name=name))
    return None


def requeue_problem(environ: Mapping[str, str]) -> str | None:
    """Why the SLURM job id Lightning's requeue handler would pass to ``scontrol`` is unsafe, or None."""
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        value = environ.get(name)
        if value is not None and _WHOLE.fullmatch(value) is None:
            return BAD_VARIABLE.format(name=name, value=repr(value)[:80], valid=RULES[name][1])
    return None
