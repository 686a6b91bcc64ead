"""Build objects from untrusted file content (checkpoints, run folders) without running foreign code.

A checkpoint's ``lit_gpu_net`` or a run's ``config.yaml`` names a class as a ``class_path`` string plus
``init_args``. Calling whatever such a string names is code execution (``os.system`` with
``init_args: {command: ...}``), and so is importing whatever module it names. :func:`build` therefore
resolves and checks the whole spec, nested ``class_path`` entries included, *before* it calls anything:

* **Imports.** Trust is by package, not by import state: a module is looked up or imported only when
  its top-level package is trusted: :data:`TRUSTED_ROOTS` (lit_gpu, torch, torchvision, lightning,
  pytorch_lightning), the packages in the ``LIT_GPU_TRUST_MODULES`` environment variable
  (comma-separated), or the ``trust_modules`` argument (``lit-gpu export --trust_module mypkg``).
  Being imported already (``torchmetrics`` by Lightning) trusts nothing, and modules of trusted
  packages that download or reach the network when built (:data:`UNTRUSTED_MODULES`) stay refused.
  ``importlib.util.find_spec`` on the top-level name (which executes nothing) only tells an untrusted
  package apart from a missing one. No path segment may be a dunder name (``__main__``, ``__globals__``),
  and private modules (``torch.testing._internal...``) are never imported.
* **Lookup.** The class is read from the module's ``__dict__``: no module ``__getattr__`` hook runs,
  no attribute chains (``pkg.mod.obj.attr``) are followed.
* **Kind.** The object must be a real class with the expected base in its true MRO (read with
  ``type.__dict__["__mro__"]``, so neither ``__subclasscheck__``/``__subclasshook__`` nor a metaclass
  property can fake it): ``nn.Module`` for nets, ``LightningModule``/``LightningDataModule`` for model/data.
  A nested ``class_path`` must fit the annotation of the parameter it fills, and that annotation must be a
  subclass of an allowed kind (:data:`NESTED_KINDS`: ``nn.Module``, ``Optimizer``, ``LRScheduler``), also
  inside ``Optional``/``Union``, ``list[...]``/``dict[str, ...]`` and ``Callable[..., Optimizer]``.
* **Arguments.** ``init_args`` must be plain data (numbers, strings, booleans, ``None``, lists, dicts,
  tensors) and name parameters the class accepts; strings are never resolved to objects.

The same checks serve :func:`check_hparams` (``load_from_checkpoint``: what jsonargparse would build
from a checkpoint's hyper-parameters, including strings it would import) and
:mod:`lit_gpu.run.store` (the model and data a run's ``config.yaml`` names).

The import policy and the kinds an annotation accepts are :mod:`lit_gpu.files.build_policy`'s.
Anything else raises :class:`UnsafeBuildError` (a :class:`~lit_gpu.errors.LitGpuError`: one line, exit 2
in the CLI) naming the entry, the file and the fix, and nothing has been imported or called.

Not covered: what a trusted class's own ``__init__`` does with plain-data arguments (classes in trusted
packages are assumed to be import- and construction-safe), and pickled objects inside a checkpoint
(refused by ``weights_only=True`` loading, see :func:`lit_gpu.files.checkpoint.read_checkpoint`).
Needs torch only; Lightning is imported when a Lightning base is asked for.
"""

from __future__ import annotations

import functools
import inspect
import os
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from lit_gpu.files.build_policy import (
    MAX_VALUES,
    NESTED_KINDS,
    PLAIN,
    TRUST_ENV,
    TRUSTED_ROOTS,
    UNTRUSTED_MODULES,
    UnsafeBuildError,
    Where,
    accepts_any,
    element_annotation,
    imports_strings,
    is_true_subclass,
    kinds_of,
    options_of,
    parsed_text,
    resolve_class,
    resolve_path,
    shown_annotation,
    trusted_roots,
    user_roots,
    where_of,
)
from lit_gpu.textfiles import BadFileError, hparams_loader, read_yaml
from lit_gpu.upstream.loops import pop_cli_instantiation

__all__ = [
    "NESTED_KINDS",
    "TRUSTED_ROOTS",
    "TRUST_ENV",
    "UnsafeBuildError",
    "build",
    "UNTRUSTED_MODULES",
    "check",
    "check_hparams",
    "is_true_subclass",
    "lightning_base",
    "resolve_class",
    "trusted_roots",
    "user_roots",
]


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
    from lit_gpu.files.checkpoint import read_for_check

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
