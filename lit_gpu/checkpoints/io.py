"""Saving a checkpoint: a temp file beside the target, fsync, rename; a full disk is one line."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from stat import S_ISREG
from typing import IO, Any

import lightning.pytorch as pl
import torch
from fsspec.utils import get_protocol
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.checkpoints import read
from lit_gpu.checkpoints.contracts import check_restored_state
from lit_gpu.checkpoints.optimizer import check_at_fit_start
from lit_gpu.checkpoints.scan import size_text
from lit_gpu.errors import LitGpuError

__all__ = [
    "AtomicCheckpointIO",
    "DiskFullError",
    "atomic_file",
    "atomic_torch_save",
    "atomic_write",
    "clean_stale_temp_files",
    "install_atomic_checkpoint_io",
]

DISK_FULL = (
    "{what}: could not save checkpoint {path} (about {size}{room}); {kept}no partial file was left; "
    "free space on that disk or point --checkpoint.dirpath (or --trainer.default_root_dir) at a disk "
    "with room, then resume with --ckpt_path last"
)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()


def _fsync_dir(directory: Path) -> None:
    """Flush a directory entry (the rename) to disk; a no-op where directories cannot be opened."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


#: lit_gpu's temp names: .<name>.lit_gpu-<random>.tmp, and those of earlier versions
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?:lit_gpu-|[A-Za-z0-9-]+\.\d{1,7}\.)?[a-z0-9_]{8}\.tmp$")
STALE_AFTER_S = 3600.0


def _size(nbytes: float) -> str:
    return size_text(nbytes, binary=False)  # disk sizes in KB/MB/GB, as df -H says them


def clean_stale_temp_files(folder: str | os.PathLike, now: float | None = None) -> list[str]:
    """Delete the temp files killed saves left in ``folder`` (SIGKILL, OOM killer, power loss): files named
    as :func:`atomic_file` names them and not written for :data:`STALE_AFTER_S` (a live save writes
    continuously). Not recursive; ``now`` is for tests. Returns ``"<path> (<size>)"`` for each removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    now = time.time() if now is None else now
    removed = []
    for path in sorted(folder.glob(".*.tmp")):
        try:
            stat = path.lstat()
        except OSError:
            continue
        if _TEMP.match(path.name) and S_ISREG(stat.st_mode) and now - stat.st_mtime > STALE_AFTER_S:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(f"{path} ({_size(stat.st_size)})")
    return removed


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb", **open_kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temp file beside ``path`` for writing; on a clean exit fsync it and rename it to ``path``.

    A crash, kill or exception at any point leaves the previous ``path`` (if any) untouched and no
    temp file behind (except after SIGKILL, which leaves a hidden ``.<name>.lit_gpu-*.tmp`` that
    :func:`clean_stale_temp_files` removes at a later fit).

    Args:
        path: Destination file.
        mode: ``"wb"`` or ``"w"`` (text; ``open_kwargs`` such as ``newline=""`` go to ``open``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{path.name}.lit_gpu-"  # see clean_stale_temp_files
    fd, tmp_name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp_name, _FILE_MODE)  # mkstemp makes 0600; give the usual umask-based mode
        with os.fdopen(fd, mode, **open_kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    _fsync_dir(path.parent)


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> Path:
    """Write ``path`` through ``write(file)`` atomically (see :func:`atomic_file`).

    Args:
        path: Destination file.
        write: Callable writing the full content to the binary file object it is given.

    Returns:
        The destination path.
    """
    with atomic_file(path) as f:
        write(f)
    return Path(path)


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save(obj, path)``, atomically (see :func:`atomic_write`)."""
    return atomic_write(path, lambda f: torch.save(obj, f))


class DiskFullError(LitGpuError):
    """No space left for a checkpoint; the previous file is intact and no temp file is left."""


def tensor_bytes(obj: Any) -> int:
    """Bytes of the tensors in a (nested) checkpoint dict, each storage counted once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            key = (storage.data_ptr(), storage.nbytes())
            if key not in seen:
                seen.add(key)
                total += storage.nbytes()
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


class _CountingSink(io.RawIOBase):
    """A write-only file that only counts bytes: the size ``torch.save`` would write."""

    def __init__(self) -> None:
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self.size += n
        return n


def checkpoint_size(checkpoint: Any) -> int:
    """Bytes ``torch.save(checkpoint)`` writes (serialized to a counter; no disk), else the tensor bytes."""
    sink = _CountingSink()
    try:
        torch.save(checkpoint, sink)
    except Exception:
        return tensor_bytes(checkpoint)
    return sink.size


_TORCH_WRITE_FAILED = ("inline_container.cc", "PytorchStreamWriter", "file write failed")


def disk_full_message(err: BaseException, path: str | os.PathLike, checkpoint: Any) -> str | None:
    """One line for a save that failed for lack of space (ENOSPC / quota), else ``None``.

    ``torch.save`` reports a full disk as ``enforce fail at inline_container.cc ... unexpected pos``
    without an errno; such an error counts as "disk full" when the folder's free space is below the
    checkpoint's size (measured by serializing it to a byte counter).
    """
    path = Path(path)
    needed = checkpoint_size(checkpoint)
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        free = None
    errno_ = getattr(err, "errno", None)
    torch_short = any(s in str(err) for s in _TORCH_WRITE_FAILED) and (
        free is not None and free < needed * 1.1 + 2**20
    )
    if errno_ == errno.EDQUOT:
        what = "disk quota exceeded"
    elif errno_ == errno.ENOSPC or torch_short:
        what = "disk full"
    else:
        return None
    room = f", {_size(free)} free there" if free is not None else ""
    kept = f"the previous {path.name} is intact, " if path.exists() else ""
    return DISK_FULL.format(what=what, path=path, size=_size(needed), room=room, kept=kept)


class AtomicCheckpointIO(TorchCheckpointIO):
    """TorchCheckpointIO whose local saves go to a temp file + fsync + ``os.replace``.

    A kill during ``trainer.save_checkpoint`` can no longer leave a truncated ``last.ckpt``: readers
    see the previous complete file until the new one is fully on disk. Remote paths (``s3://``...)
    use Lightning's own transactional save. Local checkpoints are read through lit_gpu's door
    (:func:`lit_gpu.checkpoints.read.read_for_resume`: weights-only unless the user opted out, and no
    callback path outside the checkpoint's folder), and only files are ever removed.
    """

    def __init__(self, trainer: pl.Trainer | None = None) -> None:
        super().__init__()
        self._trainer = None if trainer is None else weakref.ref(trainer)
        self._held: tuple[str, io.BytesIO] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_trainer": None, "_held": None}  # a copy (ddp_spawn) belongs to no trainer

    def hold(self, path: str | os.PathLike, data: io.BytesIO) -> None:
        """The bytes of ``path`` already read and checked (``--ckpt_path`` resolution): the next load of
        ``path`` reads them instead of the file (one read), and the next load drops them (one copy held)."""
        self._held = (os.path.abspath(os.fspath(path)), data)

    def _take_held(self, path: Any) -> io.BytesIO | None:
        held, self._held = self._held, None
        if held is None or get_protocol(str(path)) != "file":
            return None
        return held[1] if os.path.abspath(str(path)) == held[0] else None

    @override
    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> Any:
        held = self._take_held(path)
        if get_protocol(str(path)) != "file":
            checkpoint = read.read_remote(path, map_location, weights_only)  # bounded, as a local file
        else:
            location = map_location if map_location is not None else (lambda storage, loc: storage)
            checkpoint = read.read_for_resume(path, location, weights_only, data=held)
            del held  # the bytes go back now
        trainer = None if self._trainer is None else self._trainer()
        if trainer is not None:
            _check_for(trainer, checkpoint, f"checkpoint {path}", path)
        return checkpoint

    @override
    def remove_checkpoint(self, path: Any) -> None:
        if get_protocol(str(path)) == "file" and os.path.isdir(str(path)) and not os.path.islink(str(path)):
            real = os.path.realpath(str(path))
            messages.tell(messages.REMOVE_OUTSIDE_REFUSED.format(path=path, dirpath="a file", real=real))
            return  # a checkpoint written by this IO is a file; never remove a folder
        super().remove_checkpoint(path)

    @override
    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or get_protocol(str(path)) != "file":
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        try:
            atomic_torch_save(checkpoint, path)
        except (OSError, RuntimeError) as err:
            message = disk_full_message(err, path, checkpoint)
            if message is None:
                raise
            raise DiskFullError(message) from err


def _check_for(trainer: pl.Trainer, checkpoint: Any, what: str, path: Any) -> None:
    """:func:`check_restored_state` for ``trainer``'s fit; the optimizers' states only for the fit's resume
    (``trainer.ckpt_path``), not Lightning's own reads (``ddp_spawn``'s weights-only hand-back file)."""
    owners = [getattr(trainer, "datamodule", None), *trainer.callbacks]
    check_restored_state(checkpoint, trainer.lightning_module, owners, what)
    if trainer.ckpt_path is not None and os.fspath(trainer.ckpt_path) == os.fspath(path):
        check_at_fit_start(trainer, checkpoint, what)  # against the optimizers the config builds


def install_atomic_checkpoint_io(trainer: pl.Trainer) -> bool:
    """Make ``trainer`` save checkpoints atomically, unless a custom CheckpointIO was configured.

    Returns:
        Whether the plugin was installed.
    """
    strategy = trainer.strategy
    if type(strategy.checkpoint_io) is TorchCheckpointIO:
        strategy.checkpoint_io = AtomicCheckpointIO(trainer)
        return True
    return False
