"""One owner of a ``.ckpt`` file: saved atomically, read once and bounded, checked before any restore.

* :mod:`~lit_gpu.checkpoints.io`: the CheckpointIO (temp beside the target, fsync, rename; disk full);
* :mod:`~lit_gpu.checkpoints.read`: the only ``torch.load``; :mod:`~lit_gpu.checkpoints.scan` its bounds;
* :mod:`~lit_gpu.checkpoints.contracts`: what restored state must look like;
* :mod:`~lit_gpu.checkpoints.optimizer`: the optimizers' and schedulers' states at a resume;
* :mod:`~lit_gpu.checkpoints.build`: building what a file names;
* :mod:`~lit_gpu.checkpoints.load`: into any module (:func:`load_into`, :func:`load_lightning_module`).
"""

from lit_gpu.checkpoints.build import MODEL_SPEC_KEY, NET_SPEC_KEY, net_spec
from lit_gpu.checkpoints.load import (
    CheckpointMismatchError,
    LoadReport,
    clean_keys,
    load_into,
    load_lightning_module,
    load_state_dict,
)
from lit_gpu.checkpoints.read import CheckpointError, check_checkpoint_file, read_checkpoint

__all__ = [
    "MODEL_SPEC_KEY",
    "NET_SPEC_KEY",
    "CheckpointError",
    "CheckpointMismatchError",
    "LoadReport",
    "check_checkpoint_file",
    "clean_keys",
    "load_into",
    "load_lightning_module",
    "load_state_dict",
    "net_spec",
    "read_checkpoint",
]
