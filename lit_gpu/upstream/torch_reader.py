"""torch's own zip reader (``torch._C.PyTorchFileReader``) over an in-memory checkpoint: the records it sees.

``torch.load`` reads a checkpoint through this reader, which finds a member by its name ignoring letter
case and may read a name differently from Python's ``zipfile`` (a NUL byte). The bounded reader
(:mod:`lit_gpu.checkpoints.scan`) lists the records through it, on the same bytes ``torch.load`` then
reads, so that what is scanned is what is loaded. A private torch API: pinned by
``test_torch_pytorch_file_reader`` in tests/unit/test_upstream_pins.py.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

__all__ = ["TorchRecord", "torch_records"]


@dataclass(frozen=True)
class TorchRecord:
    """One record as torch's reader resolves it: its name (without the archive folder), data offset, size."""

    name: str
    offset: int
    size: int


class TorchArchive:
    """The records of one in-memory archive, read through torch's reader."""

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        import torch

        self._reader = torch._C.PyTorchFileReader(io.BytesIO(data))

    def records(self) -> list[TorchRecord]:
        """Every record torch lists, each looked up by name as ``torch.load`` looks it up."""
        reader = self._reader
        return [
            TorchRecord(name, reader.get_record_offset(name), reader.get_record_size(name))
            for name in reader.get_all_records()
        ]

    def read(self, name: str) -> bytes:
        """The bytes of record ``name`` as ``torch.load`` reads them."""
        return bytes(self._reader.get_record(name))


def torch_records(data: bytes | bytearray | memoryview) -> TorchArchive:
    """torch's view of the archive ``data`` (raises what torch's reader raises on a damaged zip)."""
    return TorchArchive(data)
