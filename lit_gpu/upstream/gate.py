"""The one runtime gate: every lit_gpu feature that reaches into Lightning's (or torch's) internals.

Each feature declares, in :mod:`lit_gpu.upstream.table`, what it depends on:

* the Lightning functions whose behaviour it reproduces (``mirrored``): a SHA-256 digest per function
  (:data:`DIGESTS`), so that a mismatch names the function that changed;
* the private names it reads or overrides (``private``): each with its ``inspect.signature`` where it
  is a function, its presence where it is an attribute set in the class's source;
* the torch releases it was verified on (``torch``: the whole-step capture's CUDA-graph and
  ``capturable`` behaviour), and, for every feature, a Lightning no newer than :data:`VERIFIED_UP_TO`.

On a mismatch *that feature* stands aside and stock Lightning behaviour runs, with one line, once per
process (:func:`stands_aside`). A feature that is the only way to keep a promise (exact resume, nothing
deleted outside the checkpoint folder, the config deciding the model) cannot stand aside: its line says
so, it keeps running, and the promise's test is the judge (``Feature.promise``).

To support a new Lightning: run ``.ci/lightning_tests.py --tier full`` on it, re-take the digests and
signatures of what changed (and re-check the code that mirrors it), then move :data:`VERIFIED_UP_TO`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
from typing import Any

from lit_gpu import messages
from lit_gpu.upstream.table import DIGESTS, EARLIER, FEATURES, Feature

#: the newest Lightning release lit_gpu was verified on (Lightning's own tests: .ci/lightning_tests.py)
VERIFIED_UP_TO = "2.6.6"

ASIDE = "{feature} stands aside, {instead}: {reason}"
CANNOT_STAND_ASIDE = (
    "{feature} runs on an unverified Lightning ({reason}); it cannot stand aside: it is the only way to "
    "keep {promise} (its test is the judge)"
)


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


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _mirrored_problem(where: str) -> str | None:
    short = where.split(":")[1]
    try:
        fn = resolve(where)
    except (ImportError, AttributeError):
        return f"it has no {short}"
    if digest(fn) not in {DIGESTS.get(where), *EARLIER.get(where, {}).values()}:
        return f"its {short} differs from the code lit_gpu mirrors"
    return None


@functools.cache
def _class_source(owner: type) -> str:
    """A class's source, read once per process (its file does not change under a run; a class replaced is
    another key). Tokenizing a large class (Trainer's) for each of its attributes took most of the gate's
    time."""
    return inspect.getsource(owner)


def _private_problem(where: str, signature: str | None) -> str | None:
    short = where.split(":")[1]
    try:
        obj = resolve(where)
    except (ImportError, AttributeError):
        # an instance attribute (not a module's name): set as ``self.name`` in its class's source
        if signature is None and "." in where.split(":")[1]:
            owner_where, _, name = where.rpartition(".")
            try:
                source = _class_source(resolve(owner_where))
            except (ImportError, AttributeError, OSError, TypeError):
                return f"it has no {owner_where.split(':')[1]}"
            if f"self.{name} =" in source or f"self.{name}:" in source:
                return None
        return f"it has no {short}"
    if signature is not None:
        try:
            found = str(inspect.signature(obj))
        except (TypeError, ValueError):
            found = "?"
        if found != signature:
            return f"its {short} takes {found}, not {signature}"
    return None


@functools.cache
def problem(name: str) -> str | None:
    """Why the installed Lightning/torch differ from what feature ``name`` was verified on, or None.

    Computed once per process (``problem.cache_clear()`` in tests).
    """
    import lightning

    feature = FEATURES[name]
    version = lightning.__version__
    if _version_tuple(version) > _version_tuple(VERIFIED_UP_TO):
        return f"Lightning {version} is newer than {VERIFIED_UP_TO}, the newest it was verified on"
    if feature.torch is not None:
        import torch

        installed = _version_tuple(torch.__version__)
        if not any(_version_tuple(a) <= installed <= _version_tuple(b) for a, b in feature.torch):
            ranges = ", ".join(a if a == b else f"{a} to {b}" for a, b in feature.torch)
            return f"torch {torch.__version__} is outside {ranges}, the releases it was verified on"
    for where in feature.mirrored:
        found = _mirrored_problem(where)
        if found is not None:
            return f"Lightning {version}: {found}"
    for where, signature in feature.private.items():
        found = _private_problem(where, signature)
        if found is not None:
            return f"Lightning {version}: {found}"
    return None


_told: set[tuple[str, str]] = set()


def tell_once(name: str, reason: str) -> None:
    if (name, reason) in _told:
        return
    _told.add((name, reason))
    feature = FEATURES[name]
    if feature.promise is None:
        messages.tell(ASIDE.format(feature=feature.name, instead=feature.instead, reason=reason))
    else:
        messages.tell(CANNOT_STAND_ASIDE.format(feature=feature.name, reason=reason, promise=feature.promise))


def stands_aside(name: str) -> bool:
    """Whether feature ``name`` stands aside in this process (stock Lightning runs); told once.

    A feature with a ``promise`` never stands aside: on a mismatch its line says so and it runs.
    """
    reason = problem(name)
    if reason is None:
        return False
    tell_once(name, reason)
    return FEATURES[name].promise is None


def reset() -> None:
    """Forget what was checked and told (tests that change an upstream function)."""
    problem.cache_clear()
    _told.clear()


def take_digests() -> dict[str, str]:
    """The digest of every mirrored function, as installed (to re-take :data:`DIGESTS`)."""
    names = sorted({where for feature in FEATURES.values() for where in feature.mirrored})
    return {where: digest(resolve(where)) for where in names}


__all__ = [
    "VERIFIED_UP_TO",
    "Feature",
    "digest",
    "problem",
    "reset",
    "resolve",
    "stands_aside",
    "take_digests",
    "tell_once",
]
