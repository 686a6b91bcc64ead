"""What a checkpoint file is: a Lightning checkpoint, or (named in one line) a plain state_dict, a
safetensors file, any other object; the one rule :func:`not_lightning` for ``--ckpt_path`` and resumes."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

from lit_gpu import messages

__all__ = ["LIGHTNING_KEYS", "NOT_LIGHTNING", "not_lightning", "plain_state_dict", "what_it_is"]

NOT_LIGHTNING = (
    "{path} is {what}, not a Lightning checkpoint, so a run cannot start from it; give --ckpt_path "
    "(ckpt_path=) a .ckpt written by lit-gpu fit, or load the weights into a module with "
    "lit_gpu.checkpoints.load_into(module, path)"
)


#: top-level keys of a checkpoint Lightning's ``Trainer.save_checkpoint`` writes
LIGHTNING_KEYS = frozenset({"pytorch-lightning_version", "state_dict", "global_step", "epoch", "loops"})


def not_lightning(path: str | os.PathLike, header: Any) -> str | None:
    """Why the file at ``path`` (its ``header``) cannot start or resume a run, or ``None`` when it can.

    A file is taken for a Lightning checkpoint when its top-level dict has one of the keys Lightning writes
    (a damaged one is then Lightning's to report); a plain state_dict, a safetensors file or any other
    object is named.
    """
    if isinstance(header, Mapping) and not plain_state_dict(header) and LIGHTNING_KEYS & set(header):
        from lit_gpu.files.lightning_contracts import counters_problem

        problem = counters_problem(header)  # one step per checkpoint: shown, chosen by, resumed at
        return (
            None
            if problem is None
            else messages.COUNTERS_DISAGREE.format(path=messages.shown(path), problem=problem)
        )
    return NOT_LIGHTNING.format(path=messages.shown(path), what=what_it_is(path, header))


def plain_state_dict(checkpoint: Any) -> bool:
    return (
        isinstance(checkpoint, Mapping)
        and bool(checkpoint)
        and all(isinstance(v, torch.Tensor) for v in checkpoint.values())
    )


def what_it_is(path: str | os.PathLike, checkpoint: Any) -> str:
    """A few words on a file that is not a Lightning checkpoint."""
    if str(path).endswith(".safetensors"):
        return "a safetensors file of weights"
    if isinstance(checkpoint, Mapping) and checkpoint:
        if plain_state_dict(checkpoint):
            return f"a plain state_dict of {len(checkpoint)} tensors (as lit-gpu export writes)"
        keys = ", ".join(repr(k)[:30] for k in list(checkpoint)[:3])
        return f"a torch.save file of a dict ({keys}{', ...' if len(checkpoint) > 3 else ''})"
    return f"a torch.save file of {type(checkpoint).__name__}"
