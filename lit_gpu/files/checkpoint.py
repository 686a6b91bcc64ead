"""Reading checkpoint files: the only ``torch.load`` in lit_gpu, weights-only unless the user says otherwise.

* :func:`read_checkpoint`: a ``torch.save`` file or ``.safetensors`` into plain Python data; a pickle
  payload is one line (:class:`CheckpointError`) unless the *user* passed ``trust`` (a flag, never a file).
* :func:`lit_gpu.files.checkpoint_facts.inspect`: the one look ``--ckpt_path`` resolution takes at a file.
* :func:`read_header`: the small part of a checkpoint (step, epoch, hyper-parameters, callback state),
  weights and optimizer state dropped: what ``--ckpt_path`` resolution needs, read once.
* :func:`read_for_resume`: what Lightning restores (``AtomicCheckpointIO.load_checkpoint``), with every
  path in callback state that leads outside the checkpoint's own folder dropped (:func:`drop_outside_paths`).
* :func:`~lit_gpu.files.checkpoint_kind.not_lightning`: whether a file can start a run (its own room).
* :func:`inside`: whether a path, after resolving ``..``, absolute forms and symlinks, is in a folder.

Without ``trust``, a file is read once into memory and ``torch.load`` reads those bytes, after they were
bounded by the file's size (:mod:`lit_gpu.files.bounds`, :class:`CheckpointLimits`): a file that would cost
more than ``constant + 2 x its size`` of memory (the copy included), that is not laid out as ``torch.save``
writes it, or that torch's zip reader and Python's would read differently, is one line before ``torch.load``
runs.
"""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.files import numpy_globals
from lit_gpu.files.bounds import BoundsError, CheckpointLimits, PickledObjects, check_buffer
from lit_gpu.files.checkpoint_kind import (
    LIGHTNING_KEYS,
    NOT_LIGHTNING,
    plain_state_dict,
    what_it_is,
)
from lit_gpu.files.state_paths import STATE_PATH_KEYS, drop_outside_paths, inside
from lit_gpu.messages import first_line
from lit_gpu.textfiles import BadFileError, open_regular

__all__ = [
    "CheckpointError",
    "CheckpointLimits",
    "STATE_PATH_KEYS",
    "check_checkpoint_file",
    "drop_outside_paths",
    "inside",
    "read_checkpoint",
    "read_for_check",
    "read_for_resume",
    "read_header",
    "read_header_held",
    "read_into_memory",
    "read_remote",
]


class CheckpointError(LitGpuError):
    """A checkpoint file that cannot be read (missing, empty, truncated, corrupt, untrusted)."""


def _corrupt(path: Any, err: BaseException) -> CheckpointError:
    return CheckpointError(
        messages.CORRUPT_CHECKPOINT.format(what=f"checkpoint {path}", reason=messages.shown(first_line(err)))
    )


def _check_entry(path: str | os.PathLike) -> Path:
    """The directory entry of a checkpoint (a non-empty file), checked without opening it."""
    path = Path(path)
    if path.is_dir():
        inside_ = sorted(path.rglob("*.ckpt"))
        example = f" (e.g. {inside_[-1]})" if inside_ else ""
        raise CheckpointError(messages.CKPT_IS_DIRECTORY.format(path=path, example=example))
    if not path.is_file():
        if path.exists():  # a FIFO or a device (/dev/zero) named like a checkpoint: never opened
            raise CheckpointError(messages.CKPT_NOT_REGULAR.format(path=path))
        raise CheckpointError(f"checkpoint not found: {path}")
    if path.stat().st_size == 0:
        raise CheckpointError(
            f"checkpoint {path} is empty (0 bytes); a save was interrupted: use another one"
        )
    return path


def _open(path: str | os.PathLike) -> Any:
    """``path`` opened if still a regular file (a FIFO put there after the entry check is not waited on)."""
    try:
        return open_regular(path)
    except (BadFileError, OSError) as err:
        raise _corrupt(path, err) from err


def check_checkpoint_file(path: str | os.PathLike) -> Path:
    """Cheap sanity check of a checkpoint file without loading it (exists, non-empty, complete zip).

    Raises:
        CheckpointError: With a one-line reason.
    """
    path = _check_entry(path)
    if path.suffix == ".safetensors":
        return path
    return _check_content(path, path)


def _check_content(path: Path, source: Any) -> Path:
    """``source`` (``path`` itself or its bytes in memory) is a complete zip or a legacy pickle."""
    if isinstance(source, Path):
        with _open(source) as f:
            return _check_content(path, f)
    if zipfile.is_zipfile(source):
        source.seek(0)
        try:
            with zipfile.ZipFile(source) as archive:
                archive.infolist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as err:  # not UTF-8
            raise _corrupt(path, err) from None
        return path
    source.seek(0)
    head = source.read(2)
    if head[:1] != b"\x80":  # neither a zip (torch >= 1.6) nor a legacy pickle
        raise _corrupt(path, ValueError("not a torch checkpoint: no zip archive or pickle header"))
    return path


LEGACY_REFUSED = (
    "{path} is not a zip-format torch checkpoint (the legacy format of torch < 1.6, or not a checkpoint), "
    "whose reading cannot be bounded by its size; save it again with a current torch.save, or, only if "
    "you trust the file, {opt_out}"
)


def _read_once(source: Any) -> bytes:
    """The whole of ``source`` (a path or a binary file object), read once: what is checked and loaded."""
    if isinstance(source, str | os.PathLike):
        with _open(source) as f:
            return f.read()
    if isinstance(source, io.BytesIO):
        return source.getvalue()  # its own bytes, not a copy
    if source.seekable():
        position = source.tell()
        source.seek(0)
        try:
            return source.read()
        finally:
            source.seek(position)
    return source.read()


def _bounded(source: Any, path: Any, opt_out: str, limits: CheckpointLimits | None) -> io.BytesIO:
    """``source`` read once into memory, after :func:`check_buffer` passed those bytes: ``torch.load`` reads
    exactly what was checked (a file replaced or changed after the read changes nothing)."""
    try:
        data = _read_once(source)  # a legacy file is refused below, on these bytes
    except OSError as err:
        raise _corrupt(path, err) from err
    try:
        if not zipfile.is_zipfile(io.BytesIO(data)):
            raise CheckpointError(LEGACY_REFUSED.format(path=f"checkpoint {path}", opt_out=opt_out))
        check_buffer(data, limits, where=f"checkpoint {path}", held=len(data))
    except PickledObjects as err:
        message = messages.PICKLE_REFUSED.format(path=f"checkpoint {path}", opt_out=opt_out)
        raise CheckpointError(message) from err
    except BoundsError as err:
        raise CheckpointError(str(err)) from err
    return io.BytesIO(data)


def _torch_load(
    source: Any,
    path: Any,
    map_location: Any,
    weights_only: bool,
    opt_out: str,
    limits: CheckpointLimits | None = None,
    **kw: Any,
) -> Any:
    allowed: list[Any] = []
    if weights_only:
        source = _bounded(source, path, opt_out, limits)
        allowed = numpy_globals.safe_globals()  # numeric numpy scalars and dtypes, as torch documents
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(source, map_location=map_location, weights_only=weights_only, **kw)
    except pickle.UnpicklingError as err:
        if weights_only and "Weights only load failed" in str(err):
            message = messages.PICKLE_REFUSED.format(path=f"checkpoint {path}", opt_out=opt_out)
            raise CheckpointError(message) from None
        raise _corrupt(path, err) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError) as err:
        if "on a CUDA device" in str(err):  # a custom map_location that kept CUDA storages
            raise CheckpointError(messages.SAVED_ON_GPU.format(what=f"checkpoint {path}")) from None
        raise _corrupt(path, err) from err
    except Exception as err:
        if not weights_only or isinstance(err, MemoryError):  # a trusted pickle's errors; the machine's
            raise
        # the weights-only reader of an untrusted (checked) file raised: a property of the file, such
        # as a call whose arguments torch rejects (TypeError, OverflowError, KeyError, LookupError)
        raise _corrupt(path, err) from err


def read_checkpoint(
    path_or_obj: Any,
    map_location: Any = "cpu",
    weights_only: bool = True,
    trust: bool = False,
    *,
    opt_out: str = "pass trust=True",
    limits: CheckpointLimits | None = None,
) -> Any:
    """Read a checkpoint file (``torch.save`` format or ``.safetensors``) into Python objects.

    Args:
        path_or_obj: A path, a binary file object, or an already-loaded object (returned as is).
        map_location: Where storages go (``"cpu"``, ``"meta"``, a device, a dict or a function); a
            checkpoint written on ``cuda:0`` loads on a CPU-only machine with the default ``"cpu"``.
        weights_only: Refuse arbitrary pickled objects (safe for untrusted files).
        trust: Allow arbitrary pickles (sets ``weights_only=False``). Only for files you trust: the
            caller passes the user's own choice here, never a value read from a file.
        opt_out: How the caller's user allows pickles, for the refusal message.
        limits: The budgets of reading it (:class:`CheckpointLimits`; the defaults when ``None``):
            without ``trust``, a file whose reading would cost more is refused before ``torch.load``.

    Raises:
        CheckpointError: Missing, empty, corrupt or truncated file, pickled objects without ``trust``, or
            a file whose reading would exceed ``limits``.
    """
    if not isinstance(path_or_obj, str | os.PathLike | io.IOBase):
        return path_or_obj
    weights_only = bool(weights_only) and not trust
    if isinstance(path_or_obj, io.IOBase):
        name = getattr(path_or_obj, "name", None)  # a file's path, or one given to an in-memory copy
        label = name if isinstance(name, str) else "from a file object"
        return _torch_load(path_or_obj, label, map_location, weights_only, opt_out, limits)
    path = check_checkpoint_file(path_or_obj)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        device = map_location if isinstance(map_location, str) else "cpu"
        try:
            return load_file(str(path), device=device)
        except Exception as err:
            raise _corrupt(path, err) from None
    return _torch_load(path, path, map_location, weights_only, opt_out, limits)


def read_header(
    path: str | os.PathLike,
    trust: bool = False,
    opt_out: str = "pass trust=True",
    limits: CheckpointLimits | None = None,
) -> Any:
    """The checkpoint without its weights and optimizer state: step, epoch, hyper-parameters, state.

    One weights-only read (the file read once into memory, checked, loaded from those bytes) serves every
    question ``--ckpt_path`` resolution asks (which step, which model class, a pickle payload).
    """
    return read_header_held(path, trust, opt_out, limits)[0]


def read_header_held(
    path: str | os.PathLike,
    trust: bool = False,
    opt_out: str = "pass trust=True",
    limits: CheckpointLimits | None = None,
    held: io.BytesIO | None = None,
) -> tuple[Any, io.BytesIO | None]:
    """:func:`read_header`, and the bytes it was read from (the file opened once; ``None``: safetensors;
    ``held``: what :func:`read_into_memory` already read of it).

    The bytes are what was checked: the load that follows (:func:`read_for_resume` with ``data=``) reads
    them, not the file again, so a file replaced in between changes nothing.
    """
    if Path(path).suffix == ".safetensors":
        check_checkpoint_file(path)
        return None, None
    held = read_into_memory(path) if held is None else held
    header = _torch_load(held, Path(path), "cpu", not trust, opt_out, limits)
    held.seek(0)
    if isinstance(header, dict) and LIGHTNING_KEYS & set(header):
        for key in _HEAVY_KEYS:  # what no question about the file needs: the memory goes back now
            if key in header:
                header[key] = {} if key == "state_dict" else []
    return header, held


# the parts of a Lightning checkpoint a header does not keep
_HEAVY_KEYS = ("state_dict", "optimizer_states")


def read_into_memory(path: str | os.PathLike) -> io.BytesIO:
    """The whole file as a named in-memory copy: checked and then loaded, it cannot change in between."""
    path = _check_entry(path)
    try:
        with _open(path) as f:  # the one open: every check below reads these bytes
            data = io.BytesIO(f.read())
    except OSError as err:
        raise _corrupt(path, err) from err
    if path.suffix != ".safetensors":
        _check_content(path, data)
        data.seek(0)
    data.name = os.fspath(path)  # how messages name it
    return data


def read_for_check(checkpoint_path: Any, weights_only: bool) -> Any:
    """The checkpoint ``load_from_checkpoint`` is about to read, for its hyper-parameters to be checked."""
    opt_out = "pass weights_only=False"
    if isinstance(checkpoint_path, str | os.PathLike) and os.path.isfile(checkpoint_path):
        return read_checkpoint(checkpoint_path, trust=not weights_only, opt_out=opt_out)
    if hasattr(checkpoint_path, "read"):
        if not (hasattr(checkpoint_path, "seekable") and checkpoint_path.seekable()):
            raise CheckpointError(
                "cannot check the hyper-parameters of a checkpoint read from a non-seekable stream before "
                "loading it; pass a path or a seekable file object"
            )
        position = checkpoint_path.tell()
        try:
            return read_checkpoint(checkpoint_path, trust=not weights_only, opt_out=opt_out)
        finally:
            checkpoint_path.seek(position)
    return read_remote(checkpoint_path, "cpu", weights_only, opt_out=opt_out)


def read_remote(
    path: Any,
    map_location: Any = "cpu",
    weights_only: bool | None = None,
    *,
    opt_out: str = "pass --weights_only false",
) -> Any:
    """A checkpoint at a URL or fsspec path (``s3://``, ``https://``), opened as Lightning does, bounded.

    ``weights_only`` is the user's setting; ``None`` means ``True`` (also for ``http(s)://``).
    """
    from lightning.fabric.utilities.cloud_io import get_filesystem

    with get_filesystem(path).open(path, "rb") as f:
        data = io.BytesIO(f.read())  # one download; the checks seek a lot
    return _torch_load(data, path, map_location, weights_only is not False, opt_out)


def read_for_resume(
    path: str | os.PathLike,
    map_location: Any = "cpu",
    weights_only: bool | None = None,
    data: io.BytesIO | None = None,
) -> Any:
    """The checkpoint Lightning restores from ``path``, with callback paths outside its folder dropped.

    ``weights_only`` is the user's setting (``--weights_only``, ``fit(weights_only=...)``); ``None``
    means ``True``. ``data``: the file's bytes, already read (:func:`read_header_held`): read from
    them, not from ``path`` again. One line lists what was dropped.
    """
    trust = weights_only is False
    source = path if data is None else data
    checkpoint = read_checkpoint(source, map_location, trust=trust, opt_out="pass --weights_only false")
    if not (isinstance(checkpoint, Mapping) and "pytorch-lightning_version" in checkpoint):
        if plain_state_dict(checkpoint):  # Lightning's own hand-back of weights (ddp_spawn's .temp.ckpt);
            return checkpoint  # a --ckpt_path is refused before this, when its header is read
        raise CheckpointError(NOT_LIGHTNING.format(path=path, what=what_it_is(path, checkpoint)))
    folder = Path(path).resolve().parent
    dropped = drop_outside_paths(checkpoint, folder)
    if dropped:
        messages.tell(
            messages.STATE_PATHS_DROPPED.format(
                ckpt=path, count=len(dropped), folder=folder, fields="; ".join(dropped[:4])
            )
        )
    return checkpoint
