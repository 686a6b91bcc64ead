"""Lightning's own resume from a cluster checkpoint (``hpc_ckpt_N.ckpt``, SLURM), turned off for a trainer.

Under SLURM with no ``ckpt_path``, Lightning's checkpoint connector takes the newest ``hpc_ckpt_N.ckpt`` in
``default_root_dir`` whoever wrote it (``_hpc_resume_path``), and its numbering stops with a ``ValueError``
on a name such as ``hpc_ckpt_.ckpt``. The run store (:func:`lit_gpu.run.store.cluster_resolution`) chooses
by the owner rules instead; when it passed every one over, this tells the trainer's connector not to
look again. No public API does: pinned by ``test_checkpoint_connector__hpc_resume_path``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

_NO_CLUSTER_RESUME: dict[type, type] = {}


def no_cluster_resume(trainer: Any) -> None:
    """This trainer's fit does not resume from a cluster checkpoint by itself (its own class otherwise)."""
    connector = trainer._checkpoint_connector
    base = type(connector)
    if base in _NO_CLUSTER_RESUME.values():
        return
    if base not in _NO_CLUSTER_RESUME:
        _NO_CLUSTER_RESUME[base] = type(
            f"NoClusterResume{base.__name__}", (base,), {"_hpc_resume_path": property(lambda self: None)}
        )
    connector.__class__ = _NO_CLUSTER_RESUME[base]


def _save_path_of(save_path: Callable[[str], str], folderpath: Any) -> str:
    """``save_path`` for Lightning's folder argument (module level: the trainer pickles for ddp_spawn)."""
    return save_path(str(folderpath))


def own_cluster_saves(trainer: Any, save_path: Callable[[str], str]) -> None:
    """Lightning's requeue save (SIGUSR1 under SLURM: ``hpc_save_path``) writes where ``save_path(root)``
    says, not after the highest number of any name holding ``ckpt_`` in the root (a planted name without
    digits stops that save with a ``ValueError``, and the checkpoint is lost)."""
    trainer._checkpoint_connector.hpc_save_path = functools.partial(_save_path_of, save_path)
