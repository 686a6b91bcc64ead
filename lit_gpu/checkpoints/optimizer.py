"""A resumed fit's optimizer and scheduler states against the ones the config builds; ``--fresh_optimizer``.

Lightning builds the optimizers after it read the checkpoint and restores them after ``on_fit_start``
(``optimizer.load_state_dict``, ``scheduler.load_state_dict``, zipped with what the config builds). Between
the two, the structure is checked (:func:`check_optimizers`), and the restore and the first step after it
are watched (:func:`watch`): their exception becomes one line. A state that only poisons numbers is
NaNGuard's (it stops before the bad update). What is checked:

* **the optimizer**: as many param groups and parameters as the built one, each group with the built
  group's keys and kinds of values; an integer *setting* (an ``__init__`` argument: LBFGS's ``max_iter``)
  at most the config's, so a file cannot make a step run without end (a progress counter such as timm's
  ``lookahead_step`` is not a setting); each parameter's state plain data, with the same kind of value
  under one name across parameters;
* **the scheduler**: the built one's keys and kinds, and its settings equal to the config's.

With ``--fresh_optimizer`` the checkpoint's states are replaced by the built ones' (a no-op restore).
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.checkpoints.contracts import MAX_INT, ContractError, holds, keys_problem, kind, value_problem
from lit_gpu.upstream import scheduler_children

__all__ = [
    "OptimizerFit",
    "check_at_fit_start",
    "check_optimizers",
    "fit_optimizers",
    "optimizer_problem",
    "saved_optimizer_name",
    "scheduler_problem",
    "watch",
]

OPTIMIZER_CHANGED = (
    "{what}: its optimizer state does not fit the config: the checkpoint holds {held}, the config builds "
    "{built} ({problem}); to keep the weights and the progress and start the optimizers and schedulers "
    "fresh, add --fresh_optimizer true (docs/checkpoints.md), or resume with the config it was saved with"
)
OPTIMIZER_STATE_MISSING = (
    "{what}: holds the weights and the progress but no optimizer or scheduler state (saved with "
    "save_weights_only); to continue from it with the optimizers and schedulers started fresh, add "
    "--fresh_optimizer true (docs/checkpoints.md)"
)
OPTIMIZER_FRESH = (
    "{what}: kept the weights and the progress; started {optimizers} and {schedulers} fresh "
    "(--fresh_optimizer)"
)


# ---- optimizer fit --------------------------------------------------------------------------------
_MAX_LIST = 2**16
_MAX_DEPTH = 4


# ---- the optimizer --------------------------------------------------------------------------------------
def saved_optimizer_name(saved: Any) -> str:
    """Which torch optimizer wrote ``saved`` (from its param groups' keys): ``"SGD"``, ``"Adam or AdamW"``."""
    groups = saved.get("param_groups") if isinstance(saved, Mapping) else None
    if not (isinstance(groups, list) and groups and isinstance(groups[0], Mapping)):
        return "an optimizer state"
    keys = set(groups[0])
    fits = [(len(k), n) for n, k in _class_keys() if k <= keys]
    if not fits:
        return "an optimizer with param groups of " + ", ".join(sorted(map(str, keys - {"params"}))[:6])
    best = max(size for size, _ in fits)
    return " or ".join(n for size, n in fits if size == best)


@functools.cache
def _class_keys() -> tuple[tuple[str, frozenset[str]], ...]:
    """Each torch.optim optimizer's param-group keys (its defaults), to name what a checkpoint holds."""
    found = []
    for name, cls in vars(torch.optim).items():
        if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and cls.__name__ != "Optimizer":
            try:
                found.append((name, frozenset(cls([torch.nn.Parameter(torch.zeros(2, 2))]).defaults)))
            except Exception:  # noqa: S112  # a class that needs arguments: not named
                continue
    return tuple(found)


def _init_names(cls: type) -> frozenset[str]:
    try:
        return frozenset(inspect.signature(cls.__init__).parameters) - {"self", "params"}
    except (TypeError, ValueError):
        return frozenset()


def _int_settings(built: torch.optim.Optimizer) -> frozenset[str]:
    """The param-group keys that are settings: ``__init__`` arguments of the optimizer's class or of the
    optimizer it wraps (timm's ``Lookahead``), not the counters a class keeps beside them."""
    names = _init_names(type(built))
    for inner in vars(built).values():
        if isinstance(inner, torch.optim.Optimizer) and inner is not built:
            names |= _init_names(type(inner))
    return names


def _filled_keys(groups: list[Any], built: torch.optim.Optimizer) -> list[set[str]] | None:
    """The param-group keys the built optimizer's class fills in itself when a saved group lacks them: its
    ``__setstate__`` (which ``load_state_dict`` runs: ``setdefault`` of flags later torch releases added)."""
    try:
        probe = type(built).__new__(type(built))
        plain = [{k: v for k, v in g.items() if k != "params"} for g in groups]
        probe.__setstate__(
            {
                "defaults": dict(built.defaults),
                "state": {},
                "param_groups": [{**g, "params": []} for g in plain],
            }
        )
        return [set(after) - set(before) for after, before in zip(probe.param_groups, plain, strict=True)]
    except Exception:  # a foreign __setstate__ that needs more: only the saved keys count
        return None


def _group_problem(
    group: Mapping[str, Any], mine: Mapping[str, Any], filled: set[str], settings: frozenset[str], n: int
) -> str | None:
    """A saved param group against the built one: every key the optimizer reads is there (or filled in by
    its class), each of the built value's kind, an integer setting at most the config's."""
    # param_names is optional in torch's load_state_dict
    missing = sorted(set(mine) - set(group) - filled - {"params", "param_names"})
    if missing:
        extra = sorted(map(str, set(group) - set(mine)))[:4]
        held = f"holds {', '.join(extra)} and " if extra else ""
        return f"param group {n} {held}lacks {', '.join(missing[:4])}, which the config's optimizer reads"
    for key, value in mine.items():
        if key == "params" or key not in group:
            continue
        if problem := value_problem(group[key], value, f"[{key!r}]"):
            return f"param group {n}{problem}"
        saved = group[key]
        if key in settings and type(saved) is int and type(value) is int and saved > value:
            return (
                f"param group {n} has {messages.shown(key, limit=40)}={saved} above the config's {value} "
                "(lit_gpu bounds a checkpoint's integer settings by the config's: raise it there to run "
                "as it ran)"
            )
    return None


def _value_kind(value: Any, param: torch.Tensor, depth: int = 0) -> str | None:
    """How a state value relates to its parameter (``None``: not plain data an optimizer keeps)."""
    if isinstance(value, torch.Tensor):
        if value.is_meta or value.layout != torch.strided or not value.is_contiguous():
            return None
        numeric = "float" if value.is_floating_point() or value.is_complex() else "int"
        if value.dim() == 0:
            return "a scalar"
        shape = "shaped as its parameter" if value.shape == param.shape else "of another shape"
        return f"a {numeric} tensor {shape}"
    if value is None or isinstance(value, bool):
        return kind(value)
    if isinstance(value, numbers.Real):
        return "a scalar"
    if isinstance(value, list | tuple) and len(value) <= _MAX_LIST and depth < _MAX_DEPTH:
        inner = {_value_kind(v, param, depth + 1) for v in value}
        return None if None in inner else "a list"
    return None


def _state_problem(state: Any, place: Mapping[Any, torch.Tensor]) -> str | None:
    """Each parameter's state: plain data (tensors, numbers, lists of them), a ``step`` a count, and the
    same kind of value under one name for every parameter (a value of another kind is a forgery)."""
    if not isinstance(state, Mapping):
        return "a per-parameter state that is not a dict"
    kinds: dict[Any, tuple[str, Any]] = {}
    for pid, values in state.items():
        if pid not in place:
            return f"state for param id {holds(pid)}, which no param group names"
        if not isinstance(values, Mapping):
            return f"state[{pid}] = {holds(values)}, not a dict"
        for key, value in values.items():
            where = f"state[{pid}][{messages.shown(repr(key), limit=30)}]"
            if isinstance(value, torch.Tensor) and value.is_meta:
                return f"{where} holds a meta tensor (no data), which its optimizer cannot read"
            found = _value_kind(value, place[pid])
            if found is None:
                return f"{where} = {holds(value)}, not a value an optimizer keeps"
            if key == "step" and not 0 <= (float(value) if found == "a scalar" else 0) < MAX_INT:
                return f"{where} = {holds(value)}, not a count"
            seen = kinds.setdefault(key, (found, pid))
            if seen[0] != found and place[pid].dim() > 0 and place[seen[1]].dim() > 0:
                odd, usual = (
                    ((pid, found), seen) if seen[0].endswith("parameter") else (seen[::-1], (found, pid))
                )
                return f"state[{odd[0]}][{key!r}] is {odd[1]}, where state[{usual[1]}] holds {usual[0]}"
    return None


def optimizer_problem(saved: Any, built: torch.optim.Optimizer) -> str | None:
    """What in ``saved`` (an optimizer's ``state_dict()``) does not fit ``built`` (``None``: it fits)."""
    if not isinstance(saved, Mapping) or not {"state", "param_groups"} <= set(saved):
        return f"holds {holds(saved)}, not an optimizer's state_dict (state, param_groups)"
    groups, built_groups = saved["param_groups"], built.state_dict()["param_groups"]
    if not isinstance(groups, list) or not all(isinstance(g, Mapping) for g in groups):
        return "param_groups that are not a list of dicts"
    if len(groups) != len(built_groups):
        return f"{len(groups)} param groups, where the config builds {len(built_groups)}"
    ids: list[Any] = [
        i for g in groups for i in (g.get("params") if isinstance(g.get("params"), list) else [None])
    ]
    if not all(type(i) is int for i in ids) or len(set(ids)) != len(ids):
        return "param ids that are not distinct ints"
    filled, settings = _filled_keys(groups, built), _int_settings(built)
    for n, (group, mine) in enumerate(zip(groups, built_groups, strict=True)):
        if len(group["params"]) != len(mine["params"]):
            counts = len(group["params"]), len(mine["params"])
            return f"param group {n} of {counts[0]} parameters, where the config builds {counts[1]}"
        if problem := _group_problem(group, mine, filled[n] if filled else set(), settings, n):
            return problem
    place = {
        pid: param
        for group, mine in zip(groups, built.param_groups, strict=True)
        for pid, param in zip(group["params"], mine["params"], strict=True)
    }
    return _state_problem(saved["state"], place)


# ---- the scheduler --------------------------------------------------------------------------------------
_PROGRESS_ARGS = frozenset({"optimizer", "last_epoch", "verbose"})


def _settings(scheduler: Any) -> frozenset[str]:
    """The ``__init__`` parameters ``scheduler`` keeps under their own names (its settings, not progress)."""
    try:
        names = inspect.signature(type(scheduler).__init__).parameters
    except (TypeError, ValueError):
        return frozenset()
    return frozenset(names) - _PROGRESS_ARGS


def scheduler_problem(saved: Any, built: Any) -> str | None:
    """What in ``saved`` (a scheduler's ``state_dict()``) does not fit ``built`` (``None``: it fits)."""
    mine = built.state_dict()
    if not isinstance(saved, Mapping):
        return f"holds {holds(saved)}, not a scheduler's state_dict"
    if problem := _scheduler_keys_problem(saved, mine, type(built).__name__):
        return problem
    for key in sorted(_settings(built) & set(mine)):
        if saved[key] != mine[key] and not (_is_nan(saved[key]) and _is_nan(mine[key])):
            name = type(built).__name__
            return f"{key}={holds(saved[key])}, where the config's {name} has {key}={holds(mine[key])}"
    for child_saved, child in scheduler_children(saved, built):  # SequentialLR's, ChainedScheduler's
        if problem := scheduler_problem(child_saved, child):
            return problem
    return None


def _scheduler_keys_problem(saved: Mapping[Any, Any], mine: Mapping[Any, Any], name: str) -> str | None:
    """The scheduler's keys and the kinds of their values; a list's length is not compared: it follows the
    param groups, which a callback may add after the config built them (``BaseFinetuning``), and torch's
    ``load_state_dict`` takes it as it is."""
    if set(saved) != set(mine):
        return keys_problem(saved, mine, name)  # the line naming the keys held and lacked
    for key, built in mine.items():
        where = f"{name}[{key!r}]"
        if kind(built) != "a list" or kind(saved[key]) != "a list":
            problem = value_problem(saved[key], built, where)
        elif built and kind(built[0]) != "a dict":  # a list of children is scheduler_children's, below
            problem = _each_like(saved[key], built[0], where)
        else:
            problem = None
        if problem:
            return problem
    return None


def _each_like(values: list[Any], first: Any, where: str) -> str | None:
    """Each of ``values`` (one per param group) of the kind of the config's ``first``."""
    for i, value in enumerate(values):
        if problem := value_problem(value, first, f"{where}[{i}]", 1):
            return problem
    return None


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


# ---- all of a fit's -------------------------------------------------------------------------------------
def check_optimizers(
    checkpoint: Any, optimizers: Sequence[Any], schedulers: Sequence[Any], what: str
) -> None:
    """Raise :class:`ContractError` (one line) where ``checkpoint``'s optimizer or scheduler states do not fit
    ``optimizers`` and ``schedulers`` (what the config built, in Lightning's order). As Lightning, the states
    are zipped with what the config builds: Lightning's ``StochasticWeightAveraging`` leaves a scheduler state
    a config without a scheduler does not build, and restores it itself."""
    saved_optimizers = checkpoint.get("optimizer_states", [])
    saved_schedulers = checkpoint.get("lr_schedulers", [])
    held = built = problem = ""
    if not isinstance(saved_optimizers, list):
        held, built = f"optimizer states of {holds(saved_optimizers)}", f"{len(optimizers)} optimizers"
    elif not isinstance(saved_schedulers, list):
        held, built = f"scheduler states of {holds(saved_schedulers)}", f"{len(schedulers)} schedulers"
    else:
        for saved, optimizer in zip(saved_optimizers, optimizers, strict=False):
            if problem := optimizer_problem(saved, optimizer) or "":
                held, built = f"the state of {saved_optimizer_name(saved)}", type(optimizer).__name__
                break
        else:
            for saved, scheduler in zip(saved_schedulers, schedulers, strict=False):
                if problem := scheduler_problem(saved, scheduler) or "":
                    held, built = "a scheduler state", type(scheduler).__name__
                    break
    if held:
        raise ContractError(
            OPTIMIZER_CHANGED.format(
                what=what, held=held, built=built, problem=messages.shown(problem, limit=200)
            )
        )


def _refused(what: str, obj: Any, err: BaseException, at: str) -> ContractError:
    held = "an optimizer state" if isinstance(obj, torch.optim.Optimizer) else "a scheduler state"
    said = messages.shown(f"{type(err).__name__} at its {at}: {messages.first_line(err)}", limit=200)
    return ContractError(
        OPTIMIZER_CHANGED.format(what=what, held=held, built=type(obj).__name__, problem=said)
    )


def _watched_step(original: Callable[..., Any], what: str, done: Callable[[], bool]) -> Callable[..., Any]:
    """``step`` whose exception is one line, except one raised inside the closure (the user's step)."""

    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not done():  # a later call, through a wrapper made after the watch: as it was
            return original(*args, **kwargs)
        inside: list[bool] = []
        closure = kwargs.get("closure", args[0] if args else None)
        if callable(closure):

            def watched() -> Any:
                inside.append(True)
                result = closure()
                inside.pop()
                return result

            if "closure" in kwargs:
                kwargs["closure"] = watched
            else:
                args = (watched, *args[1:])
        try:
            return original(*args, **kwargs)
        except Exception as err:
            if inside:
                raise
            raise _refused(what, self, err, "first step after the restore") from err

    return step


def _watched_load(original: Callable[..., Any], what: str, done: Callable[[], bool]) -> Callable[..., Any]:
    def load_state_dict(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not done():
            return original(*args, **kwargs)
        try:
            return original(*args, **kwargs)
        except Exception as err:
            raise _refused(what, self, err, "restore") from err

    return load_state_dict


_NONE = object()


def watch(obj: Any, what: str) -> None:
    """Make the next ``obj.load_state_dict`` and the next ``obj.step`` (an optimizer's or a scheduler's) raise
    one line naming ``what`` and ``--fresh_optimizer true`` where they fail: the restore is observed, not
    predicted. Each method is the instance's own again after its one watched call. A scheduler's
    ``load_state_dict`` is ``__dict__.update`` (it does not fail) and its ``state_dict`` is its ``__dict__``:
    only its ``step`` is watched, and hidden from its ``state_dict``."""
    optimizer = isinstance(obj, torch.optim.Optimizer)
    for name, wrap in (("load_state_dict", _watched_load), ("step", _watched_step))[0 if optimizer else 1 :]:
        original = getattr(obj, name, None)
        if not callable(original):
            continue
        had = vars(obj).get(name, _NONE)
        ours: list[Any] = []  # [the watching method] until its one call

        def done(name: str = name, had: Any = had, ours: list[Any] = ours) -> bool:
            """Whether this is the watched call; the instance's own method back in place."""
            if not ours:
                return False
            if vars(obj).get(name) is ours.pop():  # still ours (a scheduler made later wraps it: left)
                vars(obj).pop(name) if had is _NONE else setattr(obj, name, had)
            return True

        ours.append(types.MethodType(wrap(original, what, done), obj))
        setattr(obj, name, ours[0])
    if not optimizer and "state_dict" not in vars(obj):
        setattr(obj, "state_dict", types.MethodType(_without_watches(obj.state_dict), obj))  # noqa: B010


def _without_watches(original: Callable[[], Any]) -> Callable[[Any], Any]:
    """A scheduler's ``state_dict`` (its ``__dict__``) without the methods :func:`watch` set on it."""

    def state_dict(self: Any) -> Any:
        hidden = {name: vars(self).pop(name) for name in ("step", "state_dict") if name in vars(self)}
        try:
            return original()
        finally:
            vars(self).update(hidden)

    return state_dict


# ---- optimizer resume --------------------------------------------------------------------------------
def fit_optimizers(trainer: pl.Trainer, checkpoint: dict[str, Any], what: str, fresh: bool) -> None:
    """Check ``checkpoint``'s optimizer and scheduler states against ``trainer``'s (``fresh``: replace)."""
    optimizers = list(trainer.optimizers)
    schedulers = [config.scheduler for config in trainer.lr_scheduler_configs]
    if fresh:
        checkpoint["optimizer_states"] = [optimizer.state_dict() for optimizer in optimizers]
        checkpoint["lr_schedulers"] = [scheduler.state_dict() for scheduler in schedulers]
        names = [type(x).__name__ for x in optimizers], [type(x).__name__ for x in schedulers]
        messages.tell(
            OPTIMIZER_FRESH.format(
                what=what,
                optimizers=", ".join(names[0]) or "no optimizer",
                schedulers=", ".join(names[1]) or "no scheduler",
            )
        )
        return
    callbacks = getattr(trainer, "callbacks", [])
    averaging = any(isinstance(cb, pl.callbacks.StochasticWeightAveraging) for cb in callbacks)
    # SWA replaces the schedulers by its SWALR once averaging started and restores that one itself
    check_optimizers(checkpoint, optimizers, [] if averaging else schedulers, what)
    for each in (*optimizers, *schedulers):
        watch(each, what)  # Lightning's restore and the first step after it: their exception is one line


class OptimizerFit(pl.Callback):
    """Runs :func:`fit_optimizers` once, at the start of the fit that loaded ``checkpoint``."""

    def __init__(self) -> None:
        self._pending: tuple[dict[str, Any], str, bool] | None = None

    def arm(self, checkpoint: dict[str, Any], what: str, fresh: bool) -> None:
        self._pending = (checkpoint, what, fresh)

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pending, self._pending = self._pending, None  # the checkpoint is not held past the check
        if pending is not None:
            fit_optimizers(trainer, *pending)


def check_at_fit_start(trainer: pl.Trainer, checkpoint: Any, what: str) -> None:
    """Check ``checkpoint`` (just read for ``trainer``'s fit) once the optimizers are built: now where the
    strategy restores after its set-up, else at ``on_fit_start``. Nothing for validate, test and predict:
    Lightning restores optimizers for a fit only."""
    if trainer.state.fn != "fit" or not isinstance(checkpoint, Mapping):
        return
    fresh = getattr(trainer.strategy.checkpoint_io, "fresh_optimizer", False) is True
    if not ("optimizer_states" in checkpoint and "lr_schedulers" in checkpoint):
        # a weights-only checkpoint (ModelCheckpoint(save_weights_only=True)): Lightning's restore ends in
        # a KeyError ("checkpoint contains only the model"); with --fresh_optimizer the built states fill in
        if not fresh:
            raise ContractError(OPTIMIZER_STATE_MISSING.format(what=what))
        checkpoint = cast("dict[str, Any]", checkpoint)
    if trainer.strategy.restore_checkpoint_after_setup:
        fit_optimizers(trainer, checkpoint, what, fresh)  # type: ignore[arg-type]
        return
    hook = next((cb for cb in trainer.callbacks if isinstance(cb, OptimizerFit)), None)
    if hook is None:
        hook = OptimizerFit()
        trainer.callbacks.append(hook)
    hook.arm(checkpoint, what, fresh)  # type: ignore[arg-type]
