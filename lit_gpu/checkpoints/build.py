"""Building what a file names (a ``class_path``), after checking it all: trusted packages only, classes of
the right kind, plain data for their arguments; and the ``{"class_path", "init_args"}`` recorded for export.
"""

from __future__ import annotations

import collections.abc
import functools
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from lit_gpu.errors import LitGpuError
from lit_gpu.textfiles import BadFileError, hparams_loader, parse_yaml, read_yaml
from lit_gpu.upstream import pop_cli_instantiation

__all__ = [
    "NESTED_KINDS",
    "TRUSTED_ROOTS",
    "TRUST_ENV",
    "UNTRUSTED_MODULES",
    "UnsafeBuildError",
    "build",
    "check",
    "check_hparams",
    "is_true_subclass",
    "lightning_base",
    "resolve_class",
    "trusted_roots",
    "user_roots",
]

BUILD_REFUSED = "{source}: refusing to build {key}: {what}; nothing was run; {fix}"


# ---- build policy --------------------------------------------------------------------------------
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
        return UnsafeBuildError(BUILD_REFUSED.format(source=self.source, key=self.key, what=what, fix=fix))

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


# ---- build --------------------------------------------------------------------------------
# ---- checking a whole spec before anything is called ---------------------------------------------
# ---- checking a whole spec before anything is called ---------------------------------------------
@dataclass
class _Plan:
    cls: type
    kwargs: dict[str, Any]
    partial: bool = False  # Callable[..., Optimizer] parameters get functools.partial(cls, **kwargs)


def _is_spec(value: Any) -> bool:
    return isinstance(value, Mapping) and "class_path" in value


def _plan_value(value: Any, annotation: Any, where: Where) -> Any:
    """Check a value for a parameter: plain data, or a nested spec fitting ``annotation``."""
    where.left[0] -= 1
    if where.left[0] < 0:  # a list or dict named many times over (shared by a pickle's memo, a YAML alias)
        raise where.refuse(
            f"its arguments hold more than {MAX_VALUES} values (containers named more than once counted each "
            "time)",
            "pass the arguments yourself",
        )
    if _is_spec(value):
        kinds, partial = kinds_of(annotation)
        if not kinds:
            raise where.refuse(
                f"a nested class_path ({value.get('class_path')!r}) fills a parameter typed "
                f"{shown_annotation(annotation)}, and only parameters typed as a torch module, optimizer or "
                "LR scheduler may get a class"
            )
        plan = _plan_spec(value, kinds, where)
        plan.partial = partial
        return plan
    if isinstance(value, list | tuple):
        inner = element_annotation(annotation, "list")
        return type(value)(_plan_value(v, inner, where.at(str(i))) for i, v in enumerate(value))
    if isinstance(value, Mapping):
        inner = element_annotation(annotation, "dict")
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise where.refuse(f"dict keys must be strings, got {type(k).__name__}")
            out[k] = _plan_value(v, inner, where.at(k))
        return out
    if isinstance(value, str) and imports_strings(annotation, where.loader):
        raise where.refuse(
            f"the string {value[:80]!r} fills a parameter typed {shown_annotation(annotation)}, for which a "
            "loader (jsonargparse) would import and call what the string names"
        )
    if isinstance(value, str) and where.loader and any(accepts_any(o) for o in options_of(annotation)):
        parsed = parsed_text(value, where)  # jsonargparse parses strings for untyped parameters as YAML
        if isinstance(parsed, dict | list):
            _plan_value(parsed, typing.Any, where)
    if isinstance(value, PLAIN):
        return value
    raise where.refuse(
        f"init_args may hold plain data only (numbers, strings, lists, dicts), got {type(value).__name__}"
    )


def _init_params(cls: type) -> tuple[dict[str, inspect.Parameter], dict[str, Any], bool]:
    """Named ``__init__`` parameters of ``cls``, their annotations, and whether it takes ``**kwargs``."""
    params = dict(inspect.signature(cls.__init__).parameters)
    params.pop(next(iter(params), ""), None)  # self
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # unresolvable string annotations: treat every parameter as untyped
        hints = {}
    varkw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    named = {n: p for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return named, hints, varkw


def _annotation(cls: type, name: str, where: Where) -> tuple[bool, Any]:
    """Whether ``cls(name=...)`` is accepted, and the annotation of that parameter.

    A name taken by ``**kwargs`` gets the annotation of the first base class in the MRO that names it
    (as jsonargparse does for ``super().__init__(**kwargs)``).
    """
    try:
        params, hints, varkw = _init_params(cls)
    except (TypeError, ValueError):
        raise where.refuse(
            f"cannot read the parameters of {cls.__qualname__}", "use a class with a Python __init__"
        ) from None
    if name in params:
        return True, hints.get(name, params[name].annotation)
    if not varkw:
        return False, None
    for parent in type.__dict__["__mro__"].__get__(cls)[1:]:
        try:
            params, hints, _ = _init_params(parent)
        except (TypeError, ValueError):
            continue
        if name in params:
            return True, hints.get(name, params[name].annotation)
    return True, inspect.Parameter.empty


def _plan_spec(
    spec: Mapping[str, Any],
    base: type | tuple[type, ...],
    where: Where,
    drop_unknown: bool = False,
    resolved: type | None = None,
) -> _Plan:
    cls = resolved or resolve_path(spec.get("class_path"), base, where)
    kwargs: dict[str, Any] = {}
    for key in ("init_args", "dict_kwargs"):
        given = spec.get(key)
        if given is None:
            continue
        if not isinstance(given, Mapping):
            raise where.refuse(
                f"{key} must be a mapping of argument names to values, got {type(given).__name__}"
            )
        kwargs.update(given)
    plan = _Plan(cls, {})
    for name, value in kwargs.items():
        accepted, annotation = _annotation(cls, name, where) if isinstance(name, str) else (False, None)
        if not accepted:
            if drop_unknown:
                continue
            raise where.refuse(
                f"{cls.__qualname__} has no parameter {name!r}",
                "the file was written for another version of the class; fix its init_args",
            )
        plan.kwargs[name] = _plan_value(value, annotation, where.at(f"init_args.{name}"))
    return plan


def _call(plan: Any) -> Any:
    if isinstance(plan, _Plan):
        kwargs = {k: _call(v) for k, v in plan.kwargs.items()}
        return functools.partial(plan.cls, **kwargs) if plan.partial else plan.cls(**kwargs)
    if isinstance(plan, list | tuple):
        return type(plan)(_call(v) for v in plan)
    if isinstance(plan, dict):
        return {k: _call(v) for k, v in plan.items()}
    return plan


def check(
    spec: Any,
    base: type | tuple[type, ...] = nn.Module,
    *,
    source: str = "file",
    key: str = "class_path",
    trust_modules: Iterable[str] = (),
    loader: bool = False,
) -> type:
    """Resolve and check ``spec`` (``{"class_path", "init_args"}``, recursively) without calling anything.

    Args:
        loader: The spec goes to jsonargparse (the CLI), which also resolves strings for ``Callable``,
            ``type`` and class parameters and parses strings of untyped ones: refuse those too.

    Returns:
        The top-level class.

    Raises:
        UnsafeBuildError: See :func:`build`.
    """
    return _checked(spec, base, source, key, trust_modules, loader).cls


def _checked(
    spec: Any, base: Any, source: Any, key: str, trust_modules: Iterable[str], loader: bool = False
) -> _Plan:
    where = where_of(source, key, trust_modules, loader)
    if not _is_spec(spec):
        raise where.refuse("expected a mapping with class_path and init_args", "fix or regenerate the file")
    return _plan_spec(spec, base, where)


def build(
    spec: Any,
    base: type | tuple[type, ...] = nn.Module,
    *,
    source: str = "file",
    key: str = "class_path",
    trust_modules: Iterable[str] = (),
) -> Any:
    """Instantiate ``spec`` from untrusted file content; everything is checked before the first call.

    Args:
        spec: ``{"class_path": "pkg.mod.Class", "init_args": {...}}``; nested specs in ``init_args`` are
            built for parameters typed with an allowed kind (see the module docstring).
        base: Required base class(es) of the top-level class, e.g. ``nn.Module``.
        source: The file the spec was read from (for the message).
        key: Where the spec sits in that file, e.g. ``"lit_gpu_net"`` (for the message).
        trust_modules: Extra top-level packages that may be imported.

    Raises:
        UnsafeBuildError: Something in the spec is not allowed; nothing has been called.
    """
    return _call(_checked(spec, base, source, key, trust_modules))


def lightning_base(kind: str) -> type:
    """``LightningModule`` (``"model"``) or ``LightningDataModule`` (``"data"``), imported lazily."""
    import lightning.pytorch as pl

    return {"model": pl.LightningModule, "data": pl.LightningDataModule}[kind]


# ---- LightningModule.load_from_checkpoint ----------------------------------------------------------
_LEGACY_HPARAMS_KEYS = ("hparams", "module_arguments")  # Lightning's CHECKPOINT_PAST_HPARAMS_KEYS


def check_hparams(
    cls: type,
    checkpoint_path: Any,
    *,
    hparams_file: Any = None,
    weights_only: bool = True,
    passed: Iterable[str] = (),
    trust_modules: Iterable[str] = (),
) -> None:
    """Check what ``cls.load_from_checkpoint`` would build from the file's hyper-parameters, before it runs.

    Lightning hands a CLI-written checkpoint's ``hyper_parameters`` to jsonargparse, which imports and
    instantiates every nested ``class_path`` (and resolves strings for ``Callable`` parameters): a
    checkpoint naming ``net: {class_path: evil.Net}`` imports ``evil``. Here the same hyper-parameters
    (or ``hparams_file``) go through the policy of :func:`build`, without building anything. Arguments
    the caller passes (``passed``) replace the file's and are not checked.

    Raises:
        UnsafeBuildError: The hyper-parameters name something :func:`build` would refuse.
        CheckpointError: A pickle payload (without ``weights_only=False``) or an unreadable file.
    """
    from lit_gpu.checkpoints.read import read_for_check

    name = (
        checkpoint_path
        if isinstance(checkpoint_path, str | os.PathLike)
        else getattr(checkpoint_path, "name", None)
    )
    source = str(name) if isinstance(name, str | os.PathLike) else "the checkpoint"
    checkpoint = read_for_check(checkpoint_path, weights_only)
    if not isinstance(checkpoint, Mapping):
        return
    hparams: dict[str, Any] = {}
    for key in (*_LEGACY_HPARAMS_KEYS, "hyper_parameters"):
        if isinstance(checkpoint.get(key), Mapping):
            hparams.update(checkpoint[key])
    where_key = "hyper_parameters"
    if hparams_file is not None:
        source, where_key = str(hparams_file), "hparams"
        fix = (
            "YAML tags can build Python objects, so it was not loaded; "
            "remove the tags or pass the arguments yourself"
        )
        try:
            # read as Lightning's load_hparams_from_yaml reads what its loggers wrote (a tuple included)
            loader = hparams_loader()
            loaded = read_yaml(hparams_file, fix=fix, loader=loader) if os.path.isfile(hparams_file) else None
        except BadFileError as err:
            raise UnsafeBuildError(str(err)) from None
        hparams = dict(loaded) if isinstance(loaded, Mapping) else {}
    instantiator, class_path = pop_cli_instantiation(hparams)
    if instantiator is None:
        return  # Lightning calls cls(**hparams) with the plain values: nothing is resolved from strings
    for name in passed:
        hparams.pop(name, None)
    where = where_of(source, where_key, trust_modules, loader=True)
    spec = {"class_path": class_path, "init_args": hparams}
    # without _class_path (or naming the very class called) the called class itself is built: the
    # caller chose it, wherever it was defined
    own = class_path is None or class_path == f"{cls.__module__}.{cls.__qualname__}"
    _plan_spec(spec, cls, where, drop_unknown=True, resolved=cls if own else None)


# ---- net spec --------------------------------------------------------------------------------
NET_SPEC_KEY = "lit_gpu_net"
MODEL_SPEC_KEY = "lit_gpu_model"


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def net_spec(net: nn.Module) -> dict[str, Any]:
    """``{"class_path", "init_args"}`` that rebuild ``net``: the CLI config when LightningCLI built it.

    Outside the CLI, init args are read from same-named attributes of ``net`` when they exist (others
    keep their defaults); exporters verify the rebuilt net's keys and shapes before writing.
    """
    from lit_gpu.upstream import given_hyperparameters  # the CLI config of the module being built

    class_path = f"{type(net).__module__}.{type(net).__qualname__}"
    given = given_hyperparameters()
    config = given.get("net") if isinstance(given, Mapping) else None
    if (
        isinstance(config, Mapping)
        and str(config.get("class_path", "")).rsplit(".", 1)[-1] == type(net).__name__
    ):
        init_args = dict(config.get("init_args") or {})
        if _jsonable(init_args):
            return {"class_path": config["class_path"], "init_args": init_args}
    init_args = {}
    for name, param in inspect.signature(type(net).__init__).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        value = getattr(net, name, None)
        if value is not None and not isinstance(value, nn.Module) and _jsonable(value):
            init_args[name] = value
    return {"class_path": class_path, "init_args": init_args}


def plain_spec(config: Any) -> dict[str, Any] | None:
    """``{"class_path", "init_args"}`` of a config entry (a Namespace or dict) as JSON-able plain data.

    Init args that are not plain data (already-built objects) are left out; ``None`` when the entry
    names no class.
    """
    if hasattr(config, "as_dict"):
        config = config.as_dict()
    if not isinstance(config, Mapping) or not isinstance(config.get("class_path"), str):
        return None
    args = config.get("init_args")
    args = args.as_dict() if hasattr(args, "as_dict") else args
    init_args = {}
    for name, value in (args or {}).items() if isinstance(args, Mapping) else ():
        value = value.as_dict() if hasattr(value, "as_dict") else value
        if _jsonable(value):
            init_args[str(name)] = value
    return {"class_path": config["class_path"], "init_args": init_args}
