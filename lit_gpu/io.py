"""Crash-safe file writes: a checkpoint on disk is always either the old one or the complete new one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import lightning.pytorch as pl
import torch
from fsspec.utils import get_protocol
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from typing_extensions import override

__all__ = [
    "AtomicCheckpointIO",
    "atomic_file",
    "atomic_torch_save",
    "atomic_write",
    "install_atomic_checkpoint_io",
]


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


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb", **open_kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temp file beside ``path`` for writing; on a clean exit fsync it and rename it to ``path``.

    A crash, kill or exception at any point leaves the previous ``path`` (if any) untouched and no
    temp file behind (except after SIGKILL, which leaves a hidden ``.<name>.*.tmp`` that is harmless).

    Args:
        path: Destination file.
        mode: ``"wb"`` or ``"w"`` (text; ``open_kwargs`` such as ``newline=""`` go to ``open``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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


class AtomicCheckpointIO(TorchCheckpointIO):
    """TorchCheckpointIO whose local saves go to a temp file + fsync + ``os.replace``.

    A kill during ``trainer.save_checkpoint`` can no longer leave a truncated ``last.ckpt``: readers
    see the previous complete file until the new one is fully on disk. Remote paths (``s3://``...)
    use Lightning's own transactional save.
    """

    @override
    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or get_protocol(str(path)) != "file":
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        atomic_torch_save(checkpoint, path)


def install_atomic_checkpoint_io(trainer: pl.Trainer) -> bool:
    """Make ``trainer`` save checkpoints atomically, unless a custom CheckpointIO was configured.

    Returns:
        Whether the plugin was installed.
    """
    strategy = trainer.strategy
    if type(strategy.checkpoint_io) is TorchCheckpointIO:
        strategy.checkpoint_io = AtomicCheckpointIO()
        return True
    return False
