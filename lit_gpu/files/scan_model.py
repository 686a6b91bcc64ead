"""The object model of the pickle scan: the budgets, what torch's weights-only reader may build, and sizes.

:class:`CheckpointLimits` are the documented budgets (``docs/checkpoints.md``); :class:`_Box` stands for an
object the real reader would build (kind and size only); the tables name the globals and calls torch's
reader allows, with the CPython sizes each costs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from lit_gpu.errors import LitGpuError
from lit_gpu.upstream.torch_hooks import unpickler_rebuild_names

__all__ = ["DEFAULT_LIMITS", "BoundsError", "CheckpointLimits", "PickledObjects"]

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
    numpy scalars and dtypes torch documents as safe to add (:mod:`lit_gpu.files.numpy_globals`)."""
    import torch

    from lit_gpu.files.numpy_globals import DTYPE_NAME, SCALAR_NAMES, dtype_class_names

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


def _size(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} GiB"
