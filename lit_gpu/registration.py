"""``Trainer(strategy="dp")`` in either import order, without ``import lit_gpu`` importing Lightning.

Lightning offers no entry point for strategies (its registry fills itself from its own modules), so
:func:`register_dp_when_lightning_loads` registers ``dp`` the moment ``lightning.pytorch`` has finished
loading: at once when it is loaded already, else through a one-shot import hook (a finder at the front of
``sys.meta_path`` that answers for ``lightning.pytorch`` alone, lets the usual finder find it, and imports
:mod:`lit_gpu.strategies` after the module has run, then takes itself out). Nothing else is touched: the
module keeps its own loader and spec.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

#: the module whose loading registers ``dp`` (its ``strategies`` registry is complete by then)
TRIGGER = "lightning.pytorch"
#: what registers ``dp`` when imported
REGISTRAR = "lit_gpu.strategies"


def register_dp_when_lightning_loads() -> None:
    """Register ``dp`` now if Lightning is loaded, else once it is (idempotent)."""
    if TRIGGER in sys.modules:
        importlib.import_module(REGISTRAR)
    elif not any(isinstance(finder, _RegisterAfterLoad) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterLoad())


class _RegisterAfterLoad(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader the other finders find for :data:`TRIGGER`."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TRIGGER:
            return None
        spec = None
        for finder in [f for f in sys.meta_path if f is not self]:
            find = getattr(finder, "find_spec", None)
            if find is not None and (spec := find(fullname, path, target)) is not None:
                break
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _ThenRegister(spec.loader, self)
        return spec


class _ThenRegister(importlib.abc.Loader):
    """The found loader, then the registration; the module keeps the original loader."""

    def __init__(self, loader: importlib.abc.Loader, finder: _RegisterAfterLoad) -> None:
        self._loader = loader
        self._finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        importlib.import_module(REGISTRAR)
