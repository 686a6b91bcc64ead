"""The pickle scan: a model of torch's weights-only unpickler that charges each object instead of building it.

``data.pkl`` is read opcode by opcode (``pickletools.genops``, linear): each object the real reader would
build is charged its size (a ``bytearray(N)``, a copy of a referenced string, a dtype conversion: ``N``
bytes), each storage must be exactly as large as its ``data/<key>`` record, each tensor must lie inside its
storage and is charged the elements it exposes beyond that storage (a view whose strides repeat one stored
value costs what using it costs; one exposing far more than its storage is refused), containers nest at
most :attr:`CheckpointLimits.max_depth` deep and never contain themselves, dict keys are strings, bytes or
integers (whose hashes cannot be made to collide).
"""

from __future__ import annotations

import pickletools
import sys
from typing import IO, Any

from lit_gpu.files.numpy_globals import DTYPE_NAME, SCALAR_NAMES, dtype_args, valid_dtype_state
from lit_gpu.files.scan_model import (
    _CALLABLE,
    _CONTAINER,
    _DICT_ITEM,
    _EMPTY_TUPLE,
    _ENCODINGS,
    _FLOAT,
    _INT,
    _KEEP_STR,
    _MEMO,
    _NOT_BOUNDED,
    _RENAMED,
    _SLOT,
    _TENSOR_TYPES,
    BoundsError,
    CheckpointLimits,
    PickledObjects,
    _Box,
    _has,
    _is_key,
    _kind,
    _known_globals,
    _layouts,
    _length,
    _numel,
    _shown,
    _size,
    _user_globals,
)
from lit_gpu.files.scan_tensors import TorchRebuilds

__all__ = ["Scan"]


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
