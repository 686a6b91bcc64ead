"""Reading a checkpoint: the only ``torch.load`` in lit_gpu, weights-only, the file read once, bounded.

A file is read once into memory; those bytes are scanned (:mod:`lit_gpu.checkpoints.scan`) and then
loaded, so a file changed in between changes nothing. A pickle payload is one line unless the *user* passed
``trust`` (a flag, never a file).
"""

from __future__ import annotations

import io
import os
import pickle
import stat
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch

from lit_gpu import messages
from lit_gpu.checkpoints import scan
from lit_gpu.checkpoints.contracts import STATE_PATH_KEYS, drop_outside_paths, inside
from lit_gpu.checkpoints.scan import (
    DEFAULT_LIMITS,
    BoundsError,
    CheckpointLimits,
    PickledObjects,
    Scan,
    check_layout,
)
from lit_gpu.errors import LitGpuError
from lit_gpu.messages import first_line

__all__ = [
    "BoundsError",
    "CheckpointError",
    "CheckpointFacts",
    "CheckpointLimits",
    "LIGHTNING_KEYS",
    "NOT_LIGHTNING",
    "PickledObjects",
    "STATE_PATH_KEYS",
    "check_bounds",
    "check_buffer",
    "check_checkpoint_file",
    "drop_outside_paths",
    "inside",
    "inspect",
    "not_lightning",
    "plain_state_dict",
    "read_checkpoint",
    "read_for_check",
    "read_for_resume",
    "read_header",
    "read_header_held",
    "read_into_memory",
    "read_remote",
    "what_it_is",
]

CKPT_IS_DIRECTORY = (
    "--ckpt_path {path} is a directory, not a checkpoint file; pass a .ckpt file in it{example}, "
    "or --ckpt_path last / best"
)
CKPT_NOT_REGULAR = (
    "checkpoint {path} is not a regular file (a FIFO, a device or a socket); pass a checkpoint file"
)
COUNTERS_DISAGREE = (
    "{path} holds {problem}: it was edited or put together from two checkpoints, so it names no one step to"
    " resume at; use another checkpoint (its run's last.ckpt)"
)


# ---- checkpoint kind --------------------------------------------------------------------------------
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
        from lit_gpu.checkpoints.contracts import counters_problem

        problem = counters_problem(header)  # one step per checkpoint: shown, chosen by, resumed at
        return (
            None if problem is None else COUNTERS_DISAGREE.format(path=messages.shown(path), problem=problem)
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


# ---- checkpoint --------------------------------------------------------------------------------
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
        raise CheckpointError(CKPT_IS_DIRECTORY.format(path=path, example=example))
    if not path.is_file():
        if path.exists():  # a FIFO or a device (/dev/zero) named like a checkpoint: never opened
            raise CheckpointError(CKPT_NOT_REGULAR.format(path=path))
        raise CheckpointError(f"checkpoint not found: {path}")
    if path.stat().st_size == 0:
        raise CheckpointError(
            f"checkpoint {path} is empty (0 bytes); a save was interrupted: use another one"
        )
    return path


def _open(path: str | os.PathLike) -> Any:
    """``path`` opened if still a regular file (a FIFO put there after the entry check is not waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise _corrupt(path, err) from err
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _corrupt(path, OSError(f"{path} is not a regular file"))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


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
        allowed = scan.safe_globals()  # numeric numpy scalars and dtypes, as torch documents
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


# ---- bounds --------------------------------------------------------------------------------
#: what each record costs while ``torch.load`` reads the file (its name and size here, torch's directory)
RECORD_KEPT = 256


def check_buffer(
    data: bytes | bytearray | memoryview, limits: CheckpointLimits | None = None, *, where: str, held: int = 0
) -> int:
    """Check that ``torch.load`` of the in-memory ``torch.save`` zip ``data`` costs at most the budget.

    Args:
        data: The whole file, as ``torch.load`` will read it.
        limits: The budgets; :data:`DEFAULT_LIMITS` when ``None``.
        where: How to name the file in messages.
        held: Bytes the caller keeps in memory while loading (``len(data)`` when it loads from ``data``):
            charged first, so that the copy and what the load builds together stay within the budget.

    Returns:
        The bytes charged (``held``, storages and objects).

    Raises:
        BoundsError: One line: what in the file exceeds which budget, or is not as torch.save writes it.
    """
    limits = limits or DEFAULT_LIMITS
    budget = limits.budget(len(data))
    archive = check_layout(data, where, room=budget - held)  # its listing, with the copy held, fits
    try:
        pickled = archive.read("data.pkl")  # stored, so at most the file's size; torch's bytes
    except (RuntimeError, ValueError, OSError) as err:
        raise BoundsError(f"{where}: data.pkl is damaged ({err}); the file is corrupt") from None
    scan = Scan(archive.records, budget, limits, where, limits.max_nodes + len(pickled))
    scan.charge(held, "the file read into memory")
    scan.charge(len(archive.records) * RECORD_KEPT, "the zip's records")  # kept while torch.load reads
    scan.run(io.BytesIO(pickled))
    return scan.used


def check_bounds(
    source: str | os.PathLike | IO[bytes], limits: CheckpointLimits | None = None, *, where: str = ""
) -> int:
    """:func:`check_buffer` of a path or a seekable binary file (read whole; its position is restored)."""
    if isinstance(source, str | os.PathLike):
        where = where or f"checkpoint {os.fspath(source)}"
        with open(source, "rb") as f:
            return check_buffer(f.read(), limits, where=where)
    where = where or "checkpoint from a file object"
    position = source.tell()
    try:
        source.seek(0)
        return check_buffer(source.read(), limits, where=where)
    finally:
        source.seek(position)


# ---- checkpoint facts --------------------------------------------------------------------------------
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
