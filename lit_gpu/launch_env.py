"""The launcher's and the cluster's environment variables, read as data (standard library only).

torchrun, SLURM, MPI and the user set the variables lit_gpu and Lightning read to place a process
(``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_PORT``, ``SLURM_*``...).
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

from lit_gpu import visible_devices

_JOB = re.compile(r"[0-9]+")  # a SLURM job or task number: the word scontrol gets, digits only
# MASTER_ADDR: what torch.distributed's TCPStore resolves (a host name, an IPv4 or a bracketed or bare IPv6
# address with its %zone), never shell words
_HOST = re.compile(r"[A-Za-z0-9._:%\[\]-]+")
# SLURM_NODELIST: hostlist syntax as Lightning's SLURMEnvironment.resolve_root_node_address reads it
# (node[01-04,07],gpu-a; hetero jobs' lists joined by commas)
_NODELIST = re.compile(r"[A-Za-z0-9._,\[\] -]+")

#: variable -> (check, what a valid value looks like)
_WHOLE_NUMBER = "a whole number >= 0, e.g. {name}=0"
_COUNT = "a whole number >= 1, e.g. {name}=2"

# Each accepted set is the upstream reader's: Lightning's cluster environments (lightning.fabric.plugins.
# environments: torchelastic, kubeflow, slurm, lightning) and rank_zero._get_rank read these numbers with
# int(), torchrun and Kubeflow's PyTorchJob write them; lit_gpu's bound on top: not negative (a count >= 1).
# CUDA_VISIBLE_DEVICES: CUDA reads any value (lit_gpu.visible_devices), lit-gpu env reports it; only a value
# torch's _parse_visible_devices reads differently from CUDA (a non-ASCII digit: torch raises or counts a GPU
# CUDA will not show) is a problem (visible_devices.torch_disagrees).
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
    "SLURM_JOB_ID": ("job", "a job number, e.g. SLURM_JOB_ID=123456"),
    "SLURM_ARRAY_JOB_ID": ("job", "a job number, e.g. SLURM_ARRAY_JOB_ID=123456"),
    "SLURM_ARRAY_TASK_ID": ("job", "a task number, e.g. SLURM_ARRAY_TASK_ID=3"),
    "SLURM_NODELIST": ("nodes", "host names or a SLURM range, e.g. SLURM_NODELIST=node[1-4]"),
    # Lightning's seed_everything writes these for the processes it starts; its reset_seed (DDP ranks) and
    # _auto_add_worker_init_fn (every DataLoader with workers) read them back with int()
    "PL_GLOBAL_SEED": ("int", "a whole number, e.g. PL_GLOBAL_SEED=42 (Lightning's seed_everything sets it)"),
    "PL_SEED_WORKERS": ("int", "0 or 1, e.g. PL_SEED_WORKERS=1 (Lightning's seed_everything writes it)"),
    "CUDA_VISIBLE_DEVICES": ("cuda", "{why}; give GPU indices in the digits 0-9 or UUIDs, e.g. {name}=0,1"),
}

BAD_VARIABLE = "environment variable {name}={value}: {valid}; fix or unset it (set by you or the launcher)"


def _number(value: str) -> int | None:
    """``value`` as Lightning reads it (``int()``), or None when that raises."""
    try:
        return int(value)
    except ValueError:
        return None


def _valid(kind: str, value: str) -> bool:
    if kind == "cuda":
        return visible_devices.torch_disagrees(value) is None
    if kind in ("whole", "count", "port"):
        number = _number(value)
        low, high = {"whole": (0, None), "count": (1, None), "port": (1, 65535)}[kind]
        return number is not None and number >= low and (high is None or number <= high)
    if kind == "int":
        return _number(value) is not None
    if kind == "job":
        return _JOB.fullmatch(value) is not None
    if kind == "host":
        return _HOST.fullmatch(value) is not None
    if kind == "nodes":
        return _NODELIST.fullmatch(value) is not None and value.strip() != ""
    raise ValueError(kind)


def problems(environ: Mapping[str, str]) -> dict[str, str]:
    """Every malformed launcher or cluster variable: its name -> one line (what it is, a valid example)."""
    found = {}
    for name, (kind, valid) in RULES.items():
        value = environ.get(name)
        if value is not None and not _valid(kind, value):
            why = visible_devices.torch_disagrees(value) if kind == "cuda" else None
            found[name] = BAD_VARIABLE.format(
                name=name, value=repr(value)[:80], valid=valid.format(name=name, why=why)
            )
    return found


def problem(environ: Mapping[str, str]) -> str | None:
    """The first malformed launcher or cluster variable, as one line (what it is, a valid example); None."""
    return next(iter(problems(environ).values()), None)


def requeue_problem(environ: Mapping[str, str]) -> str | None:
    """Why the SLURM job id Lightning's requeue handler would pass to ``scontrol`` is unsafe, or None."""
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        value = environ.get(name)
        if value is not None and _JOB.fullmatch(value) is None:
            return BAD_VARIABLE.format(name=name, value=repr(value)[:80], valid=RULES[name][1])
    return None
