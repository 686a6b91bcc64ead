"""The import policy of a build from file content: which modules may be imported, which class a path
names, and which kinds of class a parameter's annotation lets a nested ``class_path`` fill.

Trust is by package, not by import state (see :mod:`lit_gpu.files.build`): a module is looked up or
imported only when its top-level package is trusted (:data:`TRUSTED_ROOTS`, ``$LIT_GPU_TRUST_MODULES``,
``trust_modules``); the class is read from the module's ``__dict__`` and must have the expected base in
its true MRO. :class:`Where` carries the file, the key and the value budget of one check.
"""

from __future__ import annotations

import collections.abc
import importlib
import importlib.util
import inspect
import os
import re
import sys
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.textfiles import BadFileError, parse_yaml

TRUSTED_ROOTS: tuple[str, ...] = ("lit_gpu", "torch", "torchvision", "lightning", "pytorch_lightning")
TRUST_ENV = "LIT_GPU_TRUST_MODULES"
# modules of trusted packages whose classes download data or weights when built or prepared
UNTRUSTED_MODULES: tuple[str, ...] = (
    "lightning.pytorch.demos.mnist_datamodule",
    "lightning.pytorch.demos.transformer",
    "torch.hub",
    "torchvision.datasets",
    "torchvision.models",
    "torchvision.prototype",
)
NESTED_KINDS: tuple[type, ...] = (nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler)

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PLAIN = (str, int, float, bool, type(None), torch.Tensor)
FIX = "use a checkpoint or run folder you trust, or rebuild the net from your own code and load weights"


class UnsafeBuildError(LitGpuError):
    """File content names something lit_gpu refuses to import or instantiate."""


def trusted_roots(extra: Iterable[str] = ()) -> frozenset[str]:
    """Top-level packages that may be imported: the defaults, ``$LIT_GPU_TRUST_MODULES`` and ``extra``."""
    return frozenset(TRUSTED_ROOTS) | user_roots(extra)


def user_roots(extra: Iterable[str] = ()) -> frozenset[str]:
    """Top-level packages the user trusts: ``$LIT_GPU_TRUST_MODULES`` and ``extra`` (never a file's say)."""
    env = [name.strip() for name in os.environ.get(TRUST_ENV, "").split(",")]
    names = [*env, *extra]
    return frozenset(n.split(".", 1)[0] for n in names if n and IDENT.match(n.split(".", 1)[0]))


def where_of(source: Any, key: str, trust_modules: Iterable[str], loader: bool = False) -> Where:
    extra = tuple(trust_modules)
    return Where(str(source), key, trusted_roots(extra), loader, user_roots(extra))


def is_true_subclass(obj: Any, base: type | tuple[type, ...]) -> bool:
    """``obj`` is a class whose real MRO contains ``base`` (or one of them); no hooks are consulted."""
    if not isinstance(obj, type):
        return False
    mro = type.__dict__["__mro__"].__get__(obj)
    bases = base if isinstance(base, tuple) else (base,)
    return any(b in mro for b in bases)


SHORT = {
    "torch.nn.modules.module.Module": "torch.nn.Module",
    "torch.optim.optimizer.Optimizer": "torch.optim.Optimizer",
    "lightning.pytorch.core.module.LightningModule": "lightning.pytorch.LightningModule",
    "lightning.pytorch.core.datamodule.LightningDataModule": "lightning.pytorch.LightningDataModule",
}


def base_name(base: type | tuple[type, ...]) -> str:
    bases = base if isinstance(base, tuple) else (base,)
    names = (f"{b.__module__}.{b.__qualname__}" for b in bases)
    return " or ".join(SHORT.get(n, n) for n in names)


#: values (counted each time they are reached) one spec or one set of hyper-parameters may hold: checking
#: and building them visits each
MAX_VALUES = 100_000


@dataclass
class Where:
    source: str  # the file the spec came from
    key: str  # where in it, e.g. "lit_gpu_net" or "model.init_args.net"
    trusted: frozenset[str]
    loader: bool = False  # the values go to jsonargparse (Lightning's loader), which resolves strings too
    user_trusted: frozenset[str] = (
        frozenset()
    )  # named by the user (flag, env): may also use UNTRUSTED_MODULES
    left: list[int] = field(default_factory=lambda: [MAX_VALUES])  # values one check may still visit

    def refuse(self, what: str, fix: str = FIX) -> UnsafeBuildError:
        return UnsafeBuildError(
            messages.BUILD_REFUSED.format(source=self.source, key=self.key, what=what, fix=fix)
        )

    def at(self, key: str) -> Where:
        return Where(
            self.source, f"{self.key}.{key}", self.trusted, self.loader, self.user_trusted, self.left
        )


def import_module_if_trusted(module_name: str, class_path: str, where: Where) -> types.ModuleType:
    """The module ``module_name`` if the import policy allows it (see the module docstring)."""
    root = module_name.split(".", 1)[0]
    if root not in where.trusted:
        try:
            installed = importlib.util.find_spec(root) is not None  # top level: searches, runs nothing
        except (ValueError, ImportError):  # e.g. a module without __spec__
            installed = root in sys.modules
        state = "is not a trusted package" if installed else "is not installed"
        fix = (
            f"if you trust the package {root!r}: --trust_module {root} (lit-gpu export), "
            f"trust_modules=[{root!r}] (lit_gpu.checkpoints in Python) or {TRUST_ENV}={root}"
            if installed
            else f"install {root!r} or point PYTHONPATH at it"
        )
        raise where.refuse(
            f"importing {module_name!r} for class_path {class_path!r} would run its code and {root!r} "
            f"{state} (trusted: {', '.join(sorted(where.trusted))})",
            fix,
        )
    if any(part.startswith("_") for part in module_name.split(".")[1:]):
        raise where.refuse(
            f"class_path {class_path!r} would import the private module {module_name!r} (private "
            "modules such as test utilities may act on import)",
            "name the class by its public path, e.g. torch.nn.Linear",
        )
    denied = next((m for m in UNTRUSTED_MODULES if module_name == m or module_name.startswith(m + ".")), None)
    if denied is not None and root not in where.user_trusted:
        raise where.refuse(
            f"class_path {class_path!r} is in {denied!r}, whose classes download data or weights when built",
            f"build it from your own code, or {TRUST_ENV}={root} if you trust the file",
        )
    loaded = sys.modules.get(module_name)
    if isinstance(loaded, types.ModuleType):
        return loaded  # a trusted module imported already: looked up, not imported again
    try:
        return importlib.import_module(module_name)
    except ImportError as err:
        raise where.refuse(
            f"class_path {class_path!r} cannot be imported ({err})",
            "check the spelling, or install the package that defines the class",
        ) from None


def resolve_class(
    class_path: Any,
    base: type | tuple[type, ...],
    *,
    source: str = "file",
    key: str = "class_path",
    trust_modules: Iterable[str] = (),
) -> type:
    """The class named by ``class_path``, if the import policy allows it and it subclasses ``base``.

    Raises:
        UnsafeBuildError: The path is malformed, its module is not importable under the policy, or
            the object is not a class with ``base`` in its MRO. Nothing was called.
    """
    return resolve_path(class_path, base, where_of(source, key, trust_modules))


def resolve_path(class_path: Any, base: type | tuple[type, ...], where: Where) -> type:
    if not isinstance(class_path, str):
        raise where.refuse(
            f"class_path must be a 'package.module.Class' string, got {type(class_path).__name__}"
        )
    parts = class_path.split(".")
    if len(parts) < 2 or not all(IDENT.match(p) for p in parts):
        raise where.refuse(f"class_path {class_path!r} is not a 'package.module.Class' path")
    if any(p.startswith("__") and p.endswith("__") for p in parts):
        raise where.refuse(f"class_path {class_path!r} names a dunder attribute or module")
    module = import_module_if_trusted(".".join(parts[:-1]), class_path, where)
    obj = vars(module).get(parts[-1])  # no module __getattr__ hook, no lazy import
    if obj is None:
        raise where.refuse(
            f"module {module.__name__!r} has no class {parts[-1]!r} (class_path {class_path!r})",
            "check the spelling of the class_path",
        )
    if not isinstance(obj, type):
        raise where.refuse(
            f"{class_path!r} is a {type(obj).__name__}, not a class; only {base_name(base)} classes are built"
        )
    if not is_true_subclass(obj, base):
        raise where.refuse(f"{class_path!r} is a class but not a subclass of {base_name(base)}")
    return obj


# ---- which kinds a parameter's annotation accepts ------------------------------------------------
def kinds_of(annotation: Any) -> tuple[tuple[type, ...], bool]:
    """Allowed bases for a nested ``class_path`` filling ``annotation``; bool: build a partial."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        found: list[type] = []
        partial = False
        for arg in typing.get_args(annotation):
            kinds, is_partial = kinds_of(arg)
            found.extend(kinds)
            partial = partial or is_partial
        return tuple(found), partial
    if origin is collections.abc.Callable:
        args = typing.get_args(annotation)
        kinds, _ = kinds_of(args[-1]) if args else ((), False)
        return kinds, bool(kinds)
    if isinstance(annotation, type) and is_true_subclass(annotation, NESTED_KINDS):
        return (annotation,), False
    return (), False


STRING_SAFE = (str, int, float, bool, bytes, type(None), os.PathLike, list, dict, tuple, set)


def shown_annotation(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return "nothing (unannotated)"
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def options_of(annotation: Any) -> tuple[Any, ...]:
    """The members of a ``Union``/``Optional``, else ``(annotation,)``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def accepts_any(annotation: Any) -> bool:
    return annotation in (typing.Any, object, inspect.Parameter.empty)


def imports_strings(annotation: Any, loader: bool = False) -> bool:
    """Whether a string for ``annotation`` may be resolved as an import path (jsonargparse does this).

    True for ``Callable``, ``type[...]`` and class types other than plain data. For :func:`build`
    (which never resolves strings) a ``str`` option in the union keeps the string a string; for
    jsonargparse (``loader``), whose union order is its own, any such option is enough.
    """
    options = options_of(annotation)
    if not loader and (str in options or any(accepts_any(o) for o in options)):
        return False
    for option in options:
        origin = typing.get_origin(option)
        if origin is collections.abc.Callable or origin is type or option in (type, collections.abc.Callable):
            return True
        if origin is None and isinstance(option, type) and not accepts_any(option):
            import enum

            if not issubclass(option, STRING_SAFE + (enum.Enum,)):
                return True
    return False


def parsed_text(text: str, where: Any) -> Any:
    """``text`` parsed as YAML, as jsonargparse would; ``text`` itself where it is not YAML."""
    try:
        return parse_yaml(text, "a string value")
    except BadFileError as err:
        if err.problem.startswith("YAML syntax error"):
            return text
        raise where.refuse(
            f"the string {text[:80]!r} is YAML past lit_gpu's budget ({err.problem})"
        ) from None


def element_annotation(annotation: Any, container: str) -> Any:
    """The element (``list``) or value (``dict``) annotation inside ``Optional``/``Union`` if any."""
    options = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else (annotation,)
    )
    for option in options:
        origin = typing.get_origin(option)
        args = typing.get_args(option)
        if container == "list" and origin in (list, tuple, collections.abc.Sequence) and args:
            return args[0]
        if container == "dict" and origin in (dict, collections.abc.Mapping) and len(args) == 2:
            return args[1]
    return None
