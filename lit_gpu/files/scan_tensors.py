"""What the pickle scan charges for torch's rebuild calls: storages, tensors, parameters, views.

A storage must be exactly as large as its ``data/<key>`` record; a tensor must lie inside its storage, and
is charged the elements it exposes beyond it (a view whose strides repeat one stored value costs what using
it costs); one exposing far more than its storage (:data:`VIEW_FACTOR`) is refused.
"""

from __future__ import annotations

from typing import Any

from lit_gpu.files.scan_model import (
    _SLOT,
    _STORAGE,
    _TENSOR,
    CheckpointLimits,
    _Box,
    _has,
    _itemsizes,
    _kind,
    _numel,
    _shown,
    _size,
)

__all__ = ["VIEW_FACTOR", "TorchRebuilds"]

#: a view may expose at most this many times the bytes of its storage (+ :data:`VIEW_SLACK`): more is refused
VIEW_FACTOR = 16
VIEW_SLACK = 2**16


class TorchRebuilds:
    """The part of :class:`lit_gpu.files.pickle_scan.Scan` that models torch's storage and tensor rebuilds
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
                f"a tensor of size {tuple(size)} and stride {tuple(stride)} exposes {_size(nbytes)} from a "
                f"storage of {_size(stored)} (its strides repeat stored values); using it would cost far "
                "more than the file holds; torch.save of a checkpoint writes no such view"
            )
        self.charge(nbytes - stored, f"views exposing {_size(nbytes)} of {_size(stored)} stored")

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
