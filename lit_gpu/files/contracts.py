"""What restored state must look like: declared by each owner, checked on the checkpoint before any restore.

Every piece of lit_gpu that restores state from a checkpoint (a ``load_state_dict`` or ``on_load_checkpoint``)
declares it in a ``restore_contract`` method next to the restore: a list of :class:`Contract`, each a key path
into the checkpoint and a :class:`Spec` (types, dtypes, shapes relative to the model, value ranges, allowed
names). :func:`check_contracts` runs them all on the loaded checkpoint; a mismatch is one line naming the key,
what it holds and what was expected (:class:`ContractError`, exit 2), and nothing has been restored yet.
``tests/unit/files/test_contracts.py`` fails when a restore of lit_gpu has no contract.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from lit_gpu import messages
from lit_gpu.errors import LitGpuError

__all__ = [
    "EACH",
    "Contract",
    "ContractError",
    "Spec",
    "check_contracts",
    "contracts_of",
    "holds",
]

#: a path step that means "every item of this list, or every value of this dict"
EACH = "*"
_MAX_INT = 2**62


class ContractError(LitGpuError):
    """A checkpoint whose restored state is not what its owner expects."""


@dataclass(frozen=True)
class Spec:
    """What one value must be. ``expected`` is how the error line names it."""

    expected: str
    test: Callable[[Any], str | None]  # None when the value fits, else what is wrong with it (or "")

    def problem(self, value: Any) -> str | None:
        try:
            return self.test(value)
        except (TypeError, ValueError, AttributeError, KeyError, IndexError, RuntimeError, OverflowError):
            return ""  # a value the test cannot even look at does not fit


@dataclass(frozen=True)
class Contract:
    """``spec`` for the value at ``path`` (keys, list indices or :data:`EACH`) when it is present."""

    path: tuple[Any, ...]
    spec: Spec
    required: bool = False
    owner: str = field(default="", compare=False)


def holds(value: Any) -> str:
    """A few words on a value read from a file, safe to print."""
    if isinstance(value, torch.Tensor):
        contiguous = "" if value.is_contiguous() else ", not contiguous"
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}{contiguous}"
    if isinstance(value, bool | int | float) or value is None:
        return messages.shown(repr(value), limit=40)
    if isinstance(value, str):
        return "str " + messages.shown(repr(value), limit=40)
    if isinstance(value, Mapping | list | tuple):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


# ---- specs ------------------------------------------------------------------------------------------------
def anything() -> Spec:
    return Spec("anything", lambda v: None)


def integer(low: int = -_MAX_INT, high: int = _MAX_INT) -> Spec:
    def test(v: Any) -> str | None:
        return None if type(v) is int and low <= v <= high else ""

    return Spec(f"an int in [{low}, {high}]", test)


def number(low: float = -math.inf, high: float = math.inf) -> Spec:
    def test(v: Any) -> str | None:
        ok = type(v) in (int, float) and math.isfinite(v) and low <= v <= high
        return None if ok else ""

    return Spec(f"a finite number in [{low}, {high}]", test)


def boolean() -> Spec:
    return Spec("a bool", lambda v: None if type(v) is bool else "")


def text(choices: Iterable[str] | None = None, max_len: int = 4096) -> Spec:
    allowed = None if choices is None else frozenset(choices)

    def test(v: Any) -> str | None:
        if not isinstance(v, str) or len(v) > max_len:
            return ""
        return None if allowed is None or v in allowed else ""

    names = "a str" if allowed is None else "one of " + ", ".join(sorted(allowed)[:12])
    return Spec(names, test)


def optional(spec: Spec) -> Spec:
    return Spec(f"None or {spec.expected}", lambda v: None if v is None else spec.problem(v))


def tensor(
    shape: Sequence[int | None] | None = None,
    *,
    dtypes: str | Sequence[torch.dtype] = "any",
    max_numel: int | None = None,
    low: float | None = None,
    high: float | None = None,
) -> Spec:
    """A contiguous, dense CPU/any-device tensor; ``shape`` entries ``None`` match any size."""

    def test(v: Any) -> str | None:
        if type(v) not in (torch.Tensor, torch.nn.Parameter) or v.layout != torch.strided:
            return ""
        if v.is_meta:
            return "a meta tensor (no data)"
        if not v.is_contiguous():
            return "not contiguous (a view of other memory)"
        if shape is not None and (
            v.dim() != len(shape)
            or any(s is not None and s != n for s, n in zip(shape, v.shape, strict=True))
        ):
            return ""
        if dtypes == "float" and not v.is_floating_point():
            return ""
        if not isinstance(dtypes, str) and v.dtype not in dtypes:
            return ""
        if max_numel is not None and v.numel() > max_numel:
            return ""
        if (low is not None or high is not None) and v.numel():
            if v.is_floating_point() and not bool(torch.isfinite(v).all()):
                return "not finite"
            if low is not None and bool((v < low).any()) or high is not None and bool((v > high).any()):
                return "out of range"
        return None

    parts = ["a tensor"]
    if shape is not None:
        parts.append("of shape (" + ", ".join("*" if s is None else str(s) for s in shape) + ")")
    if dtypes != "any":
        parts.append(
            "of a floating dtype" if dtypes == "float" else f"of dtype {' or '.join(map(str, dtypes))}"
        )
    if low is not None or high is not None:
        parts.append(f"with values in [{low}, {high}]")
    return Spec(" ".join(parts), test)


def list_of(item: Spec, max_len: int = 2**20) -> Spec:
    def test(v: Any) -> str | None:
        if not isinstance(v, list | tuple) or len(v) > max_len:
            return ""
        for i, x in enumerate(v):
            if (p := item.problem(x)) is not None:
                return f"item {i}: {p or holds(x)}"
        return None

    return Spec(f"a list of {item.expected}", test)


def fields(spec: Mapping[str, Spec], *, required: Iterable[str] = (), extra: bool = True) -> Spec:
    """A dict with str keys: each named key, when present, fits its spec; ``required`` keys present."""
    must = tuple(required)

    def test(v: Any) -> str | None:
        if not isinstance(v, Mapping) or not all(isinstance(k, str) for k in v):
            return ""
        for key in must:
            if key not in v:
                return f"no {key!r}"
        if not extra and (unknown := [k for k in v if k not in spec]):
            return f"an unknown key {messages.shown(repr(unknown[0]), limit=40)}"
        for key, sub in spec.items():
            if key in v and (p := sub.problem(v[key])) is not None:
                return f"{key!r} holds {p or holds(v[key])}; expected {sub.expected}"
        return None

    return Spec("a dict of " + ", ".join(list(spec)[:6]), test)


def checked(expected: str, test: Callable[[Any], str | None]) -> Spec:
    """A spec of its own (a cross-field rule): ``test`` returns None or what is wrong."""
    return Spec(expected, test)


# ---- running them -----------------------------------------------------------------------------------------
def _values(root: Any, path: tuple[Any, ...]) -> Iterable[tuple[str, Any]]:
    """``(dotted key, value)`` of each value ``path`` reaches in ``root`` (none when a step is missing)."""
    found: list[tuple[str, Any]] = [("", root)]
    for step in path:
        nxt: list[tuple[str, Any]] = []
        for where, value in found:
            if step == EACH:
                items = (
                    value.items()
                    if isinstance(value, Mapping)
                    else enumerate(value)
                    if isinstance(value, list | tuple)
                    else ()
                )
                nxt.extend((f"{where}.{k}" if where else str(k), v) for k, v in items)
            elif isinstance(value, Mapping) and step in value:
                nxt.append((f"{where}.{step}" if where else str(step), value[step]))
            elif isinstance(value, list | tuple) and type(step) is int and 0 <= step < len(value):
                nxt.append((f"{where}[{step}]", value[step]))
        found = nxt
    return found


def check_contracts(checkpoint: Any, contracts: Iterable[Contract], what: str) -> None:
    """Check every contract on ``checkpoint`` (read from ``what``); raise the first mismatch in one line."""
    if not isinstance(checkpoint, Mapping):
        return
    for contract in contracts:
        found = list(_values(checkpoint, contract.path))
        if not found and contract.required:
            key = ".".join(map(str, contract.path))
            raise ContractError(
                f"{messages.shown(what)}: no {key}; {contract.owner or 'lit_gpu'} expects "
                f"{contract.spec.expected}; the file is damaged or forged: use another checkpoint"
            )
        for key, value in found:
            problem = contract.spec.problem(value)
            if problem is not None:
                raise ContractError(
                    f"{messages.shown(what)}: {messages.shown(key, limit=120) if key else 'it'} holds "
                    f"{problem or holds(value)}; {contract.owner or 'lit_gpu'} expects "
                    f"{contract.spec.expected}; the file is damaged or forged: use another checkpoint"
                )


def contracts_of(owners: Iterable[Any], *args: Any) -> list[Contract]:
    """The contracts ``owners`` declare (their ``restore_contract(*args)``), each labelled with its owner."""
    found: list[Contract] = []
    for owner in owners:
        declare = getattr(owner, "restore_contract", None)
        if callable(declare):
            label = type(owner).__name__
            found.extend(Contract(c.path, c.spec, c.required, c.owner or label) for c in declare(*args))
    return found
