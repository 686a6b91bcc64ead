"""How a feature declares what it depends on upstream (:class:`Feature`), and how a name is found and its
source digested: shared by the gate's table (:mod:`lit_gpu.upstream.features`) and the gate."""

from __future__ import annotations

import hashlib
import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Feature:
    """What one feature depends on upstream, and what runs where it stands aside."""

    name: str
    #: what runs instead, as stock Lightning does it (after "stands aside, ")
    instead: str
    #: "module:Qual.name" of every function whose behaviour it reproduces (a digest each in DIGESTS)
    mirrored: tuple[str, ...] = ()
    #: "module:Class.name" -> the signature ``str(inspect.signature(...))`` of a function, or None for an
    #: attribute (present on the class, or set as ``self.name`` in its source)
    private: dict[str, str | None] = field(default_factory=dict)
    #: private keys it reads in upstream's dicts (a checkpoint's, hyper-parameters'): not checkable here,
    #: each pinned by a test in tests/unit/test_upstream_pins.py
    keys: tuple[str, ...] = ()
    #: torch release ranges ((first, last), ...) it was verified on, each inclusive; None: any
    torch: tuple[tuple[str, str], ...] | None = None
    #: set where it cannot stand aside: the promise it keeps
    promise: str | None = None


def resolve(where: str) -> Any:
    """The object ``"module:Qual.name"`` names (a property gives its getter); AttributeError/ImportError."""
    module_name, qualname = where.split(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = inspect.getattr_static(obj, part) if isinstance(obj, type) else getattr(obj, part)
        if isinstance(obj, property):
            obj = obj.fget
        elif isinstance(obj, classmethod | staticmethod):
            obj = obj.__func__
    return obj


def digest(fn: Any) -> str:
    """SHA-256 (16 hex digits) of a function's source; "" if it cannot be read."""
    try:
        return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()[:16]
    except (OSError, TypeError):
        return ""


__all__ = ["Feature", "digest", "resolve"]
