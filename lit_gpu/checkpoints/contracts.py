"""What restored state must look like, checked before anything is restored into a live object.

Lightning's own state (loops, progress, the gradient scaler), its callbacks' (``ModelCheckpoint``,
``EarlyStopping``, ``Timer``), lit_gpu's (``restore_contract``), and file paths inside callback state
(dropped when they leave the checkpoint's folder). A mismatch is one line (:class:`ContractError`).
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.upstream import saved_batches_that_stepped, saved_loop_counters

__all__ = [
    "Contract",
    "ContractError",
    "EACH",
    "MAX_INT",
    "SCALER_KEYS",
    "SCALER_STATE_KEYS",
    "STATE_PATH_KEYS",
    "Spec",
    "callback_contracts",
    "check_contracts",
    "contracts_of",
    "counters_problem",
    "drop_outside_paths",
    "drop_outside_state_paths",
    "holds",
    "inside",
    "keys_problem",
    "kind",
    "lightning_contract",
    "model_checkpoint_state",
    "scaler_problem",
    "value_problem",
]


# ---- contracts --------------------------------------------------------------------------------
#: a path step that means "every item of this list, or every value of this dict"
EACH = "*"
MAX_INT = 2**62  # counts and integer settings a file may hold


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


def integer(low: int = -MAX_INT, high: int = MAX_INT) -> Spec:
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


# ---- state kinds --------------------------------------------------------------------------------


# ---- kinds ------------------------------------------------------------------------------------
def kind(value: Any) -> str:
    """A value's kind as a restore uses it: a 0-dim tensor and a number are both a scalar (torch turns a
    saved number ``step`` into a tensor; LBFGS keeps ``H_diag`` as either)."""
    if isinstance(value, torch.Tensor):
        return "a scalar" if value.dim() == 0 else f"a {value.dim()}-dim tensor"
    if value is None:
        return "None"
    if isinstance(value, bool) or type(value).__name__ == "bool":  # numpy.bool
        return "a bool"
    if isinstance(value, numbers.Real):  # int, float and numpy's numbers (np.cos in a schedule)
        return "a scalar"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "a dict"
    if isinstance(value, str):
        return "a str"
    return type(value).__name__


def _number_problem(saved: Any, built: Any, name: str) -> str | None:
    """A saved scalar where the built one is: finite where the built one is, not NaN where it is not (an
    infinite one may be: ``ReduceLROnPlateau``'s ``best`` starts at ``inf``); torch's scheduler counters
    (``LRScheduler.last_epoch`` >= -1, ``_step_count`` >= 0) in range."""
    if isinstance(saved, torch.Tensor):
        if saved.is_meta or saved.is_complex() or saved.dtype == torch.bool:
            return f"{name} = {holds(saved)}, not a number"
        saved = saved.item()
    counter = name.endswith(("'last_epoch']", "'_step_count']"))
    if counter and not isinstance(saved, int):
        return f"{name} = {holds(saved)}, not a count"
    if isinstance(saved, int):
        low = -1 if name.endswith("'last_epoch']") else 0 if counter else -MAX_INT
        if not low <= saved <= MAX_INT:
            return f"{name} = {holds(saved)}, where the config builds {holds(built)}"
        return None
    if isinstance(built, torch.Tensor) and built.is_meta:
        return None
    mine, held = float(built), float(saved)
    if math.isfinite(mine) and not math.isfinite(held):
        return f"{name} = {holds(saved)}, not a finite number"
    if math.isnan(held) and not math.isnan(mine):  # ReduceLROnPlateau's best: inf at first, never NaN
        return f"{name} = {holds(saved)}, not a number"
    return None


def value_problem(saved: Any, built: Any, name: str, depth: int = 0) -> str | None:
    """What in ``saved`` is not of the kind of ``built`` (recursively for lists and dicts)."""
    expected = kind(built)
    if kind(saved) != expected:
        return f"{name} is {kind(saved)}, where the config builds {expected} ({holds(built)})"
    if expected == "a scalar":
        return _number_problem(saved, built, name)
    if expected.endswith("tensor"):
        return (
            None
            if saved.dtype.is_floating_point == built.dtype.is_floating_point
            else f"{name}: {holds(saved)}"
        )
    if depth > 8:
        return f"{name} nests deeper than the config's"
    if expected == "a list":
        if len(saved) != len(built):
            return f"{name} holds {len(saved)} values, where the config builds {len(built)}"
        for i, (s, b) in enumerate(zip(saved, built, strict=True)):
            if problem := value_problem(s, b, f"{name}[{i}]", depth + 1):
                return problem
    if expected == "a dict":
        return keys_problem(saved, built, name, depth + 1)
    return None


def keys_problem(saved: Mapping[Any, Any], built: Mapping[Any, Any], name: str, depth: int = 0) -> str | None:
    if set(saved) != set(built):
        extra = sorted(map(str, set(saved) - set(built)))[:4]
        missing = sorted(map(str, set(built) - set(saved)))[:4]
        parts = ([f"holds {', '.join(extra)}"] if extra else []) + (
            [f"lacks {', '.join(missing)}"] if missing else []
        )
        return f"{name} {' and '.join(parts)}, unlike the config's"
    for key, value in built.items():
        if problem := value_problem(saved[key], value, f"{name}[{key!r}]", depth):
            return problem
    return None


# ---- scaler state --------------------------------------------------------------------------------
#: where Lightning keeps the scaler's state: the precision plugins' qualnames, and the pre-2.0 key
SCALER_STATE_KEYS = ("MixedPrecision", "FSDPPrecision", "native_amp_scaling_state")
SCALER_KEYS = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def scaler_problem(state: Any) -> str | None:
    """What in ``state`` a ``GradScaler`` does not take (``None``: it fits)."""
    if not isinstance(state, Mapping) or set(state) != set(SCALER_KEYS):
        return f"holds {holds(state)}, not a GradScaler's state_dict ({', '.join(SCALER_KEYS)})"
    scale, growth, backoff = (_number(state[k]) for k in SCALER_KEYS[:3])
    if scale is None or not (math.isfinite(scale) and scale > 0):
        return f"scale = {holds(state['scale'])}, not a positive finite number (every step would be skipped)"
    if growth is None or not (math.isfinite(growth) and growth > 1.0):
        return f"growth_factor = {holds(state['growth_factor'])}; GradScaler takes a finite number > 1.0"
    if backoff is None or not (0.0 < backoff < 1.0):
        return f"backoff_factor = {holds(state['backoff_factor'])}; GradScaler takes a number in (0, 1)"
    for key, low in (("growth_interval", 1), ("_growth_tracker", 0)):
        value = state[key]
        if type(value) is not int or not low <= value <= MAX_INT:
            return f"{key} = {holds(value)}, not a count in [{low}, 2**62]"
    return None


# ---- state paths --------------------------------------------------------------------------------
# fields of callback state (Lightning's ModelCheckpoint and friends) that name files; "dirpath" is only
# compared with the callback's own folder by Lightning and never written to or deleted
STATE_PATH_KEYS = ("best_model_path", "last_model_path", "kth_best_model_path")


def inside(path: Any, folder: str | os.PathLike) -> bool:
    """Whether ``path`` names something strictly inside ``folder`` after resolving real paths.

    ``..``, absolute paths, ``~`` and symlinks (of the path and of the folder) are resolved first;
    a URL (``s3://``, ``file://``) or a non-string is never inside.
    """
    if not isinstance(path, str | os.PathLike):
        return False
    text = os.fspath(path)  # what opening it uses (a PathLike's str() may say something else)
    if not isinstance(text, str) or not text or "://" in text or "\x00" in text:
        return False
    real = os.path.realpath(os.path.expanduser(text))
    base = os.path.realpath(os.path.expanduser(str(folder)))
    return real != base and os.path.commonpath([real, base]) == base


def drop_outside_paths(checkpoint: Any, folder: str | os.PathLike) -> list[str]:
    """Blank every file path in ``checkpoint["callbacks"]`` state that leads outside ``folder``.

    Lightning's ``ModelCheckpoint`` restores ``best_model_path``, ``last_model_path``,
    ``kth_best_model_path`` and ``best_k_models`` from a checkpoint and later deletes "the previous"
    of them, recursively; its guard compares ``Path.absolute()``, which keeps ``..``. A path that does
    not resolve into ``folder`` (the checkpoint's own folder) becomes ``""``, and such ``best_k_models``
    entries are removed. Returns ``"entry.field -> resolved path"`` for each one dropped.
    """
    callbacks = checkpoint.get("callbacks") if isinstance(checkpoint, Mapping) else None
    if not isinstance(callbacks, MutableMapping):
        return []
    dropped: list[str] = []
    for name, state in callbacks.items():
        if isinstance(state, MutableMapping):
            # "ModelCheckpoint{'monitor': ...}" -> "ModelCheckpoint"
            label = messages.shown(str(name).split("{", 1)[0], limit=40)
            dropped.extend(f"{label}.{what}" for what in drop_outside_state_paths(state, folder))
    return dropped


def _shown(value: Any) -> str:
    """A path from callback state, resolved, as one safe line (it came from the file)."""
    if isinstance(value, str) and "://" not in value and "\x00" not in value:
        return messages.shown(os.path.realpath(os.path.expanduser(value)))
    return messages.shown(repr(value), limit=80)


def drop_outside_state_paths(state: MutableMapping[str, Any], folder: str | os.PathLike) -> list[str]:
    """:func:`drop_outside_paths` for one callback's state; returns ``"field -> resolved path"``."""
    dropped: list[str] = []
    for key in STATE_PATH_KEYS:
        value = state.get(key)
        if value and not inside(value, folder):
            dropped.append(f"{key} -> {_shown(value)}")
            state[key] = ""
    best_k = state.get("best_k_models")
    if isinstance(best_k, MutableMapping):
        for path in [p for p in best_k if not inside(p, folder)]:
            dropped.append(f"best_k_models -> {_shown(path)}")
            del best_k[path]
    elif best_k is not None:
        dropped.append("best_k_models (not a mapping)")
        state["best_k_models"] = {}
    return dropped


# ---- callback contracts --------------------------------------------------------------------------------
def model_checkpoint_state() -> Spec:
    """ModelCheckpoint's state: paths are strings, scores finite-or-inf scalar tensors, best_k a dict."""
    score = optional(tensor((), dtypes="float"))
    path = optional(text())
    best_k = checked(
        "a dict of str paths to scalar float tensors",
        lambda v: (
            None
            if isinstance(v, dict)
            and all(isinstance(k, str) and score.problem(s) is None for k, s in v.items())
            else ""
        ),
    )
    return fields(
        {
            "monitor": optional(text()),
            "best_model_score": score,
            "best_model_path": path,
            "current_score": score,
            "dirpath": path,
            "best_k_models": best_k,
            "kth_best_model_path": path,
            "kth_value": score,
            "last_model_path": path,
        }
    )


def _early_stopping_state() -> Spec:
    """EarlyStopping's state: counts, a scalar best score (inf at first), a known stopping reason."""
    from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason

    count = integer(0)  # up to 2**62
    reasons = {reason.value for reason in EarlyStoppingReason}
    return fields(
        {
            "wait_count": count,
            "stopped_epoch": count,
            "best_score": tensor((), dtypes="float"),
            "patience": count,
            "stopping_reason": checked(
                f"one of {sorted(reasons)}", lambda v: None if type(v) is int and v in reasons else ""
            ),
            "stopping_reason_message": optional(text()),
        },
        required=("wait_count", "stopped_epoch", "best_score", "patience"),  # read as state_dict[key]
    )


def _elapsed(value: Any) -> str | None:
    if not isinstance(value, Mapping):
        return ""
    for stage, seconds in value.items():
        if not isinstance(stage, str) or type(seconds) not in (int, float) or not math.isfinite(seconds):
            return f"{holds(stage)}: {holds(seconds)}"
        if not 0 <= seconds <= 1e12:
            return f"{holds(stage)}: {holds(seconds)}, not seconds >= 0"
    return None


def _timer_state() -> Spec:
    """Timer's state: seconds elapsed in each stage (the fit stops when they reach its duration)."""
    return fields({"time_elapsed": checked("a dict of stage names to seconds >= 0", _elapsed)})


def callback_contracts(owners: Iterable[Any]) -> list[Contract]:
    """The contracts of the Lightning callbacks among ``owners`` that declare none of their own."""
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint, Timer

    specs = (
        (EarlyStopping, _early_stopping_state),
        (ModelCheckpoint, model_checkpoint_state),
        (Timer, _timer_state),
    )
    found = []
    for owner in owners:
        if callable(getattr(owner, "restore_contract", None)):
            continue
        for kind, spec in specs:
            if isinstance(owner, kind):
                found.append(Contract(("callbacks", owner.state_key), spec(), owner=type(owner).__name__))
    return found


# ---- lightning contracts --------------------------------------------------------------------------------
# ---- the loops' progress (restored by Lightning: ``tracker.__dict__.update(state)``) ----------------------
_COUNTS = frozenset({"ready", "started", "processed", "completed"})  # a tracker's counts
#: a progress' parts by the last part of its key: what Lightning's ``load_state_dict`` reads (all of them)
_PROGRESS_PARTS = {
    "optim_progress": {"optimizer": {"step": "progress", "zero_grad": "progress"}},
    "batch_progress": {"total": "tracker", "current": "tracker", "is_last_batch": "flag"},
}
_PROGRESS = {"total": "tracker", "current": "tracker"}  # epoch_progress, scheduler_progress, ...


def _progress_problem(value: Any, parts: Any, where: str) -> str | None:
    """What is wrong with one saved progress ``value`` shaped as ``parts`` (``None``: nothing).

    Every part Lightning reads is there and nothing else: a tracker holds counts in [0, 2**62] under its
    own names only (another key would become an attribute, ``reset`` shadowing its method).
    """
    if parts == "flag":
        return None if type(value) is bool else f"{where} = {holds(value)}, not a bool"
    if parts == "progress":
        parts = _PROGRESS
    if not isinstance(value, Mapping):
        return f"{where} = {holds(value)}, not a dict"
    if parts == "tracker":
        for key, count in value.items():
            if key not in _COUNTS:
                shown = messages.shown(repr(key), limit=40)
                return f"{where} key {shown}, which would replace an attribute of Lightning's progress"
            if type(count) is not int or not 0 <= count <= MAX_INT:
                return f"{where}[{key!r}] = {holds(count)}, not a count in [0, 2**62]"
        return None
    if set(value) != set(parts):
        extra = sorted(map(repr, set(value) ^ set(parts)))[0]
        return f"{where} with {messages.shown(extra, limit=40)} (Lightning reads {', '.join(sorted(parts))})"
    for key, part in parts.items():
        if (problem := _progress_problem(value[key], part, f"{where}.{key}")) is not None:
            return problem
    return None


def _loop_problem(loop: Any, plain_batches: bool = False) -> str | None:
    """What is wrong with one loop's saved state (``loops.fit_loop`` and the like): its own state dicts
    are dicts (``_batches_that_stepped`` a count), every ``*progress`` is shaped as Lightning reads it
    (``plain_batches``: the predict loop's ``batch_progress`` has no ``is_last_batch``)."""
    if not isinstance(loop, Mapping):
        return ""
    for key, value in loop.items():
        if not isinstance(key, str):
            return f"a key {holds(key)}"
        name = key.rpartition(".")[2]
        where = messages.shown(key, limit=60)
        if name == "state_dict":
            if not isinstance(value, Mapping):
                return f"{where} = {holds(value)}, not a dict"
            steps = saved_batches_that_stepped(value)
            if type(steps) is not int or not 0 <= steps <= MAX_INT:
                return f"{where}._batches_that_stepped = {holds(steps)}, not a count in [0, 2**62]"
        elif name.endswith("progress"):
            parts = _PROGRESS if plain_batches and name == "batch_progress" else _PROGRESS_PARTS.get(name)
            if (problem := _progress_problem(value, parts or _PROGRESS, where)) is not None:
                return problem
    return None


def counters_problem(checkpoint: Any) -> str | None:
    """How a checkpoint's top-level ``global_step`` / ``epoch`` disagree with its loops' own counters (what
    the resumed fit continues at: :func:`~lit_gpu.upstream.saved_loop_counters`), or None."""
    if not isinstance(checkpoint, Mapping) or not isinstance(checkpoint.get("loops"), Mapping):
        return None
    counters = saved_loop_counters(checkpoint["loops"].get("fit_loop"))
    if counters is None:
        return None
    top = (checkpoint.get("global_step"), checkpoint.get("epoch"))
    names = ("global_step", "epoch")
    wrong = [f"{name} {holds(v)}" for name, v, own in zip(names, top, counters, strict=True) if v != own]
    if not wrong or any(type(v) is not int for v in top):
        return None  # the counters' own contract names a value that is no count
    step, epoch = counters
    return f"top-level {' and '.join(wrong)}, while its loops are at global step {step}, epoch {epoch}"


def lightning_contract() -> list[Contract]:
    """The top level of a Lightning checkpoint as Lightning's restore reads it (types of its parts)."""
    plain_dict = checked("a dict", lambda v: None if isinstance(v, Mapping) else "")
    plain_list = checked("a list", lambda v: None if isinstance(v, list) else "")
    weights = checked(
        "a dict of str names to tensors",
        lambda v: (
            None
            if isinstance(v, Mapping)
            and all(isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in v.items())
            else ""
        ),
    )
    counter = integer(0, MAX_INT)
    owner = "Lightning's restore"
    return [
        Contract(("epoch",), counter, owner=owner),
        Contract(("global_step",), counter, owner=owner),
        Contract(("state_dict",), weights, owner=owner),
        Contract(("loops",), plain_dict, owner=owner),
        Contract(("loops", EACH), plain_dict, owner=owner),
        *(
            Contract(("loops", name), checked("a loop's state as Lightning saves it", test), owner=owner)
            for name, test in (
                *((name, _loop_problem) for name in ("fit_loop", "validate_loop", "test_loop")),
                ("predict_loop", lambda v: _loop_problem(v, plain_batches=True)),
            )
        ),
        Contract(("loops", "fit_loop", "state_dict"), plain_dict, owner=owner),
        Contract(("loops", "fit_loop", "state_dict", "combined_loader"), plain_list, owner=owner),
        Contract(("callbacks",), plain_dict, owner=owner),
        # the optimizers' and schedulers' states: against the ones the config builds, once built
        # (lit_gpu.checkpoints.optimizer, at the fit's start), not against a list of names
        Contract(("optimizer_states",), plain_list, owner=owner),
        Contract(("optimizer_states", EACH), plain_dict, owner="the optimizer"),
        Contract(("lr_schedulers",), plain_list, owner=owner),
        Contract(("lr_schedulers", EACH), plain_dict, owner="the learning-rate scheduler"),
        Contract(("hyper_parameters",), plain_dict, owner=owner),
        *(
            Contract(
                (key,), checked("a GradScaler's state_dict", scaler_problem), owner="the precision plugin"
            )
            for key in SCALER_STATE_KEYS
        ),
        Contract(
            (),
            checked("top-level counters equal to its loops' (where it resumes)", counters_problem),
            owner=owner,
        ),
    ]


# ---- all of them --------------------------------------------------------------------------------
def check_restored_state(checkpoint: Any, module: Any, owners: Iterable[Any], what: str) -> None:
    """Run every contract on ``checkpoint`` that ``module`` and ``owners`` declare, before any restore.

    Each owner's ``restore_contract(module)`` (Lightning's callbacks: :func:`callback_contracts`).
    A mismatch is one line (:class:`lit_gpu.checkpoints.contracts.ContractError`).
    """
    owners = [owner for owner in (module, *owners) if owner is not None]
    contracts = [*lightning_contract(), *contracts_of(owners, module), *callback_contracts(owners)]
    check_contracts(checkpoint, contracts, what)  # the optimizers': checkpoints.optimizer, once built
