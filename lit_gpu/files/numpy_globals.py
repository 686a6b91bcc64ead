"""numpy's numeric scalars and dtypes in a checkpoint: the globals torch documents as safe to allow.

A module whose scheduler computes the learning rate with ``np.cos`` leaves a ``numpy.float64`` in its
optimizer state; ``torch.save`` pickles it as ``numpy._core.multiarray.scalar(numpy.dtype("f8", False,
True), b"...")`` with a ``BUILD`` of the dtype's state (numpy < 2 writes ``numpy.core.multiarray``).
torch's weights-only reader refuses these by default and documents ``torch.serialization.add_safe_globals``
for them ("Troubleshooting weights_only" in torch's serialization notes: ``numpy.core.multiarray.scalar``,
``numpy.dtype`` and the dtype classes such as ``numpy.dtypes.Float64DType``). The accepted set here is that
one, restricted to numeric dtypes (bool, integers, floats, complex: ``numpy.typecodes``): a string, void,
object or datetime dtype is refused. The memory bound of :mod:`lit_gpu.files.pickle_scan` stays on top.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

__all__ = ["SCALAR_NAMES", "dtype_args", "dtype_class_names", "safe_globals", "valid_dtype_state"]

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
