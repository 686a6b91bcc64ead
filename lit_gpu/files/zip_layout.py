"""The zip of a checkpoint as ``torch.save`` writes it, read the way ``torch.load`` reads it.

* **the layout**: every member stored (not compressed), members laid end to end from byte 0 to the
  central directory, which ends the file: the records' sizes add up to less than the file;
* **no flags the reader does not support**: an encrypted or otherwise flagged member is refused
  (``torch.save`` sets only "sizes after the data" and "UTF-8 name");
* **one view**: the records are listed through torch's own reader (:mod:`lit_gpu.upstream.torch_reader`)
  on the same bytes ``torch.load`` then reads, and compared with Python's ``zipfile`` view: an archive the
  two read differently (a NUL in a name, names that differ only in letter case, which torch's reader
  does not tell apart, a record torch finds elsewhere than ``zipfile``) is refused in one line.
"""

from __future__ import annotations

import io
import struct
import zipfile
from typing import IO

from lit_gpu.files.scan_model import BoundsError, _shown

__all__ = ["Archive", "check_layout"]

# the general-purpose flags torch.save writes: sizes in a data descriptor (bit 3), a UTF-8 name (bit 11)
_ALLOWED_FLAGS = 0x0008 | 0x0800

_EOCD = struct.Struct("<4s4H2LH")
_EOCD64_LOCATOR = struct.Struct("<4sLQL")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
_LOCAL = struct.Struct("<4s5H3L2H")


def _central_directory(f: IO[bytes], size: int, where: str) -> tuple[int, int, int]:
    """``(entries, start, end)`` of the central directory; it must end the file (no comment, no tail)."""
    if size < _EOCD.size:
        raise BoundsError(f"{where}: too short to be a checkpoint ({size} bytes)")
    f.seek(size - _EOCD.size)
    sig, _disk, _disk_cd, _n_disk, entries, cd_size, cd_start, comment = _EOCD.unpack(f.read(_EOCD.size))
    if sig != b"PK\x05\x06" or comment:
        raise BoundsError(
            f"{where}: the zip's end record is not at the end of the file; torch.save writes it there"
        )
    end = size - _EOCD.size
    if end >= _EOCD64_LOCATOR.size + _EOCD64.size:  # torch writes zip64 end records in any case
        f.seek(end - _EOCD64_LOCATOR.size)
        sig, _d, eocd64, _t = _EOCD64_LOCATOR.unpack(f.read(_EOCD64_LOCATOR.size))
        if sig == b"PK\x06\x07":
            end -= _EOCD64_LOCATOR.size + _EOCD64.size
            f.seek(end)
            sig, _s, _v, _vn, _d, _dc, _nd, entries, cd_size, cd_start = _EOCD64.unpack(f.read(_EOCD64.size))
            if sig != b"PK\x06\x06" or eocd64 != end:
                raise BoundsError(
                    f"{where}: a zip64 end record out of place; torch.save writes it just before the "
                    "end record"
                )
    if cd_start + cd_size != end:
        raise BoundsError(
            f"{where}: bytes between the zip's directory and its end record; torch.save writes none"
        )
    return entries, cd_start, end


#: what listing one record costs while the archive is checked (Python's ``ZipInfo``, torch's listing, the
#: comparison of the two views): about 900 bytes measured; a zip of many empty records costs ~9x its size
RECORD_COST = 1024
_CENTRAL = struct.Struct("<4s24xHHH12x")  # a central directory entry: name, extra and comment lengths


def _count_records(data: bytes | bytearray | memoryview, start: int, end: int, where: str) -> int:
    """The entries of the central directory ``data[start:end]``, walked without building any (a count)."""
    view = memoryview(data)
    count, position = 0, start
    while position < end:
        if end - position < _CENTRAL.size:
            raise BoundsError(f"{where}: the zip's directory ends inside an entry; the file is corrupt")
        sig, name_len, extra_len, comment_len = _CENTRAL.unpack_from(view, position)
        if sig != b"PK\x01\x02":
            raise BoundsError(f"{where}: the zip's directory holds something other than entries; corrupt")
        position += _CENTRAL.size + name_len + extra_len + comment_len
        count += 1
    if position != end:
        raise BoundsError(f"{where}: the zip's last directory entry runs past its end record; corrupt")
    return count


class Archive:
    """A checked archive: its records' sizes (names without the archive folder) and torch's reader."""

    def __init__(self, records: dict[str, int], torch_view: object) -> None:
        self.records = records
        self._torch = torch_view

    def read(self, name: str) -> bytes:
        """Record ``name`` as ``torch.load`` reads it."""
        return self._torch.read(name)  # type: ignore[attr-defined]


def _members(
    f: IO[bytes], data: bytes | bytearray | memoryview, where: str, room: int | None
) -> list[zipfile.ZipInfo]:
    """Python's view of the members, after checking the layout, the flags and the names.

    Members must be stored, unique (also ignoring letter case), unflagged, and laid end to end from byte 0
    up to the central directory (each local header, its data and data descriptor, nothing between): then no
    record shares bytes with another and the records add up to less than the file. The directory's
    entries are counted first, building nothing: listing them (:data:`RECORD_COST` each) must fit ``room``.
    """
    size = len(data)
    entries, cd_start, end = _central_directory(f, size, where)
    if entries * 46 > size:
        raise BoundsError(f"{where}: the zip claims {entries} members, more than its size can hold")
    counted = _count_records(data, cd_start, end, where)
    if counted != entries:
        raise BoundsError(
            f"{where}: the zip's end record counts {entries} members but its directory lists {counted}; "
            "torch.save writes them alike"
        )
    if room is not None and entries * RECORD_COST > room:
        raise BoundsError(
            f"{where}: the zip has {entries} records; listing them would take more than the "
            f"{room // 2**20} MiB a file of its size may cost; torch.save of a checkpoint writes no such file"
        )
    f.seek(0)
    try:
        infos = zipfile.ZipFile(f).infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as err:
        raise BoundsError(f"{where}: not a readable zip ({err}); the file is corrupt or truncated") from None
    for info in infos:
        if "\x00" in info.orig_filename:
            raise BoundsError(
                f"{where}: member {_shown(info.orig_filename)} has a NUL byte in its name, which torch's "
                "reader and Python's zip read differently; torch.save writes no such name"
            )
    if len(infos) != entries or len({i.filename for i in infos}) != len(infos):
        raise BoundsError(f"{where}: the zip has repeated or uncounted members; torch.save writes each once")
    folded = {i.filename.casefold() for i in infos}
    if len(folded) != len(infos) or len({i.filename.lower() for i in infos}) != len(infos):
        raise BoundsError(
            f"{where}: two members whose names differ only in letter case, which torch's reader does not "
            "tell apart (what is checked would not be what is loaded); torch.save writes no such file"
        )
    expected = 0
    infos = sorted(infos, key=lambda i: i.header_offset)
    for number, info in enumerate(infos):
        name = _shown(info.filename)
        if info.flag_bits & ~_ALLOWED_FLAGS:
            raise BoundsError(
                f"{where}: member {name} has zip flags {info.flag_bits:#06x} (encryption or another feature "
                "torch's reader does not support); torch.save writes none of them"
            )
        if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
            raise BoundsError(
                f"{where}: member {name} is compressed; torch.save stores every record as is, and a "
                "compressed one can inflate far past the file's size; save it again with torch.save"
            )
        if info.header_offset != expected:
            raise BoundsError(
                f"{where}: member {name} starts at byte {info.header_offset}, not {expected}; "
                "zip members that overlap or leave gaps are not written by torch.save"
            )
        f.seek(info.header_offset)
        head = f.read(_LOCAL.size)
        if len(head) != _LOCAL.size or head[:4] != b"PK\x03\x04":
            raise BoundsError(f"{where}: member {name} has no local header; the file is corrupt")
        local = _LOCAL.unpack(head)
        if local[2] != info.flag_bits or local[3] != info.compress_type:
            raise BoundsError(
                f"{where}: member {name}'s local header and directory entry disagree (flags or method); "
                "torch.save writes them alike"
            )
        name_len, extra_len = local[-2:]
        if f.read(name_len) != info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437"):
            raise BoundsError(
                f"{where}: member {name} is named differently in its local header; torch.save writes one name"
            )
        data_end = info.header_offset + _LOCAL.size + name_len + extra_len + info.compress_size
        following = infos[number + 1].header_offset if number + 1 < len(infos) else cd_start
        gaps = (16, 24) if info.flag_bits & 0x08 else (0,)
        if following - data_end not in gaps:
            raise BoundsError(
                f"{where}: member {name} ends at byte {data_end} but the next part starts "
                f"at {following}; zip members that overlap or leave gaps are not written by torch.save"
            )
        expected = following
    if expected != cd_start or not infos:
        raise BoundsError(f"{where}: the zip's members do not reach its directory; the file is corrupt")
    return infos


def _data_offset(f: IO[bytes], info: zipfile.ZipInfo) -> int:
    f.seek(info.header_offset)
    name_len, extra_len = _LOCAL.unpack(f.read(_LOCAL.size))[-2:]
    return info.header_offset + _LOCAL.size + name_len + extra_len


def check_layout(data: bytes | bytearray | memoryview, where: str, room: int | None = None) -> Archive:
    """Check the zip ``data`` as torch.save writes it and as torch's reader reads it.

    ``room``: the bytes listing its records may cost (``None``: unbounded).

    Raises:
        BoundsError: One line: what in the archive is not as torch.save writes it.
    """
    from lit_gpu.upstream.torch_reader import torch_records

    f = io.BytesIO(data)
    infos = _members(f, data, where, room)
    prefix = infos[0].filename.split("/", 1)[0] + "/"
    if prefix == "/" or not all(i.filename.startswith(prefix) and i.filename != prefix for i in infos):
        raise BoundsError(f"{where}: members outside the archive's one folder; torch.save writes none")
    ours = {i.filename[len(prefix) :]: (_data_offset(f, i), i.file_size) for i in infos}
    try:
        torch_view = torch_records(data)
        theirs = {r.name: (r.offset, r.size) for r in torch_view.records()}
    except (RuntimeError, ValueError, OSError) as err:
        raise BoundsError(f"{where}: torch's zip reader refuses it ({err}); the file is corrupt") from None
    if theirs != ours:
        differ = sorted(set(theirs.items()) ^ set(ours.items()))[:1]
        raise BoundsError(
            f"{where}: torch's zip reader and Python's zipfile read its members differently "
            f"({_shown(differ[0][0]) if differ else 'their order'}); what is checked would not be what "
            "is loaded; torch.save writes no such file"
        )
    if "data.pkl" not in ours:
        raise BoundsError(f"{where}: no data.pkl record; not a torch.save file")
    archive = Archive({name: size for name, (_offset, size) in ours.items()}, torch_view)
    if "byteorder" in ours and archive.read("byteorder") not in (b"little", b"big"):
        raise BoundsError(f"{where}: the byteorder record is neither little nor big")
    return archive
