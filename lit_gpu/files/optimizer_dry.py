"""One dry step of an optimizer's class on small stand-ins of its parameters: the state it keeps, and
whether a checkpoint's param-group settings are ones the class runs with (used by
:mod:`lit_gpu.files.optimizer_fit`)."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from typing import Any

import torch

from lit_gpu import messages

__all__ = ["dry_state", "early_keys", "settings_problem"]

_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)  # stand-in sizes: each dimension its own


def _stand_in(shape: torch.Size) -> tuple[int, ...]:
    return tuple(1 if d == 1 else _PRIMES[i % len(_PRIMES)] for i, d in enumerate(shape))


def dry_state(
    built: torch.optim.Optimizer,
    settings: list[Mapping[str, Any]] | None = None,
    strict: bool = False,
    steps: int = 1,
    gradient: float = 1.0,
) -> list[list[dict[str, Any]]] | None:
    """Each parameter's state after ``steps`` steps of ``built``'s class with ``built``'s param-group settings
    (or ``settings``, a checkpoint's), on small stand-ins of its parameters (group by group, in order), from
    a quadratic loss scaled by ``gradient`` (0: a zero gradient); ``None`` when that class cannot be made
    again from its groups (a user's optimizer with required arguments), or ``strict``: the exception. Runs no
    random number generator."""
    groups, params = [], []
    for n, group in enumerate(built.param_groups):
        made = [
            torch.zeros(_stand_in(p.shape), dtype=p.dtype, device=p.device, requires_grad=True)
            for p in group["params"]
        ]
        params.append(made)
        values = {k: v for k, v in (settings[n] if settings else group).items() if k != "params"}
        groups.append({**values, "params": made})
    flat = [p for ps in params for p in ps]
    sparse = isinstance(built, torch.optim.SparseAdam)

    try:
        clone = type(built)(groups)

        def closure() -> torch.Tensor:
            clone.zero_grad()
            loss = sum(((p - 1).abs() ** 2).sum().float() * gradient for p in flat)  # complex ones too
            loss.backward()
            if sparse:
                for p in flat:
                    p.grad = p.grad.to_sparse()
            return loss

        with torch.enable_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the probe's, not the run's
            for _ in range(steps):
                clone.step(closure)
    except Exception:  # a foreign optimizer that cannot run on stand-ins: its names are not compared
        if strict:
            raise
        return None
    return [[dict(clone.state.get(p, {})) for p in ps] for ps in params]


def early_keys(built: torch.optim.Optimizer) -> list[list[set[frozenset[str]]]] | None:
    """Each parameter's state names (besides those of two steps: :func:`dry_state` with ``steps=2``) that
    torch writes before they settle: one step from a zero gradient (LBFGS: ``func_evals`` and ``n_iter``
    alone, its first gradient within ``tolerance_grad``) and one step (LBFGS's ``al`` comes from its second
    iteration on: ``max_iter=1``); ``None`` as :func:`dry_state`."""
    runs = [dry_state(built, gradient=0.0), dry_state(built)]
    if runs[0] is None or runs[1] is None:
        return None
    return [
        [{frozenset(a), frozenset(b)} for a, b in zip(*groups, strict=True)]
        for groups in zip(runs[0], runs[1], strict=True)
    ]


def _init_names(cls: type) -> frozenset[str]:
    try:
        return frozenset(inspect.signature(cls.__init__).parameters) - {"self", "params"}
    except (TypeError, ValueError):
        return frozenset()


def settings_problem(
    groups: list[Any], built: torch.optim.Optimizer
) -> tuple[str | None, list[list[dict[str, Any]]] | None]:
    """Whether the checkpoint's param-group settings are ones the built optimizer's class runs with.

    ``load_state_dict`` takes the saved settings as they are (torch's semantics), past the checks the
    class's ``__init__`` makes of its arguments (``Adam``: ``0 <= lr``, ``0 <= betas[i] < 1``; ``SGD``:
    Nesterov needs zero dampening; ``Rprop``'s etas). The upstream's own definition of a valid setting is
    that: each saved group's settings go through the class's ``__init__`` (as its arguments) and one dry
    step of the class (:func:`dry_state`: ``capturable`` on a CPU, an lr that overflows the parameters'
    dtype), on stand-ins. lit_gpu's bound on top: an integer setting (LBFGS's ``max_iter``, ``max_eval``,
    ``history_size``: the evaluations a step runs, the history it keeps) is at most the config's, so a file
    cannot make a step run for hours or keep a history that fills the memory (and the probe stays one small
    step). Not checked where the class cannot be made again from the config's own settings (a user's
    optimizer with required arguments)."""
    cls, names = type(built), _init_names(type(built))
    plain = []
    for n, (group, mine) in enumerate(zip(groups, built.param_groups, strict=True)):
        values = {k: v for k, v in group.items() if k != "params"}
        for key, value in values.items():
            own = mine.get(key)
            if type(value) is int and type(own) is int and value > own:
                shown = messages.shown(repr(key), limit=40)
                return (
                    f"param group {n} has {shown[1:-1]}={value} above the config's {own} (lit_gpu bounds a "
                    f"checkpoint's integer settings by the config's: raise it there to run as it ran)"
                ), None
        plain.append(values)
    for n, values in enumerate(plain):
        first = built.param_groups[n]["params"][:1]
        probe = [torch.zeros(_stand_in(p.shape), dtype=p.dtype, device=p.device) for p in first]
        own = {k: v for k, v in built.param_groups[n].items() if k in names}
        try:
            cls(probe, **own)
        except Exception:  # the class needs more than its groups: not checked
            return None, None
        try:
            cls(probe, **{k: v for k, v in values.items() if k in names})
        except Exception as err:
            said = messages.shown(str(err), limit=80)
            return f"param group {n}'s settings are refused by {cls.__name__}: {said}", None
    if dry_state(built) is None:
        return None, None
    try:
        return None, dry_state(built, plain, strict=True)
    except Exception as err:
        return f"{cls.__name__} fails to step with its settings: {messages.shown(str(err), limit=80)}", None
