"""The one look ``--ckpt_path`` resolution takes at a checkpoint file: :func:`inspect`, its facts.

Whether the file's real path leaves the folder it must stay in, whether it is whole, its header and its
kind, in one call of the checkpoint reader (:mod:`lit_gpu.files.checkpoint`), so that the run store
(:mod:`lit_gpu.run.store`) enters the reader once per file (docs/architecture.md, the route).
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lit_gpu.files.checkpoint import (
    CheckpointError,
    CheckpointLimits,
    check_checkpoint_file,
    read_header,
    read_header_held,
    read_into_memory,
)
from lit_gpu.files.checkpoint_kind import not_lightning
from lit_gpu.files.state_paths import inside

__all__ = ["CheckpointFacts", "inspect"]


@dataclass(frozen=True)
class CheckpointFacts:
    """What one look at a checkpoint file says (:func:`inspect`).

    Attributes:
        path: The file looked at.
        leaves: The folder among ``within`` whose inside the file's real path leaves (nothing of the file
            was read); ``target``: that real path.
        unfinished: Why the file is not a whole checkpoint (missing, empty, a truncated zip: a save that
            did not finish; nothing was loaded).
        header: Otherwise its top-level object, read once, weights and optimizer state dropped
            (:func:`read_header`; ``None`` for a safetensors file).
        problem: Why it cannot start or resume a run (:func:`not_lightning`); ``None``: a Lightning
            checkpoint.
        data: With ``hold``, the bytes the header was read from (checked): what the run's load reads.
    """

    path: Path
    leaves: Path | None = None
    target: str | None = None
    unfinished: CheckpointError | None = None
    header: Any = None
    problem: str | None = None
    data: io.BytesIO | None = field(default=None, repr=False, compare=False)


def inspect(
    path: str | os.PathLike,
    within: Sequence[str | os.PathLike] = (),
    trust: bool = False,
    opt_out: str = "pass trust=True",
    limits: CheckpointLimits | None = None,
    hold: bool = False,
) -> CheckpointFacts:
    """Everything ``--ckpt_path`` resolution asks of the file at ``path``, in one call: the reader's one door.

    In order, stopping at the first answer: does its real path (links resolved) leave a folder of
    ``within`` (the run folders it lies in: nothing of it is read then); is it a whole checkpoint; then its
    header (one weights-only read unless the user's ``trust``) and whether it is a Lightning checkpoint.

    Raises:
        CheckpointError: A whole file that cannot be read: corrupt, a pickle payload without ``trust``, or
            past ``limits`` (one line).
    """
    for folder in within:
        if not inside(path, folder):
            return CheckpointFacts(Path(path), leaves=Path(folder), target=os.path.realpath(path))
    if (
        hold and Path(path).suffix != ".safetensors"
    ):  # the file opened once: its checked bytes kept for the load
        try:
            held = read_into_memory(path)  # the same checks as check_checkpoint_file, on the bytes read
        except CheckpointError as err:
            return CheckpointFacts(Path(path), unfinished=err)
        header, data = read_header_held(path, trust=trust, opt_out=opt_out, limits=limits, held=held)
        return CheckpointFacts(Path(path), header=header, problem=not_lightning(path, header), data=data)
    try:
        check_checkpoint_file(path)
    except CheckpointError as err:
        return CheckpointFacts(Path(path), unfinished=err)
    header = read_header(path, trust=trust, opt_out=opt_out, limits=limits)
    return CheckpointFacts(Path(path), header=header, problem=not_lightning(path, header))
