"""What reading a checkpoint may cost, checked before ``torch.load`` runs, on the bytes it then reads.

The zip must be laid out as ``torch.save`` writes it, and ``data.pkl`` is scanned by a model of torch's
weights-only unpickler that builds nothing: the memory the load would take, plus the copy held, must stay
within ``constant + factor x size`` (:class:`CheckpointLimits`).
"""

from __future__ import annotations

import functools
import importlib
import io
import pickletools
import struct
import sys
import zipfile
from dataclasses import dataclass
from typing import IO, Any

from lit_gpu.errors import LitGpuError
from lit_gpu.upstream import unpickler_rebuild_names

__all__ = [
    "Archive",
    "BoundsError",
    "CheckpointLimits",
    "DEFAULT_LIMITS",
    "PickledObjects",
    "SCALAR_NAMES",
    "Scan",
    "TorchRebuilds",
    "VIEW_FACTOR",
    "check_layout",
    "dtype_args",
    "dtype_class_names",
    "safe_globals",
    "valid_dtype_state",
]


# ---- scan model --------------------------------------------------------------------------------
_MiB = 2**20


class BoundsError(LitGpuError):
    """A checkpoint whose reading would cost more than its size allows, or that torch.save cannot write."""


class PickledObjects(BoundsError):
    """data.pkl names a global torch's weights-only reader refuses: a pickled Python object."""


@dataclass(frozen=True)
class CheckpointLimits:
    """The budgets of reading one checkpoint file of ``size`` bytes (see ``docs/checkpoints.md``).

    Attributes:
        constant: Bytes any file may cost beyond ``factor x size`` (objects of a small file).
        factor: Bytes per byte of file: storages (1x) plus the Python objects the pickle builds.
        max_opcodes: Opcodes in ``data.pkl``.
        max_depth: How deep containers may nest (lists in dicts in tuples...).
        max_dims: Dimensions of one tensor.
        max_nodes: Items the loaded object may hold beyond the bytes of ``data.pkl``, each shared
            container counted every time it is reached: what walking it costs (a pickle can name one
            list twice in another, ``[[x, x], [x, x]]``, and so double a walk's work per level).
    """

    constant: int = 128 * _MiB
    factor: float = 2.0
    max_opcodes: int = 2**26
    max_depth: int = 100
    max_dims: int = 64
    max_nodes: int = 2**14

    def budget(self, size: int) -> int:
        """The bytes reading a file of ``size`` bytes may cost."""
        return int(self.constant + self.factor * size)


DEFAULT_LIMITS = CheckpointLimits()

# CPython sizes, rounded up (64-bit): what the real unpickler allocates per object or item
_SLOT = 8  # a pointer on the stack, in a list or a tuple
_INT = 32
_CONTAINER = 72
_DICT_ITEM = 80  # hash, index slot, growth slack (key and value were stack slots)
_MEMO = 80  # a memo dict entry and its int key
_TENSOR = 512  # torch.Tensor + TensorImpl + sizes/strides
_STORAGE = 256  # TypedStorage + UntypedStorage + StorageImpl (plus the bytes of the record)
_KEEP_STR = 256  # strings up to this length keep their value (storage keys, encodings, locations)


class _Box:
    """A container, string, storage or tensor the real reader would build: its kind and size only."""

    __slots__ = ("depth", "items", "itemsize", "keys_ok", "kind", "n", "name", "nodes", "sealed")

    def __init__(self, kind: str, n: int = 0, items: tuple[Any, ...] = (), name: str = "") -> None:
        self.kind, self.n, self.items, self.name = kind, n, items, name
        self.depth, self.sealed, self.keys_ok, self.itemsize = 0, False, True, 1
        self.nodes = 1  # itself and everything a walk reaches from it, shared items counted each time


_FLOAT = _Box("float")
_EMPTY_TUPLE = _Box("tuple")
_EMPTY_TUPLE.sealed = True


def _is_key(value: Any) -> bool:
    """A dict/set key whose hash a file cannot make collide: str, bytes, bool, None, or a small int."""
    if value is None or isinstance(value, str | bytes | bool):
        return True
    if isinstance(value, int):
        return -(2**60) < value < 2**60  # hash(i) == i here: distinct ints, distinct hashes
    return isinstance(value, _Box) and value.kind in ("str", "bytes")


@functools.cache
def _itemsizes() -> dict[str, int]:
    """Global name -> element size: dtypes (``torch.float16``) and storage types (``torch.FloatStorage``)."""
    import warnings

    import torch

    table: dict[str, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # legacy storage classes warn on .dtype
        pairs = [(name, value, getattr(value, "dtype", None)) for name, value in vars(torch).items()]
    for name, value, dtype in pairs:
        if isinstance(value, torch.dtype):
            table[str(value)] = value.itemsize
        elif isinstance(value, type) and name.endswith("Storage") and isinstance(dtype, torch.dtype):
            table[f"torch.{name}"] = dtype.itemsize
    table["torch.storage.UntypedStorage"] = table["torch.UntypedStorage"] = 1
    return table


_RENAMED = {"__builtin__": "builtins", "copy_reg": "copyreg"}
_CALLABLE = frozenset(
    {
        "collections.OrderedDict",
        "collections.Counter",
        "builtins.set",
        "builtins.complex",
        "builtins.bytearray",
        "_codecs.encode",
        "torch.Size",
        "torch.device",
        "torch.serialization._get_layout",
        "torch._utils._rebuild_tensor",
        "torch._utils._rebuild_tensor_v2",
        "torch._utils._rebuild_tensor_v3",
        "torch._utils._rebuild_parameter",
        "torch._utils._rebuild_parameter_with_state",
        "torch._utils._rebuild_meta_tensor_no_storage",
        "torch._utils._rebuild_device_tensor_from_cpu_tensor",
        "torch._tensor._rebuild_from_type_v2",
    }
)


@functools.cache
def _known_globals() -> frozenset[str]:
    """Globals the scan knows: torch's weights-only defaults (``torch._weights_only_unpickler.
    _get_allowed_globals``: its calls, dtypes, storage and tensor types, rebuilds it refuses) and the numeric
    numpy scalars and dtypes torch documents as safe to add (:mod:`lit_gpu.checkpoints.scan`)."""
    import torch

    tensor_types = {
        f"torch.{n}" for n, v in vars(torch).items() if isinstance(v, type) and n.endswith("Tensor")
    }
    rebuilds = unpickler_rebuild_names()
    values = {"torch.Tensor", "torch.nn.parameter.Parameter", "torch.storage.TypedStorage"}
    numpy = {DTYPE_NAME, *SCALAR_NAMES, *dtype_class_names()}
    return frozenset(_CALLABLE | _itemsizes().keys() | tensor_types | rebuilds | values | numpy)


def _user_globals() -> frozenset[str]:
    """The globals the user added to torch's allowlist (``torch.serialization.get_safe_globals()``), by the
    names torch's reader looks them up with (``_get_user_allowed_globals``)."""
    import torch

    names = set()
    # torch's own entries (nested and distributed tensors' rebuilds) stay the scan's: it refuses tensors
    # whose memory it cannot bound (_NOT_BOUNDED)
    for entry in torch.serialization.get_safe_globals():
        if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], str):
            names.add(entry[1])
        elif not isinstance(entry, tuple):
            names.add(f"{entry.__module__}.{entry.__qualname__}")
    return frozenset(n for n in names if not n.startswith("torch."))


@functools.cache
def _layouts() -> frozenset[str]:
    """The names ``torch.serialization._get_layout`` knows (``"torch.strided"``...)."""
    import torch

    return frozenset(str(v) for v in vars(torch).values() if isinstance(v, torch.layout))


_TENSOR_TYPES = ("torch.Tensor", "torch.nn.parameter.Parameter")
_ENCODINGS = ("latin1", "latin-1", "utf-8", "utf8", "ascii")  # at most 4 bytes per character
_NOT_BOUNDED = (
    "quantized, sparse, nested and subclass tensors, and calls torch.save does not write "
    "(a tensor or storage class called with a size), are not read from files of unknown origin"
)


def _has(value: Any, *kinds: str) -> bool:
    return isinstance(value, _Box) and value.kind in kinds


def _length(value: Any, *kinds: str) -> int | None:
    if isinstance(value, str) and "str" in kinds or isinstance(value, bytes) and "bytes" in kinds:
        return len(value)
    return value.n if _has(value, *kinds) else None


def _numel(size: list[int]) -> int:
    numel = 1
    for s in size:
        numel *= s
    return numel


def _kind(value: Any) -> str:
    if isinstance(value, _Box):
        return value.name if value.kind == "global" else f"a {value.kind}"
    if isinstance(value, str | int | bytes):
        return f"{type(value).__name__} {_shown(value)}"
    return "None" if value is None else type(value).__name__


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def size_text(nbytes: float, binary: bool = True) -> str:
    """``nbytes`` for a reader: KiB/MiB/GiB (``binary``) or KB/MB/GB."""
    step, units = (1024, ("B", "KiB", "MiB", "GiB")) if binary else (1000, ("B", "KB", "MB", "GB"))
    for unit in units[:-1]:
        if nbytes < step:
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= step
    return f"{nbytes:.1f} {units[-1]}"


# ---- numpy globals --------------------------------------------------------------------------------
#: the function a numpy scalar's pickle calls, under numpy >= 2's and numpy < 2's module name
SCALAR_NAMES = ("numpy._core.multiarray.scalar", "numpy.core.multiarray.scalar")
DTYPE_NAME = "numpy.dtype"


@functools.cache
def _numeric_dtypes() -> tuple[Any, ...]:
    """numpy's numeric dtypes: ``?`` and ``numpy.typecodes['AllInteger' / 'AllFloat']`` (both byte orders)."""
    import numpy as np

    codes = "?" + np.typecodes["AllInteger"] + np.typecodes["AllFloat"]
    found: dict[tuple[str, type], Any] = {}
    for code in codes:
        for dtype in (np.dtype(code), np.dtype(code).newbyteorder()):
            found.setdefault((dtype.str, type(dtype)), dtype)
    return tuple(found.values())


@functools.cache
def dtype_args() -> frozenset[str]:
    """The first argument ``numpy.dtype`` is called with when a numeric dtype is unpickled (``"f8"``)."""
    return frozenset(dtype.__reduce__()[1][0] for dtype in _numeric_dtypes())


@functools.cache
def dtype_class_names() -> frozenset[str]:
    """The names of the numeric dtype classes (``numpy.dtypes.Float64DType``)."""
    return frozenset(f"{type(d).__module__}.{type(d).__qualname__}" for d in _numeric_dtypes())


@functools.cache
def _dtype_states() -> frozenset[tuple[Any, ...]]:
    """What numpy's ``dtype.__reduce__()[2]`` is for a numeric dtype: ``(3, order, None, None, None, -1,
    -1, 0)`` (no subarray, fields, metadata; elsize and alignment -1; flags 0)."""
    return frozenset(dtype.__reduce__()[2] for dtype in _numeric_dtypes())


def valid_dtype_state(items: tuple[Any, ...]) -> bool:
    """Whether ``items`` is a state numpy's ``dtype.__reduce__`` gives a numeric dtype, exactly: other
    flags make a "float64" that claims to hold Python objects (``NPY_ITEM_REFCOUNT``: numpy reads its
    values as object pointers; ``Internal error, get_clear_loop not set``) or list-pickled fields."""
    return all(type(i) in (int, str) or i is None for i in items) and tuple(items) in _dtype_states()


def _scalar_function() -> Any:
    try:
        return importlib.import_module("numpy._core.multiarray").scalar
    except ImportError:  # numpy < 2
        return importlib.import_module("numpy.core.multiarray").scalar


@functools.cache
def _all_safe_globals() -> tuple[Any, ...]:
    import numpy as np

    scalar = _scalar_function()
    named: list[Any] = [(scalar, name) for name in SCALAR_NAMES]
    named.append((np.dtype, DTYPE_NAME))
    for dtype in _numeric_dtypes():
        cls = type(dtype)
        named.append((cls, f"{cls.__module__}.{cls.__qualname__}"))
    return tuple(dict.fromkeys(named))


def safe_globals() -> list[Any]:
    """What to pass to ``torch.serialization.safe_globals`` for a weights-only load: the numpy globals
    above that the user has not allowed already (leaving the context removes what it added)."""
    import torch

    present = set(torch.serialization.get_safe_globals())
    return [entry for entry in _all_safe_globals() if entry not in present]


# ---- torch's own zip reader (a private torch API, gated: lit_gpu.upstream) -------------------------
# torch's own zip reader (``torch._C.PyTorchFileReader``) over an in-memory checkpoint: the records it sees.
#
# ``torch.load`` reads a checkpoint through this reader, which finds a member by its name ignoring letter
# case and may read a name differently from Python's ``zipfile`` (a NUL byte). The bounded reader (below)
# lists the records through it, on the same bytes ``torch.load`` then
# reads, so that what is scanned is what is loaded. A private torch API: pinned by
# ``test_torch_pytorch_file_reader`` in tests/unit/test_upstream_pins.py.


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


# ---- zip layout --------------------------------------------------------------------------------
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


# ---- scan tensors --------------------------------------------------------------------------------
#: a view may expose at most this many times the bytes of its storage (+ :data:`VIEW_SLACK`): more is refused
VIEW_FACTOR = 16
VIEW_SLACK = 2**16


class TorchRebuilds:
    """The part of :class:`lit_gpu.checkpoints.scan.Scan` that models torch's storage and tensor rebuilds
    (a mixin: ``refuse`` and ``charge`` are the scan's)."""

    limits: CheckpointLimits
    records: dict[str, int]
    storages: dict[str, int]

    # refuse() and charge() are Scan's

    def ints(self, value: Any, what: str) -> list[int]:
        items = value.items if _has(value, "tuple") else None
        if items is None or len(items) > self.limits.max_dims:
            raise self.refuse(
                f"{what} of {_kind(value)}; torch.save writes a tuple of at most {self.limits.max_dims} ints"
            )
        if not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**62 for x in items):
            raise self.refuse(f"{what} with a negative or huge entry; torch.save writes no such tensor")
        return list(items)

    def itemsize(self, dtype: Any, *, only_dtype: bool = False) -> int:
        size = _itemsizes().get(dtype.name) if isinstance(dtype, _Box) and dtype.kind == "global" else None
        if size is None or only_dtype and dtype.name.endswith("Storage"):
            raise self.refuse(f"a tensor of dtype {_kind(dtype)}, which is not a torch dtype")
        return max(size, 1)

    def new_tensor(self, numel: int, itemsize: int, dims: int) -> _Box:
        self.charge(_TENSOR + 2 * _SLOT * dims, "tensors")
        box = _Box("tensor", numel)
        box.itemsize = itemsize
        return box

    def parameter(self, data: Any) -> _Box:
        if not _has(data, "tensor"):
            raise self.refuse(f"a Parameter of {_kind(data)}; torch.save writes no such pickle")
        return self.new_tensor(data.n, data.itemsize, 0)

    def tensor(self, name: str, a: tuple[Any, ...]) -> _Box:
        if len(a) < 4 or len(a) > (4 if name.endswith("_tensor") else 8):
            raise self.refuse(f"{name} with {len(a)} arguments; torch.save writes no such pickle")
        storage, offset = a[0], a[1]
        if not _has(storage, "storage"):
            raise self.refuse(f"a tensor on {_kind(storage)} instead of a storage record")
        if not (isinstance(offset, int) and 0 <= offset < 2**62):
            raise self.refuse(f"a tensor at storage offset {_kind(offset)}")
        size, stride = self.ints(a[2], "a tensor size"), self.ints(a[3], "a tensor stride")
        if len(size) != len(stride):
            raise self.refuse("a tensor whose size and stride differ in length")
        itemsize = (
            self.itemsize(a[6], only_dtype=True) if name.endswith("_v3") and len(a) >= 7 else storage.itemsize
        )
        numel = _numel(size)
        if numel:
            last = offset + sum((s - 1) * st for s, st in zip(size, stride, strict=True))
            if (last + 1) * itemsize > storage.n:
                raise self.refuse(
                    f"a tensor of size {tuple(size)} and stride {tuple(stride)} reaches past its storage "
                    f"record ({storage.n} bytes); the file is corrupt or forged"
                )
        self.exposes(numel * itemsize, storage.n, size, stride)
        return self.new_tensor(numel, itemsize, len(size))

    def exposes(self, nbytes: int, stored: int, size: list[int], stride: list[int]) -> None:
        """Charge a view the elements it exposes beyond its storage (what using it costs), or refuse it."""
        if nbytes <= stored:
            return
        if nbytes > VIEW_FACTOR * stored + VIEW_SLACK:
            raise self.refuse(
                f"a tensor of size {tuple(size)} and stride {tuple(stride)} exposes {size_text(nbytes)} "
                f"from a storage of {size_text(stored)} (its strides repeat stored values); using it would "
                "cost far more than the file holds; torch.save of a checkpoint writes no such view"
            )
        self.charge(nbytes - stored, f"views exposing {size_text(nbytes)} of {size_text(stored)} stored")

    def storage(self, pid: Any) -> _Box:
        items = pid.items if _has(pid, "tuple") else ()
        if len(items) != 5 or items[0] != "storage" or not isinstance(items[2], str):
            raise self.refuse(
                f"a persistent id {_kind(pid)} that is not a storage; torch.save writes no such pickle"
            )
        _, kind, key, _location, numel = items
        itemsize = _itemsizes().get(kind.name) if isinstance(kind, _Box) and kind.kind == "global" else None
        if itemsize is None or not isinstance(numel, int) or numel < 0:
            raise self.refuse(f"storage {_shown(key)} of type {_kind(kind)} and {_kind(numel)} elements")
        nbytes = numel * itemsize
        record = self.records.get(f"data/{key}")
        if record is None:
            raise self.refuse(f"storage {_shown(key)} has no record data/{_shown(key)} in the file")
        if nbytes != record or self.storages.get(key, nbytes) != nbytes:
            raise self.refuse(
                f"storage {_shown(key)} names {nbytes} bytes but its record holds {record}; the file is "
                "corrupt or forged"
            )
        if key not in self.storages:
            self.storages[key] = nbytes
            self.charge(_STORAGE + nbytes, "storages")
        box = _Box("storage", nbytes)
        box.itemsize = itemsize
        return box


# ---- pickle scan --------------------------------------------------------------------------------
class Scan(TorchRebuilds):
    """A model of torch's weights-only unpickler that charges each object instead of building it."""

    def __init__(
        self, records: dict[str, int], budget: int, limits: CheckpointLimits, where: str, max_nodes: int = 0
    ) -> None:
        self.records, self.budget, self.limits, self.where = records, budget, limits, where
        self.max_nodes = max_nodes or limits.max_nodes
        self.used = 0
        self.storages: dict[str, int] = {}
        self.user = _user_globals()  # what the user allowed with torch.serialization.add_safe_globals

    # ---- bookkeeping ---------------------------------------------------------------------------
    def refuse(self, what: str) -> BoundsError:
        return BoundsError(f"{self.where}: {what}")

    def charge(self, nbytes: int, what: str) -> None:
        self.used += nbytes
        if self.used > self.budget:
            raise self.refuse(
                f"reading it would build more than {size_text(self.budget)} of objects ({what}), more than a "
                "file of its size can hold; it is not a checkpoint torch.save wrote; use another file"
            )

    def put_in(self, parent: _Box, child: Any) -> None:
        """``child`` becomes an item of ``parent``: it is final from now on (no cycles, depth known)."""
        parent.nodes += child.nodes if isinstance(child, _Box) else 1
        if parent.nodes > self.max_nodes:
            raise self.refuse(
                f"its objects hold more than {self.max_nodes} items when containers named more than once "
                "are counted each time (walking them would take far longer than the file's size allows); "
                "torch.save of a checkpoint writes no such file"
            )
        if isinstance(child, _Box):
            if child is parent:
                raise self.refuse("a container holds itself; torch.save writes no such file")
            child.sealed = True
            if child.depth + 1 > parent.depth:
                parent.depth = child.depth + 1
                if parent.depth > self.limits.max_depth:
                    raise self.refuse(
                        f"containers nest more than {self.limits.max_depth} deep; torch.save of a "
                        "checkpoint writes no such file"
                    )

    def mutable(self, box: Any, kinds: tuple[str, ...], op: str) -> _Box:
        if not isinstance(box, _Box) or box.kind not in kinds:
            raise self.refuse(f"{op} on {_kind(box)}; torch.save writes no such pickle")
        if box.sealed:
            raise self.refuse(f"{op} on a container already inside another; torch.save writes no such pickle")
        return box

    def tuple_of(self, items: list[Any]) -> _Box:
        box = _Box("tuple", len(items), tuple(items))
        box.sealed = True
        for item in items:
            self.put_in(box, item)
        self.charge(_CONTAINER, "tuples")  # its slots were charged as stack slots
        return box

    # ---- the pickle ----------------------------------------------------------------------------
    def run(self, stream: IO[bytes]) -> None:
        stack: list[Any] = []
        marks: list[list[Any]] = []
        memo: dict[int, Any] = {}
        ops = 0
        max_ops = self.limits.max_opcodes
        try:
            for opcode, arg, _pos in pickletools.genops(stream):
                ops += 1
                if ops > max_ops:
                    raise self.refuse(f"data.pkl has more than {max_ops} opcodes")
                name = opcode.name
                self.used += _SLOT  # a stack slot (or less)
                if self.used > self.budget:  # checked at every opcode: a stream of cheap pushes too
                    self.charge(0, "the unpickler's stack")
                # most frequent first
                if name == "BINPUT" or name == "LONG_BINPUT":
                    memo[arg] = stack[-1]
                    self.charge(_MEMO, "the unpickler's memo")
                elif name == "BINGET" or name == "LONG_BINGET":
                    if arg not in memo:
                        raise self.refuse(f"data.pkl refers to memo entry {arg}, which it never stored")
                    stack.append(memo[arg])
                elif name == "MARK":
                    marks.append(stack)
                    stack = []
                    self.charge(_CONTAINER, "marks")
                elif name in ("BININT", "BININT1", "BININT2"):
                    stack.append(arg)
                    self.charge(_INT, "integers")
                elif name == "LONG1":
                    stack.append(arg)
                    self.charge(_INT + arg.bit_length() // 8, "integers")
                elif name == "BINUNICODE":
                    stack.append(arg if len(arg) <= _KEEP_STR else _Box("str", len(arg)))
                    self.charge(sys.getsizeof(arg), "strings")
                elif name == "SHORT_BINSTRING":
                    stack.append(arg)
                    self.charge(sys.getsizeof(arg), "strings")
                elif name == "BINFLOAT":
                    stack.append(_FLOAT)
                    self.charge(_INT, "floats")
                elif name in ("NONE", "NEWTRUE", "NEWFALSE"):
                    stack.append({"NONE": None, "NEWTRUE": True, "NEWFALSE": False}[name])
                elif name == "EMPTY_TUPLE":
                    stack.append(_EMPTY_TUPLE)
                elif name in ("EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET"):
                    stack.append(_Box({"EMPTY_LIST": "list", "EMPTY_DICT": "dict", "EMPTY_SET": "set"}[name]))
                    self.charge(_CONTAINER * (3 if name == "EMPTY_SET" else 1), "containers")
                elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                    k = int(name[-1])
                    if len(stack) < k:
                        raise self.refuse("data.pkl pops an empty stack")
                    items = stack[-k:]
                    del stack[-k:]
                    stack.append(self.tuple_of(items))
                elif name == "TUPLE":
                    items, stack = stack, marks.pop()
                    self.used -= _CONTAINER  # the mark's list is freed here: marks cost while open
                    stack.append(self.tuple_of(items))
                elif name == "APPEND":
                    item = stack.pop()
                    self.append(stack[-1], [item])
                elif name == "APPENDS":
                    items, stack = stack, marks.pop()
                    self.used -= _CONTAINER  # the mark's list is freed here: marks cost while open
                    self.append(stack[-1], items)
                elif name == "SETITEM":
                    value = stack.pop()
                    key = stack.pop()
                    self.setitems(stack[-1], [key, value])
                elif name == "SETITEMS":
                    items, stack = stack, marks.pop()
                    self.used -= _CONTAINER  # the mark's list is freed here: marks cost while open
                    self.setitems(stack[-1], items)
                elif name == "GLOBAL":
                    module, _, attr = arg.partition(" ")
                    full = f"{_RENAMED.get(module, module)}.{attr}"
                    # torch's weights-only allowlist: its defaults, numpy's numbers, the user's additions
                    if full not in _known_globals() and full not in self.user:
                        raise PickledObjects(f"{self.where} names {_shown(full)}")
                    stack.append(_Box("global", name=full))
                    self.charge(_CONTAINER, "globals")
                elif name == "REDUCE":
                    args = stack.pop()
                    stack[-1] = self.call(stack[-1], args)
                elif name == "NEWOBJ":
                    args = stack.pop()
                    cls = stack.pop()
                    if isinstance(cls, _Box) and cls.name in self.user:  # the user vouched for it
                        stack.append(self.user_object(args))
                        continue
                    if not (isinstance(cls, _Box) and cls.name == "torch.nn.parameter.Parameter"):
                        raise self.refuse(
                            f"data.pkl creates {_kind(cls)} without its constructor; {_NOT_BOUNDED}"
                        )
                    stack.append(self.parameter(self.args(args, 1, 2)[0]))
                elif name == "BUILD":
                    state = stack.pop()
                    self.build(stack[-1], state)
                elif name == "BINPERSID":
                    stack.append(self.storage(stack.pop()))
                elif name == "PROTO":
                    pass
                elif name == "STOP":
                    self.charge(0, "the unpickler's stack")
                    return
                else:
                    raise self.refuse(
                        f"data.pkl uses the pickle opcode {name}, which torch.save does not write"
                    )
        except IndexError:
            raise self.refuse("data.pkl pops an empty stack; the file is corrupt") from None
        except ValueError as err:  # genops: an unknown opcode or a string past the end
            raise self.refuse(f"data.pkl is not a pickle torch.save wrote ({err})") from None
        raise self.refuse("data.pkl ends without STOP; the file is truncated")

    def build(self, target: Any, state: Any) -> None:
        """``BUILD``: an OrderedDict's attributes, a numpy dtype's state, a user-allowed object's state."""
        inst = self.mutable(target, ("odict", "npdtype", "object"), "BUILD")
        if inst.kind == "npdtype" and not (_has(state, "tuple") and valid_dtype_state(state.items)):
            raise self.refuse("BUILD of a numpy dtype with a state numpy does not write for a numeric dtype")
        if inst.kind == "odict" and not _has(state, "dict"):
            raise self.refuse("BUILD of an OrderedDict with a state that is not a dict")
        self.put_in(inst, state)
        self.charge(_DICT_ITEM * (state.n if isinstance(state, _Box) else 1), "attributes")

    def user_object(self, args: Any) -> _Box:
        """What a global the user allowed builds: its arguments were charged; the object itself is charged a
        container (what it allocates beyond its arguments is the user's class's, who allowed it)."""
        box = _Box("object")
        self.put_in(box, args)
        self.charge(_CONTAINER, "objects of classes the user allowed")
        return box

    def append(self, target: Any, items: list[Any]) -> None:
        box = self.mutable(target, ("list",), "APPEND")
        for item in items:
            self.put_in(box, item)
            box.keys_ok = box.keys_ok and _is_key(item)
        box.n += len(items)
        self.charge(_SLOT * len(items), "list items")  # growth slack; the slots were stack slots

    def setitems(self, target: Any, items: list[Any]) -> None:
        box = self.mutable(target, ("dict", "odict", "counter"), "SETITEM")
        if len(items) % 2:
            raise self.refuse("SETITEMS with a key and no value")
        for i in range(0, len(items), 2):
            if not _is_key(items[i]):
                raise self.refuse(
                    f"a dict key of kind {_kind(items[i])}; keys read from files of unknown origin are "
                    "strings, bytes or integers below 2**60 (whose hashes cannot be made to collide)"
                )
            self.put_in(box, items[i])
            self.put_in(box, items[i + 1])
        box.n += len(items) // 2
        self.charge(_DICT_ITEM * len(items) // 2, "dict items")

    def args(self, args: Any, least: int, most: int) -> tuple[Any, ...]:
        if not (isinstance(args, _Box) and args.kind == "tuple" and least <= len(args.items) <= most):
            raise self.refuse(f"a call with arguments {_kind(args)}; torch.save writes no such pickle")
        return args.items

    # ---- what each allowed call builds -----------------------------------------------------------
    def call(self, func: Any, args: Any) -> Any:
        name = func.name if isinstance(func, _Box) and func.kind == "global" else ""
        a = self.args(args, 0, 8)
        if name in ("collections.OrderedDict", "collections.Counter") and not a:
            self.charge(_CONTAINER * 2, "dicts")
            return _Box("odict" if name.endswith("OrderedDict") else "counter")
        if name == "collections.Counter" and len(a) == 1 and _has(a[0], "dict", "odict"):
            self.charge(_CONTAINER + _DICT_ITEM * a[0].n, "dicts")
            box = _Box("counter", a[0].n)
            box.nodes = a[0].nodes
            return box
        if name == "builtins.set" and len(a) <= 1:
            n = 0
            if a:
                if not (_has(a[0], "list") and a[0].keys_ok):
                    raise self.refuse("set() of something other than a list of strings or integers")
                n = a[0].n
            self.charge(_CONTAINER * 3 + 2 * _DICT_ITEM * n, "sets")
            return _Box("set", n)
        if name == "builtins.complex" and len(a) <= 2 and all(x is _FLOAT for x in a):  # floats only
            self.charge(_INT * 2, "complex numbers")
            return _FLOAT
        if name == "_codecs.encode" and 1 <= len(a) <= 2:
            if len(a) == 2 and a[1] not in _ENCODINGS:
                raise self.refuse(f"bytes encoded as {_shown(a[1])}; torch.save writes latin1")
            n = _length(a[0], "str")
            if n is None:
                raise self.refuse(f"_codecs.encode of {_kind(a[0])}; torch.save writes no such pickle")
            self.charge(_INT + 4 * n, "bytes")
            return a[0].encode("latin1", "replace") if isinstance(a[0], str) else _Box("bytes", 4 * n)
        if name == "builtins.bytearray" and len(a) <= 2:
            # what torch.save writes: bytearray(), bytearray(bytes), bytearray(str, "latin-1")
            is_str = bool(a) and _length(a[0], "str") is not None
            n = 0 if not a else a[0] if type(a[0]) is int else _length(a[0], "str", "bytes")
            if n is None or n < 0 or is_str != (len(a) == 2) or len(a) == 2 and a[1] not in _ENCODINGS:
                raise self.refuse(
                    f"bytearray of {', '.join(_kind(x) for x in a)}; torch.save writes no such pickle"
                )
            if is_str:
                n *= 4
            self.charge(_INT + n, f"a bytearray of {size_text(n)}")
            return _Box("bytes", n)
        if name == "torch.Size" and len(a) == 1:
            dims = self.ints(a[0], "torch.Size")
            self.charge(_CONTAINER + (_SLOT + _INT) * len(dims), "sizes")
            box = _Box("tuple", len(dims), tuple(dims))
            box.sealed = True
            return box
        if (
            name == "torch.device"
            and isinstance(a[:1] and a[0], str)
            and (len(a) == 1 or len(a) == 2 and type(a[1]) is int and 0 <= a[1] < 2**31)
        ):
            self.charge(_CONTAINER, "devices")
            return _Box("device")
        if name == "torch.serialization._get_layout" and len(a) == 1 and a[0] in _layouts():
            return _Box("layout")
        if name in (
            "torch._utils._rebuild_tensor",
            "torch._utils._rebuild_tensor_v2",
            "torch._utils._rebuild_tensor_v3",
        ):
            return self.tensor(name, a)
        if name == "torch._utils._rebuild_parameter" and len(a) == 3:
            return self.parameter(a[0])
        if name == "torch._utils._rebuild_parameter_with_state" and len(a) == 4:
            self.charge(_DICT_ITEM * (a[3].n if isinstance(a[3], _Box) else 0), "parameter state")
            return self.parameter(a[0])
        if name == "torch._tensor._rebuild_from_type_v2" and len(a) == 4:
            if not (isinstance(a[1], _Box) and a[1].name in _TENSOR_TYPES):
                raise self.refuse(f"a tensor rebuilt as {_kind(a[1])}; {_NOT_BOUNDED}")
            result = self.call(a[0], a[2])
            if not _has(result, "tensor"):
                raise self.refuse(f"a tensor rebuilt from {_kind(result)}; {_NOT_BOUNDED}")
            self.charge(_DICT_ITEM * (a[3].n if isinstance(a[3], _Box) else 0), "tensor state")
            return result
        if name == "torch._utils._rebuild_meta_tensor_no_storage" and len(a) == 4 and type(a[3]) is bool:
            itemsize = self.itemsize(a[0], only_dtype=True)
            size, stride = self.ints(a[1], "a size"), self.ints(a[2], "a stride")
            return self.new_tensor(_numel(size), itemsize, len(size) + len(stride))
        if name == "torch._utils._rebuild_device_tensor_from_cpu_tensor" and len(a) == 4:
            if not _has(a[0], "tensor"):
                raise self.refuse(f"a device tensor from {_kind(a[0])}; torch.save writes no such pickle")
            itemsize = self.itemsize(a[1], only_dtype=True)
            self.charge(a[0].n * itemsize, f"a converted tensor of {size_text(a[0].n * itemsize)}")
            return self.new_tensor(a[0].n, itemsize, 0)
        if (
            name == DTYPE_NAME
            and len(a) == 3
            and a[0] in dtype_args()
            and all(type(x) is bool for x in a[1:])
        ):
            self.charge(_CONTAINER * 2, "numpy dtypes")  # numpy.dtype("f8", False, True): numeric only
            return _Box("npdtype")
        if name in SCALAR_NAMES and len(a) == 2 and _has(a[0], "npdtype") and isinstance(a[1], bytes):
            if len(a[1]) > 32:  # numpy's widest numeric scalar: complex long double
                raise self.refuse(f"a numpy scalar of {len(a[1])} bytes; numpy writes no such scalar")
            self.charge(_INT + len(a[1]), "numpy scalars")
            return _FLOAT
        if name == DTYPE_NAME and a[:1] and isinstance(a[0], str) and a[0] not in dtype_args():
            raise PickledObjects(f"{self.where} names a numpy {_shown(a[0])} dtype (not a number's)")
        if name in self.user:
            return self.user_object(args)
        if name in _CALLABLE or name in (DTYPE_NAME, *SCALAR_NAMES):  # allowed, with arguments it may reject
            raise self.refuse(
                f"data.pkl calls {name} with arguments torch.save does not write "
                f"({', '.join(_kind(x) for x in a[:3])}); the file is corrupt or forged"
            )
        raise self.refuse(
            f"data.pkl calls {name or _kind(func)}; {_NOT_BOUNDED}; pass trust only if you trust the file"
        )
