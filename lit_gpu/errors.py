"""User-facing errors: a :class:`LitGpuError`, and :func:`explain` turning known failures into one line.

``lit-gpu`` prints what :func:`explain` returns as ``lit-gpu: error: ...`` and exits 2; anything it
does not recognise keeps its traceback (a lit_gpu bug). Each translator below takes an exception and
returns a one-line answer (texts in :mod:`lit_gpu.messages`) or ``None``. Device errors are rewritten
where the trainer is built (:mod:`lit_gpu.cli.trainer`), where the config that asked for them is known.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from collections.abc import Callable

import torch

from lit_gpu import messages


class LitGpuError(RuntimeError):
    """A mistake the user can fix (bad path, missing data, impossible device request...).

    The message must say what went wrong and what to do instead, in one line.
    """


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is a CUDA (or host) out-of-memory error: ``torch.OutOfMemoryError`` or its text."""
    if isinstance(err, torch.OutOfMemoryError):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and (
        "CUDA out of memory" in text or "out of memory" in text.lower()[:80]
    )


def out_of_memory(err: BaseException, batch_size: int | None = None) -> str | None:
    """Next steps for a CUDA (or host) out-of-memory error."""
    if not is_out_of_memory(err):
        return None
    text = str(err)
    match = re.search(r"Tried to allocate ([\d.]+ \w+)", text)
    detail = f" (tried to allocate {match.group(1)})" if match else ""
    half = max(1, batch_size // 2) if batch_size else "<half the current value>"
    return messages.OUT_OF_MEMORY.format(what="training", detail=detail, half=half)


_KEYS = re.compile(r'"([^"]+)"')
_SIZE_MISMATCH = re.compile(
    r"size mismatch for ([^:]+): copying a param with shape torch\.Size\(\[([^\]]*)\]\) from "
    r"checkpoint, the shape in current model is torch\.Size\(\[([^\]]*)\]\)"
)


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def state_dict_mismatch(err: BaseException) -> str | None:
    """torch's ``Error(s) in loading state_dict`` wall as one line of missing/unexpected/mis-shaped keys."""
    text = str(err)
    if not isinstance(err, RuntimeError) or "Error(s) in loading state_dict" not in text:
        return None
    from lit_gpu.checkpoints import LoadReport  # checkpoints raises LitGpuError: imported late

    report = LoadReport()
    for line in (ln.strip() for ln in text.splitlines()):
        if line.startswith("Missing key(s)"):
            report.missing = _KEYS.findall(line)
        elif line.startswith("Unexpected key(s)"):
            report.unexpected = _KEYS.findall(line)
        elif match := _SIZE_MISMATCH.match(line):
            report.shape_mismatches[match.group(1)] = (_shape(match.group(2)), _shape(match.group(3)))
    target = re.search(r"loading state_dict for (\w+)", text)
    return messages.STATE_DICT_MISMATCH.format(
        target=target.group(1) if target else "the model", summary=report.summary()
    )


def dataloader_worker_died(err: BaseException) -> str | None:
    """A DataLoader worker killed by a signal (often /dev/shm or host memory)."""
    text = str(err)
    died = "exited unexpectedly" in text or "killed by signal" in text
    if isinstance(err, RuntimeError) and "DataLoader worker" in text and died:
        return messages.DATALOADER_WORKER_DIED.format(reason=messages.first_line(err))
    return None


def bad_checkpoint_file(err: BaseException) -> str | None:
    """torch.load's errors for truncated/corrupt files and for GPU checkpoints on a CPU-only machine."""
    text = str(err)
    if isinstance(err, RuntimeError):
        if "PytorchStreamReader failed" in text or "failed finding central directory" in text:
            return messages.CORRUPT_CHECKPOINT.format(what="the checkpoint", reason=messages.first_line(err))
        if "Attempting to deserialize object on a CUDA device" in text:
            return messages.SAVED_ON_GPU.format(what="the checkpoint")
    if isinstance(err, pickle.UnpicklingError | EOFError | zipfile.BadZipFile) and (
        "Weights only load failed" not in text
    ):
        return messages.CORRUPT_CHECKPOINT.format(what="the checkpoint", reason=messages.first_line(err))
    return None


def dataset_raised_in_worker(err: BaseException) -> str | None:
    """An exception re-raised from a DataLoader worker: the dataset's own error, with how to see it."""
    text = str(err)
    if "in DataLoader worker process" not in text:
        return None
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    reason = lines[-1].strip() if lines else messages.first_line(err)
    return messages.DATASET_RAISED_IN_WORKER.format(kind=type(err).__name__, reason=reason)


Translator = Callable[[BaseException], "str | None"]

# Tried in order; the first answer wins.
TRANSLATORS: tuple[Translator, ...] = (
    out_of_memory,
    state_dict_mismatch,
    dataloader_worker_died,
    bad_checkpoint_file,
    dataset_raised_in_worker,
)


def explain(err: BaseException) -> str | None:
    """One-line, actionable message for a :class:`LitGpuError` or a known failure, else ``None``."""
    if isinstance(err, LitGpuError):
        return str(err)
    for translate in TRANSLATORS:
        message = translate(err)
        if message:
            return message
    return None
