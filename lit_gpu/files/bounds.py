"""What reading a checkpoint may cost, checked before ``torch.load`` runs: the file's size bounds it.

torch's weights-only unpickler bounds what code a file may run, not what it may build: a 20 KB file
can name ``bytearray(2**31)``, a compressed ``data.pkl`` can inflate to gigabytes, overlapping zip
members can make one stored byte count many times. :func:`check_bounds` reads the file as data first:

* **the zip as torch writes it**: every member stored (not compressed), members laid end to end from
  byte 0 to the central directory, which ends the file: the records' sizes add up to less than the file;
* **``data.pkl`` scanned** opcode by opcode (``pickletools.genops``, linear) by a model of torch's
  weights-only unpickler that builds nothing: each object the real reader would build is charged its
  size (a ``bytearray(N)``, a copy of a referenced string, a dtype conversion: ``N`` bytes), each
  storage must be exactly as large as its ``data/<key>`` record, each tensor must lie inside its
  storage, containers nest at most :attr:`CheckpointLimits.max_depth` deep and never contain
  themselves, dict keys are strings, bytes or integers (whose hashes cannot be made to collide);
* the total charged must stay within :meth:`CheckpointLimits.budget`: ``constant + factor x size``.

Loading a file that passes costs at most about that much memory and time linear in its size (numbers
in ``docs/checkpoints.md``). Only the user's own ``trust`` (a flag or keyword, never a file) skips this.
"""

from __future__ import annotations

import functools
import io
import os
import pickletools
import struct
import sys
import zipfile
from dataclasses import dataclass
from typing import IO, Any

from lit_gpu.errors import LitGpuError
from lit_gpu.upstream.torch_hooks import unpickler_rebuild_names

__all__ = ["BoundsError", "CheckpointLimits", "PickledObjects", "check_bounds"]

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
    """Globals the scan knows: its calls, dtypes, storage and tensor types, and rebuilds it refuses."""
    import torch

    tensor_types = {
        f"torch.{n}" for n, v in vars(torch).items() if isinstance(v, type) and n.endswith("Tensor")
    }
    rebuilds = unpickler_rebuild_names()
    values = {"torch.Tensor", "torch.nn.parameter.Parameter", "torch.storage.TypedStorage"}
    return frozenset(_CALLABLE | _itemsizes().keys() | tensor_types | rebuilds | values)


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


class _Scan:
    """A model of torch's weights-only unpickler that charges each object instead of building it."""

    def __init__(
        self, records: dict[str, int], budget: int, limits: CheckpointLimits, where: str, max_nodes: int = 0
    ) -> None:
        self.records, self.budget, self.limits, self.where = records, budget, limits, where
        self.max_nodes = max_nodes or limits.max_nodes
        self.used = 0
        self.storages: dict[str, int] = {}

    # ---- bookkeeping ---------------------------------------------------------------------------
    def refuse(self, what: str) -> BoundsError:
        return BoundsError(f"{self.where}: {what}")

    def charge(self, nbytes: int, what: str) -> None:
        self.used += nbytes
        if self.used > self.budget:
            raise self.refuse(
                f"reading it would build more than {_size(self.budget)} of objects ({what}), more than a "
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
                self.used += _SLOT  # a stack slot (or less): checked at the next charge and at STOP
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
                    stack.append(self.tuple_of(items))
                elif name == "APPEND":
                    item = stack.pop()
                    self.append(stack[-1], [item])
                elif name == "APPENDS":
                    items, stack = stack, marks.pop()
                    self.append(stack[-1], items)
                elif name == "SETITEM":
                    value = stack.pop()
                    key = stack.pop()
                    self.setitems(stack[-1], [key, value])
                elif name == "SETITEMS":
                    items, stack = stack, marks.pop()
                    self.setitems(stack[-1], items)
                elif name == "GLOBAL":
                    module, _, attr = arg.partition(" ")
                    full = f"{_RENAMED.get(module, module)}.{attr}"
                    if full not in _known_globals():
                        raise PickledObjects(f"{self.where} names {_shown(full)}")
                    stack.append(_Box("global", name=full))
                    self.charge(_CONTAINER, "globals")
                elif name == "REDUCE":
                    args = stack.pop()
                    stack[-1] = self.call(stack[-1], args)
                elif name == "NEWOBJ":
                    args = stack.pop()
                    cls = stack.pop()
                    if not (isinstance(cls, _Box) and cls.name == "torch.nn.parameter.Parameter"):
                        raise self.refuse(
                            f"data.pkl creates {_kind(cls)} without its constructor; {_NOT_BOUNDED}"
                        )
                    stack.append(self.parameter(self.args(args, 1, 2)[0]))
                elif name == "BUILD":
                    state = stack.pop()
                    inst = self.mutable(stack[-1], ("odict",), "BUILD")
                    if not (isinstance(state, _Box) and state.kind == "dict"):
                        raise self.refuse("BUILD of an OrderedDict with a state that is not a dict")
                    self.put_in(inst, state)
                    self.charge(_DICT_ITEM * state.n, "attributes")
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
            self.charge(_INT + n, f"a bytearray of {_size(n)}")
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
            self.charge(a[0].n * itemsize, f"a converted tensor of {_size(a[0].n * itemsize)}")
            return self.new_tensor(a[0].n, itemsize, 0)
        if name in _CALLABLE:  # a call torch's reader allows, with arguments it may reject
            raise self.refuse(
                f"data.pkl calls {name} with arguments torch.save does not write "
                f"({', '.join(_kind(x) for x in a[:3])}); the file is corrupt or forged"
            )
        raise self.refuse(
            f"data.pkl calls {name or _kind(func)}; {_NOT_BOUNDED}; pass trust only if you trust the file"
        )

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
        return self.new_tensor(numel, itemsize, len(size))

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


# ---- the zip ---------------------------------------------------------------------------------------
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


def _records(f: IO[bytes], size: int, where: str) -> tuple[zipfile.ZipFile, str, dict[str, int]]:
    """The archive, its record prefix (``archive/``) and record sizes, after checking the layout.

    Members must be stored, unique, and laid end to end from byte 0 up to the central directory (each
    local header, its data and data descriptor, nothing between): then no record shares bytes with
    another and the records add up to less than the file.
    """
    entries, cd_start, _end = _central_directory(f, size, where)
    if entries * 46 > size:
        raise BoundsError(f"{where}: the zip claims {entries} members, more than its size can hold")
    f.seek(0)
    try:
        archive = zipfile.ZipFile(f)
        infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as err:
        raise BoundsError(f"{where}: not a readable zip ({err}); the file is corrupt or truncated") from None
    if len(infos) != entries or len({i.filename for i in infos}) != len(infos):
        raise BoundsError(f"{where}: the zip has repeated or uncounted members; torch.save writes each once")
    expected = 0
    infos = sorted(infos, key=lambda i: i.header_offset)
    for number, info in enumerate(infos):
        if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
            raise BoundsError(
                f"{where}: member {_shown(info.filename)} is compressed; torch.save stores every record "
                "as is, and a compressed one can inflate far past the file's size; save it again with "
                "torch.save"
            )
        if info.header_offset != expected:
            raise BoundsError(
                f"{where}: member {_shown(info.filename)} starts at byte {info.header_offset}, not "
                f"{expected}; "
                "zip members that overlap or leave gaps are not written by torch.save"
            )
        f.seek(info.header_offset)
        head = f.read(_LOCAL.size)
        if len(head) != _LOCAL.size or head[:4] != b"PK\x03\x04":
            raise BoundsError(
                f"{where}: member {_shown(info.filename)} has no local header; the file is corrupt"
            )
        name_len, extra_len = _LOCAL.unpack(head)[-2:]
        data_end = info.header_offset + _LOCAL.size + name_len + extra_len + info.compress_size
        following = infos[number + 1].header_offset if number + 1 < len(infos) else cd_start
        gaps = (16, 24) if info.flag_bits & 0x08 else (0,)
        if following - data_end not in gaps:
            raise BoundsError(
                f"{where}: member {_shown(info.filename)} ends at byte {data_end} but the next part starts "
                f"at {following}; zip members that overlap or leave gaps are not written by torch.save"
            )
        expected = following
    if expected != cd_start or not infos:
        raise BoundsError(f"{where}: the zip's members do not reach its directory; the file is corrupt")
    prefix = infos[0].filename.split("/", 1)[0] + "/"
    records = {i.filename[len(prefix) :]: i.file_size for i in infos if i.filename.startswith(prefix)}
    if "data.pkl" not in records:
        raise BoundsError(f"{where}: no data.pkl record; not a torch.save file")
    byteorder = records.get("byteorder")
    if byteorder is not None and archive.read(prefix + "byteorder") not in (b"little", b"big"):
        raise BoundsError(f"{where}: the byteorder record is neither little nor big")
    return archive, prefix, records


def check_bounds(
    source: str | os.PathLike | IO[bytes], limits: CheckpointLimits | None = None, *, where: str = ""
) -> int:
    """Check that reading the ``torch.save`` zip ``source`` costs at most ``limits.budget(size)``.

    Args:
        source: A path, or a seekable binary file (its position is restored).
        limits: The budgets; :data:`DEFAULT_LIMITS` when ``None``.
        where: How to name the file in messages (its path by default).

    Returns:
        The bytes the scan charged (storages and objects).

    Raises:
        BoundsError: One line: what in the file exceeds which budget, or is not as torch.save writes it.
    """
    limits = limits or DEFAULT_LIMITS
    if isinstance(source, str | os.PathLike):
        where = where or f"checkpoint {os.fspath(source)}"
        with open(source, "rb") as f:
            return check_bounds(f, limits, where=where)
    where = where or "checkpoint from a file object"
    position = source.tell()
    try:
        size = source.seek(0, io.SEEK_END)
        archive, prefix, records = _records(source, size, where)
        try:
            pickled = archive.read(prefix + "data.pkl")  # stored, so at most the file's size
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as err:
            raise BoundsError(f"{where}: data.pkl is damaged ({err}); the file is corrupt") from None
        scan = _Scan(records, limits.budget(size), limits, where, limits.max_nodes + len(pickled))
        scan.run(io.BytesIO(pickled))
        return scan.used
    finally:
        source.seek(position)
