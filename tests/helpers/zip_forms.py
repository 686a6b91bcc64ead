"""Zips written byte by byte, in forms ``zipfile`` will not write: zip64 extras that disagree, lying counts.

:func:`forged_zip` lays members out as ``torch.save`` does (stored, end to end, the central directory
last, torch's zip64 end records before the end record) and lets each member's directory entry say
something else: its sizes (``sizes``), a zip64 extra field (``zip64``), another count in the end
record (``entries``). Used by ``tests/unit/checkpoints/test_zip_forms.py``.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

_LOCAL = struct.Struct("<4s5H3L2H")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
_LOCATOR = struct.Struct("<4sLQL")
_EOCD = struct.Struct("<4s4H2LH")
_FULL = 0xFFFFFFFF


@dataclass
class Member:
    """One record: ``name`` (in the archive folder or not), its bytes, and what its directory entry says.

    ``sizes``: the (compressed, uncompressed) sizes written in the directory entry (``None``: the real
    ones); ``zip64``: the (uncompressed, compressed) sizes of a zip64 extra field in the entry, whose
    32-bit fields then read 0xFFFFFFFF; ``local_extra``: extra bytes after the local header's name.
    """

    name: str
    data: bytes
    sizes: tuple[int, int] | None = None
    zip64: tuple[int, int] | None = None
    local_extra: bytes = b""


def forged_zip(path: Path, members: list[Member], entries: int | None = None) -> Path:
    """Write ``members`` as a stored zip at ``path`` (``entries``: the count the end records claim)."""
    body, central = bytearray(), bytearray()
    for m in members:
        name = m.name.encode()
        crc = zlib.crc32(m.data)
        offset = len(body)
        body += _LOCAL.pack(
            b"PK\x03\x04", 20, 0x0800, 0, 0, 0, crc, len(m.data), len(m.data), len(name), len(m.local_extra)
        )
        body += name + m.local_extra + m.data
        comp, uncomp = m.sizes or (len(m.data), len(m.data))
        extra = b""
        if m.zip64 is not None:
            extra = struct.pack("<HHQQ", 1, 16, *m.zip64)
            comp = uncomp = _FULL
        central += _CENTRAL.pack(
            b"PK\x01\x02",
            45,
            45,
            0x0800,
            0,
            0,
            0,
            crc,
            comp,
            uncomp,
            len(name),
            len(extra),
            0,
            0,
            0,
            0,
            offset,
        )
        central += name + extra
    count = len(members) if entries is None else entries
    cd_start, cd_size = len(body), len(central)
    end64 = cd_start + cd_size
    tail = _EOCD64.pack(b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, cd_size, cd_start)
    tail += _LOCATOR.pack(b"PK\x06\x07", 0, end64, 1)
    tail += _EOCD.pack(b"PK\x05\x06", 0, 0, min(count, 0xFFFF), min(count, 0xFFFF), cd_size, cd_start, 0)
    path.write_bytes(bytes(body + central + tail))
    return path
