"""What reading a checkpoint may cost, checked before ``torch.load`` runs, on the bytes it then reads.

torch's weights-only unpickler bounds what code a file may run, not what it may build: a 20 KB file
can name ``bytearray(2**31)``, a compressed ``data.pkl`` can inflate to gigabytes, overlapping zip
members can make one stored byte count many times, a view can repeat one stored value a billion times.
:func:`check_bounds` reads the file as data first, from the bytes ``torch.load`` is then given:

* **the zip** (:mod:`lit_gpu.files.zip_layout`): laid out as torch writes it, with no flag torch's reader
  does not support, and its records listed through torch's own reader and compared with Python's view;
* **``data.pkl``** (the record torch's reader returns) scanned by a model of torch's weights-only unpickler
  that builds nothing (:mod:`lit_gpu.files.pickle_scan`, :mod:`lit_gpu.files.scan_tensors`);
* the total charged, plus the bytes the caller holds (the file read into memory), must stay within
  :meth:`CheckpointLimits.budget`: ``constant + factor x size``.

Loading a file that passes costs at most about that much memory and time linear in its size (numbers
in ``docs/checkpoints.md``). Only the user's own ``trust`` (a flag or keyword, never a file) skips this.
"""

from __future__ import annotations

import io
import os
from typing import IO

from lit_gpu.files.pickle_scan import Scan
from lit_gpu.files.scan_model import DEFAULT_LIMITS, BoundsError, CheckpointLimits, PickledObjects
from lit_gpu.files.zip_layout import check_layout

#: what each record costs while ``torch.load`` reads the file (its name and size here, torch's directory)
RECORD_KEPT = 256

__all__ = ["BoundsError", "CheckpointLimits", "PickledObjects", "check_bounds", "check_buffer"]


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
