"""The run store: which run and which checkpoint a command means, answered in one call, each file read once.

:func:`resolve` answers ``--ckpt_path last|best|FILE`` of a sub-command with a :class:`Resolution` (the
checkpoint, its :class:`CheckpointHeader`, its :class:`~lit_gpu.run.layout.Run`, the line to print and the
bytes the load then reads); it changes nothing and prints nothing: :func:`resolve_ckpt_path` (the CLI's one
call) applies it.

* ``last`` / ``best``: this user's runs under ``trainer.default_root_dir`` whose ``config.yaml`` (or
  ``classes.yaml``, for a CLI built with ``model_class=``) names the same model and data classes (compared
  as strings, nothing imported), newest first; in the run taken, the complete ``last*.ckpt`` of the highest
  step or the ``best*.ckpt`` of the best monitored value (:func:`order_runs`, :func:`choose_file`: pure).
  Another user's run is never chosen (a shared root is not trusted).
* ``FILE``: checked as a file, its header read once, its run found from where it lies.
* Under SLURM with no ``--ckpt_path``, the newest ``hpc_ckpt_N.ckpt`` of yours (:func:`cluster_resolution`).
* A checkpoint inside a run folder that is a symlink leading outside it is refused, naming its target; a
  pickle payload is one line; a checkpoint of another model class than the config's is refused.

Also here, what a run's ``config.yaml`` may say (:class:`Signature`: which model; :func:`rebuild_fields`:
the model and data to rebuild a run from a checkpoint alone; nothing else of it is ever taken) and the one
table of class paths an old ``config.yaml`` names that moved (:data:`MOVED`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import re
import sys
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml

from lit_gpu import messages
from lit_gpu.checkpoints.contracts import inside
from lit_gpu.checkpoints.read import CheckpointFacts, inspect, not_lightning
from lit_gpu.errors import LitGpuError
from lit_gpu.messages import ckpt_point, shown
from lit_gpu.run import layout
from lit_gpu.run.layout import (
    CKPT_SYMLINK_LEAVES_RUN,
    CONFIG_N_RE,
    CONFIG_NAME,
    Run,
    Where,
    config_value,
    of_config,
    root_dir,
    run_of_checkpoint,
    run_parents,
    runs_around,
)
from lit_gpu.textfiles import BadFileError, read_yaml
from lit_gpu.upstream import batches_that_stepped, recorded_class_path, saved_loop_counters

if TYPE_CHECKING:
    import lightning.pytorch as pl

# ---- class paths that moved: the one table of old names a run's config.yaml may hold ----------------------
#: class paths earlier lit_gpu versions wrote into a run's config.yaml (the default callbacks' files, which
#: moved: ``lit_gpu/callbacks/{step_path,batch_path}.py`` are gone) -> the public name
MOVED: Mapping[str, str] = {
    "lit_gpu.runs.RunFolderSync": "lit_gpu.callbacks.RunFolderSync",
    "lit_gpu.loggers.RunFolderSync": "lit_gpu.callbacks.RunFolderSync",
    "lit_gpu.callbacks.rng_state.RNGStateCallback": "lit_gpu.callbacks.RNGStateCallback",
    "lit_gpu.data.stateful.ResumableDataLoader": "lit_gpu.data.ResumableDataLoader",
    "lit_gpu.data.tensor_loader.TensorLoader": "lit_gpu.data.TensorLoader",
    "lit_gpu.callbacks.logging_state.LoggingStateCallback": "lit_gpu.callbacks.LoggingStateCallback",
    "lit_gpu.callbacks.interrupt.CheckpointOnInterrupt": "lit_gpu.callbacks.CheckpointOnInterrupt",
    "lit_gpu.callbacks.oom_recovery.OOMLoopName": "lit_gpu.callbacks.OOMLoopName",
    "lit_gpu.callbacks.oom_recovery.OOMRecovery": "lit_gpu.callbacks.OOMRecovery",
    "lit_gpu.testing.OOMAbove": "lit_gpu.oom.OOMAbove",
    "lit_gpu.callbacks.step_path.SkipIdleHooks": "lit_gpu.callbacks.SkipIdleHooks",
    "lit_gpu.callbacks.step_path.LeanOptimizerStep": "lit_gpu.callbacks.LeanOptimizerStep",
    "lit_gpu.callbacks.batch_path.LeanTrainingBatch": "lit_gpu.callbacks.LeanTrainingBatch",
    "lit_gpu.upstream.step_path.SkipIdleHooks": "lit_gpu.callbacks.SkipIdleHooks",
    "lit_gpu.upstream.hooks.SkipIdleHooks": "lit_gpu.callbacks.SkipIdleHooks",
    "lit_gpu.upstream.step_path.LeanOptimizerStep": "lit_gpu.callbacks.LeanOptimizerStep",
    "lit_gpu.upstream.batch_path.LeanTrainingBatch": "lit_gpu.callbacks.LeanTrainingBatch",
    "lit_gpu.io.AtomicCheckpointIO": "lit_gpu.checkpoints.io.AtomicCheckpointIO",
}

_MAX_WALK = 2_000_000  # containers one walk over a config visits at most (parsed configs are far below)


def current(tree: Any) -> Any:
    """``tree`` (plain parsed data) with every ``class_path`` value of :data:`MOVED` replaced, in place.

    Iterative and bounded: a walk over data never recurses on its shape.
    """
    stack, walked = [tree], 0
    while stack and walked < _MAX_WALK:
        node = stack.pop()
        walked += 1
        if isinstance(node, dict):
            path = node.get("class_path")
            if isinstance(path, str) and path in MOVED:
                node["class_path"] = MOVED[path]
            stack.extend(v for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, dict | list))
    return tree


# ---- what a run asks of a checkpoint: one typed value from the one read of it -----------------------------
@dataclass(frozen=True)
class CheckpointHeader:
    """The facts of one checkpoint file the run uses (plain values, no tensors).

    Attributes:
        kind: ``"lightning"`` (``Trainer.save_checkpoint`` wrote it) or ``"other"`` (a plain state_dict,
            a safetensors file, any other object: :attr:`problem` says which).
        step: ``global_step`` (``None``: absent or not an integer).
        epoch: ``epoch``.
        scores: ``(monitor, current_score)`` of each callback state that records one, in file order
            (``None``: a score that is not a finite number).
        class_path: The model class its hyper-parameters name (``_class_path``), if any (anything but a
            string kept as its ``repr``, so that it is compared and named, never trusted).
        log_step: The first step a fit resumed from it logs at (:func:`resume_log_step`).
        problem: Why it cannot start or resume a run (one line), or ``None``.
    """

    kind: Literal["lightning", "other"]
    step: int | None = None
    epoch: int | None = None
    scores: tuple[tuple[str | None, float | None], ...] = ()
    class_path: str | None = None
    log_step: int | None = None
    problem: str | None = None

    @classmethod
    def of(cls, path: str | os.PathLike, raw: Any) -> CheckpointHeader:
        """From what the checkpoint reader returned for ``path`` (its top-level object)."""
        return cls.built(raw, not_lightning(path, raw))

    @classmethod
    def from_facts(cls, facts: CheckpointFacts) -> CheckpointHeader:
        """From the reader's one look at a whole file (:func:`lit_gpu.checkpoints.read.inspect`)."""
        return cls.built(facts.header, facts.problem)

    @classmethod
    def built(cls, raw: Any, problem: str | None) -> CheckpointHeader:
        """From a checkpoint's top-level object and why it cannot start a run (``None``: it can)."""
        if not isinstance(raw, Mapping):
            return cls("other", problem=problem)
        hparams = raw.get("hyper_parameters")
        loops = raw.get("loops")
        # the loops' own counters where it has them: the step shown, chosen by and resumed at are one
        step, epoch = (_int(raw.get("global_step")), _int(raw.get("epoch")))
        if (
            isinstance(loops, Mapping)
            and (counters := saved_loop_counters(loops.get("fit_loop"))) is not None
        ):
            step, epoch = counters
        return cls(
            "lightning" if problem is None else "other",
            step=step,
            epoch=epoch,
            scores=_scores(raw.get("callbacks")),
            class_path=_class_path(recorded_class_path(hparams)),
            log_step=resume_log_step(raw),
            problem=problem,
        )

    def score(self, monitor: str | None) -> float | None:
        """The score recorded for ``monitor`` (``None``: the first one recorded)."""
        for name, value in self.scores:
            if monitor is None or name == monitor:
                return value
        return None


def resume_log_step(checkpoint: Any) -> int | None:
    """The first step a fit resumed from ``checkpoint`` logs metrics at; ``None`` if it cannot tell.

    Lightning logs at ``_batches_that_stepped`` (batches with an optimizer step; the checkpoint holds
    it), plus one when the save happened at a training batch end (before the counter moved).
    Checkpoints without loop state fall back to ``global_step``.
    """
    with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
        loop = checkpoint["loops"]["fit_loop"]
        stepped = batches_that_stepped(loop)
        total = loop["epoch_loop.batch_progress"]["total"]
        at_batch_end = total["ready"] == total["started"] == total["processed"] == total["completed"] + 1
        return stepped + int(at_batch_end)
    step = checkpoint.get("global_step") if isinstance(checkpoint, Mapping) else None
    return int(step) if isinstance(step, int) else None


def _class_path(value: Any) -> str | None:
    return value if value is None or isinstance(value, str) else repr(value)[:200]


def _scores(callbacks: Any) -> tuple[tuple[str | None, float | None], ...]:
    found = []
    if isinstance(callbacks, Mapping):
        for state in callbacks.values():
            if isinstance(state, Mapping) and "current_score" in state:
                monitor = state.get("monitor")
                found.append(
                    (monitor if isinstance(monitor, str) else None, _float(state.get("current_score")))
                )
    return tuple(found)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    try:
        number = float(value)  # a 0-d tensor too
    except (TypeError, ValueError, RuntimeError):
        return None
    return number if math.isfinite(number) else None


# ---- a run's saved config.yaml: read as plain data, used for fields ---------------------------------------
_SKIPPED_KEYS = re.compile(r"optim|sched", re.IGNORECASE)  # not part of "which model" for matching
# init args that name files, folders or the network: a file must not choose where a run reads or writes
_PATH_NAMES = re.compile(
    r"^(.*_)?(dir|dirs|dirpath|path|paths|file|files|filename|filepath|root|output|url|uri|download)$",
    re.IGNORECASE,
)
_MAX_BYTES = 1 << 20  # a config.yaml is a few KB; a bigger one is not a run's


def _class_paths(node: Any, skip_key: str = "") -> list[str]:
    """Every ``class_path`` in a config tree, depth first, leaving out optimizer/scheduler subtrees.

    Iterative (a walk over data never recurses on its shape) and bounded: a tree from
    :func:`~lit_gpu.textfiles.read_yaml` is acyclic and expands to at most ``max_nodes`` values (a node
    shared by aliases is walked each time, as it expands); a container met again inside itself (a cycle,
    which no reader makes) is not walked again; past :data:`_MAX_WALK` containers the walk stops.
    """
    found: list[str] = []
    stack: list[tuple[Any, str, bool]] = [(node, skip_key, False)]
    inside: set[int] = set()  # the containers being walked: the current one and its ancestors
    walked = 0
    while stack and walked < _MAX_WALK:
        item, key, leaving = stack.pop()
        if leaving:
            inside.discard(id(item))
            continue
        if key and _SKIPPED_KEYS.search(key):
            continue
        if not isinstance(item, Mapping | list | tuple) or id(item) in inside:
            continue
        walked += 1
        inside.add(id(item))
        stack.append((item, key, True))
        if isinstance(item, Mapping):
            if isinstance(item.get("class_path"), str):
                found.append(item["class_path"])
            children = [(value, str(k), False) for k, value in item.items() if k != "class_path"]
        else:
            children = [(value, key, False) for value in item]
        stack.extend(reversed(children))
    return found


@dataclass(frozen=True)
class Signature:
    """Which model (module and its nets) and which data module a config builds."""

    model: tuple[str, ...]
    data: str | None

    @classmethod
    def of(cls, config: Mapping[str, Any] | None) -> Signature:
        """From a config mapping with ``model`` / ``data`` entries (a parsed or a saved config)."""
        config = config or {}
        data = config.get("data")
        data_class = data.get("class_path") if isinstance(data, Mapping) else None
        return cls(
            tuple(_class_paths(config.get("model"))), data_class if isinstance(data_class, str) else None
        )

    @classmethod
    def of_parsed(cls, config: Any, classes: Mapping[str, str] | None = None) -> Signature:
        """From a sub-command's parsed config (Namespaces or dicts): its ``model`` and ``data``, named by
        ``classes`` (:func:`built_classes`) where the config names none."""

        def plain(key: str) -> Any:
            try:
                node = config[key]
            except (KeyError, TypeError, AttributeError):
                return None
            return node.as_dict() if hasattr(node, "as_dict") else node

        return cls.of(named({"model": plain("model"), "data": plain("data")}, classes))

    def matches(self, other: Signature) -> bool:
        """Same model classes, and same data class when both name one."""
        if not self.model or self.model != other.model:
            return False
        return self.data is None or other.data is None or self.data == other.data

    def describe(self) -> str:
        """``RegressionModule(SimpleModel) + SyntheticRegressionDataModule``."""
        if not self.model:
            return "unknown model"
        names = [p.rsplit(".", 1)[-1][:60] for p in self.model]
        text = names[0] + (f"({', '.join(names[1:])})" if len(names) > 1 else "")
        return text + (f" + {self.data.rsplit('.', 1)[-1][:60]}" if self.data else "")


def built_classes(cli: Any) -> dict[str, str]:
    """The model and data classes a CLI was built with where its config names none: ``LitGpuCLI(MyModel,
    MyData)`` (``model_class=``, ``datamodule_class=``, not in subclass mode) parses init args only, so its
    runs record the classes (``classes.yaml``) to be found by ``--ckpt_path last|best`` and exported."""
    found = {}
    for key, given, subclass_mode in (
        ("model", "model_class", "subclass_mode_model"),
        ("data", "datamodule_class", "subclass_mode_data"),
    ):
        cls = getattr(cli, given, None)
        if isinstance(cls, type) and getattr(cli, subclass_mode, True) is False:
            found[key] = f"{cls.__module__}.{cls.__qualname__}"
    return found


def named(config: dict[str, Any], classes: Mapping[str, str] | None) -> dict[str, Any]:
    """``config`` with its ``model``/``data`` entries that name no class put under the class ``classes``
    names (``{"class_path": ..., "init_args": entry}``), as a config of a class-path CLI holds them."""
    for key, class_path in (classes or {}).items():
        entry = config.get(key)
        if key in ("model", "data") and not (
            isinstance(entry, Mapping) and isinstance(entry.get("class_path"), str)
        ):
            config[key] = {
                "class_path": class_path,
                "init_args": dict(entry) if isinstance(entry, Mapping) else {},
            }
    return config


def recorded_classes(folder: str | os.PathLike) -> dict[str, str]:
    """The classes a run's ``classes.yaml`` records (:func:`built_classes`); ``{}``: none, or a link."""
    path = Path(folder) / layout.CLASSES_NAME
    saved = None if path.is_symlink() else _read_config(path)
    return {k: v for k, v in (saved or {}).items() if k in ("model", "data") and isinstance(v, str)}


def _read_config(path: Path) -> dict[str, Any] | None:
    """``path`` as plain data (``yaml.safe_load``: no tags, no objects), or ``None`` if unreadable."""
    try:
        if not path.is_file() or path.stat().st_size > _MAX_BYTES:
            return None
        data = read_yaml(path)  # lit_gpu.textfiles: budgeted plain YAML
    except (OSError, yaml.YAMLError, UnicodeDecodeError, RecursionError, BadFileError):
        return None
    return current(data) if isinstance(data, dict) else None  # classes that moved: their public names


def read_plain(path: str | os.PathLike) -> dict[str, Any] | None:
    """A run's saved config file as plain data (mappings, lists, scalars), or ``None`` if unreadable."""
    return _read_config(Path(path))


def run_signature(folder: str | os.PathLike) -> Signature | None:
    """The model/data classes named by the ``config.yaml`` of a ``version_N`` folder, or ``None`` (also for a
    ``config.yaml`` that is a link, as :func:`config_of_checkpoint` passes links over: lit_gpu writes none,
    and a run is chosen by its own files only)."""
    path = Path(folder) / CONFIG_NAME
    saved = None if path.is_symlink() else _read_config(path)
    return Signature.of(named(saved, recorded_classes(folder))) if saved is not None else None


# ---- the config of a checkpoint's run ---------------------------------------------------------------------
def config_of_checkpoint(ckpt_path: str | os.PathLike) -> Path | None:
    """``version_N/config.yaml`` for ``.../version_N/checkpoints/X.ckpt``, else ``None``.

    Only that layout: a checkpoint elsewhere (``DIR/sub/model.ckpt``) has no run config, whatever
    ``config.yaml`` lies in a parent folder. The checkpoint must really be in that run folder.
    """
    ckpt = Path(ckpt_path).absolute()
    found = run_of_checkpoint(ckpt)
    if found is None:
        return None
    if not inside(ckpt, found.path):
        return None
    saved = [p for p in saved_configs(found.path) if not p.is_symlink()]
    return saved[-1] if saved and saved[0].name == CONFIG_NAME else None  # the newest one ran last


def saved_configs(folder: str | os.PathLike) -> list[Path]:
    """``config.yaml`` and the ``config.<n>.yaml`` a continued run saved beside it, oldest first."""
    folder = Path(folder)
    if not (folder / CONFIG_NAME).is_file():
        return []
    numbered = []
    for path in folder.glob("config.*.yaml"):  # CONFIG_N_RE decides
        match = CONFIG_N_RE.match(path.name)
        if match and path.is_file():
            numbered.append((int(match.group(1)), path))
    return [folder / CONFIG_NAME] + [path for _, path in sorted(numbered)]


def root_of_checkpoint(ckpt_path: str | os.PathLike) -> Path | None:
    """``ROOT`` for a checkpoint at ``ROOT/NAME/version_N/checkpoints/X.ckpt``, else ``None``."""
    found = run_of_checkpoint(ckpt_path)
    return None if found is None else found.path.parent.parent


@dataclass
class RebuildFields:
    """What a run's ``config.yaml`` contributes to a rebuild: checked model and data specs, plain data."""

    source: Path
    model: dict[str, Any]
    data: dict[str, Any] | None
    left_out: list[str] = field(default_factory=list)
    fixed: tuple[str, ...] = ()  # the entries whose class the CLI fixed: passed as init args only

    def argv(self) -> list[str]:
        """``--model SPEC [--data SPEC]`` (the init args alone for a class the CLI fixed)."""
        found = []
        for key, spec in (("model", self.model), ("data", self.data)):
            if spec is not None:
                value = spec.get("init_args") or {} if key in self.fixed else spec
                found += [f"--{key}", json.dumps(value, default=str)]
        return found

    def describe(self) -> str:
        """``model RegressionModule(SimpleModel) and data SyntheticRegressionDataModule``."""
        sig = Signature.of({"model": self.model, "data": self.data})
        names = sig.describe().split(" + ")
        return f"model {names[0]}" + (f" and data {names[1]}" if len(names) > 1 else "")


def _looks_like_path(name: str, value: Any) -> bool:
    if _PATH_NAMES.search(name):
        return True
    if not isinstance(value, str):
        return False
    text = value.strip()
    return (
        os.path.isabs(text)
        or text.startswith(("~", "./", "../", "\\"))
        or "/../" in text
        or text.endswith("/..")
        or text == ".."
        or "://" in text
    )


def _plain_spec(node: Any, key: str, left_out: list[str]) -> dict[str, Any]:
    """``{"class_path", "init_args"}`` of ``node`` with path-like init args (recursively) left out."""
    spec: dict[str, Any] = {"class_path": node.get("class_path")}
    args = node.get("init_args")
    if isinstance(args, Mapping):
        kept: dict[str, Any] = {}
        for name, value in args.items():
            where = f"{key}.init_args.{name}"
            if _looks_like_path(str(name), value):
                left_out.append(where)
            elif isinstance(value, Mapping) and "class_path" in value:
                kept[name] = _plain_spec(value, where, left_out)
            else:
                kept[name] = value
        spec["init_args"] = kept
    elif args is not None:
        spec["init_args"] = args  # refused by the build check with its one line
    for extra in node:
        if extra not in ("class_path", "init_args"):
            left_out.append(f"{key}.{extra}")
    return spec


def rebuild_fields(
    config: str | os.PathLike, trust_modules: Iterable[str] = (), fixed: Mapping[str, str] | None = None
) -> RebuildFields:
    """The model and data of a run's ``config.yaml``, checked before anything is imported or built.

    ``fixed``: the classes the CLI itself was built with (:func:`built_classes`): for those the file gives
    init args only (its class is neither taken nor checked).

    Raises:
        LitGpuError: The file is unreadable, has no ``model`` spec, or names a class the build policy
            refuses (:class:`~lit_gpu.checkpoints.build.UnsafeBuildError`); nothing was imported.
    """
    from lit_gpu.checkpoints import build as build

    path = Path(config)
    saved = _read_config(path)
    if saved is None:
        raise LitGpuError(RUN_CONFIG_REFUSED.format(config=path, what="not a readable YAML mapping"))
    fixed = dict(fixed or {})
    for key, class_path in fixed.items():  # the CLI's own class: the file gives its init args only
        entry = saved.get(key)
        args = entry.get("init_args") if isinstance(entry, Mapping) and "class_path" in entry else entry
        saved[key] = {"class_path": class_path, "init_args": dict(args) if isinstance(args, Mapping) else {}}
    saved = named(saved, recorded_classes(path.parent))  # a run of a CLI built with model_class=
    model = saved.get("model")
    if not (isinstance(model, Mapping) and isinstance(model.get("class_path"), str)):
        raise LitGpuError(RUN_CONFIG_REFUSED.format(config=path, what="no model with a class_path in it"))
    left_out: list[str] = []
    specs: dict[str, dict[str, Any] | None] = {}
    for key, entry in (("model", model), ("data", saved.get("data"))):
        if not (isinstance(entry, Mapping) and isinstance(entry.get("class_path"), str)):
            specs[key] = None
            if entry is not None:
                left_out.append(key)
            continue
        specs[key] = _plain_spec(entry, key, left_out)
        if key in fixed:
            continue
        build.check(
            specs[key],
            build.lightning_base(key),
            source=str(path),
            key=key,
            trust_modules=trust_modules,
            loader=True,
        )
    model_spec, data_spec = specs["model"], specs["data"]
    return RebuildFields(path, model_spec, data_spec, left_out, tuple(fixed))


# ---- the choice: pure functions of what the runs and checkpoints say --------------------------------------
@dataclass(frozen=True)
class Candidate:
    """A run as the choice weighs it: the :class:`~lit_gpu.run.layout.Run` (the one run type) and what the
    store read of it.

    Not a second run type: the folder, its number and its owner are :attr:`run`'s. The rest are facts
    gathered by the store (its ``config.yaml``, the names of its checkpoints, its owner's name from the
    user database), so that :func:`order_runs` stays a pure function of values (facts in, choice out),
    tested without files.
    """

    run: Run
    owner: str  # who owns it (``bob (uid 1002)``), for the reason
    matches: bool | None  # its config.yaml names the same model and data; None: no readable config.yaml
    files: tuple[str, ...]  # non-empty {which}*.ckpt names
    model: str = ""  # what its config.yaml names, for the reason

    @property
    def name(self) -> str:
        """``version_N``."""
        return self.run.name

    @property
    def version(self) -> int:
        """``N``."""
        return self.run.version

    @property
    def mine(self) -> bool:
        """Owned by the user this process runs as."""
        return self.run.mine


@dataclass(frozen=True)
class Skipped:
    """A run passed over, and why."""

    name: str
    version: int
    reason: str


def order_runs(runs: Sequence[Candidate], which: str) -> tuple[list[Candidate], list[Skipped]]:
    """The runs that may hold the checkpoint, newest first, and those passed over with their reason."""
    usable: list[Candidate] = []
    skipped: list[Skipped] = []
    for run in sorted(runs, key=lambda r: r.version, reverse=True):
        if not run.mine:
            reason = f"owned by {run.owner}, not by you"
        elif run.matches is None:
            reason = "no config.yaml"
        elif not run.matches:
            reason = f"another model ({run.model})" if run.model else "another model"
        elif not run.files:
            reason = f"no {which}*.ckpt yet"
        else:
            usable.append(run)
            continue
        skipped.append(Skipped(run.name, run.version, reason))
    return usable, skipped


def skipped_newer(skipped: Sequence[Skipped], version: int, limit: int = 3) -> str:
    """``version_4: no last*.ckpt yet; version_3: owned by bob (uid 1002), not by you``, newest first."""
    newer = [s for s in skipped if s.version > version]
    text = "; ".join(f"{shown(s.name)}: {shown(s.reason)}" for s in newer[:limit])
    return text + (f"; and {len(newer) - limit} more" if len(newer) > limit else "")


@dataclass(frozen=True)
class CkptFacts:
    """What a checkpoint's header says (read once)."""

    path: Path
    complete: bool  # the file is whole (its zip directory reads)
    step: int | None = None
    epoch: int | None = None
    score: float | None = None  # the monitored value it was saved for (best checkpoints)
    logged_step: int | None = None  # the loggers' step of its last training step (metrics.csv's)


@dataclass(frozen=True)
class FileChoice:
    """The chosen checkpoint and why."""

    path: Path
    reason: str


def _facts(ckpt: CkptFacts) -> str:
    """``step S, epoch E`` as metrics.csv numbers that point (its last training step; epochs from 0)."""
    step = ckpt.logged_step if ckpt.logged_step is not None else None if ckpt.step is None else ckpt.step - 1
    return ckpt_point("?" if step is None else step, ckpt.epoch)


def choose_file(
    files: Sequence[CkptFacts], which: str, mode: str = "min", monitor: str | None = None
) -> FileChoice | None:
    """The ``{which}*.ckpt`` to use among one run's (or one folder's) files; ``None``: none is complete."""
    complete = [f for f in files if f.complete]
    if not complete:
        return None
    incomplete = len(files) - len(complete)
    left = f"; {incomplete} incomplete left out" if incomplete else ""

    def by_step(f: CkptFacts) -> tuple[int, bool]:
        return (-1 if f.step is None else f.step, f.path.name == f"{which}.ckpt")

    scored = [f for f in complete if f.score is not None]
    if which == "best" and scored:
        sign = -1.0 if mode == "max" else 1.0
        chosen = min(scored, key=lambda f: (sign * (f.score or 0.0), tuple(-x for x in by_step(f))))
        value = f"{shown(monitor)} {chosen.score:.6g}" if monitor else f"score {chosen.score:.6g}"
        reason = f"{_facts(chosen)}, {value}; the {mode} of {len(scored)} {which}*.ckpt{left}"
        return FileChoice(chosen.path, reason)
    chosen = max(complete, key=by_step)
    reason = f"{_facts(chosen)}; the highest step of {len(complete)} complete {which}*.ckpt{left}"
    return FileChoice(chosen.path, reason)


# ---- the store --------------------------------------------------------------------------------------------
_SPECIAL_CKPT = ("best", "last", "hpc", "registry")
_OPT_OUT = "pass --weights_only false"


@dataclass(frozen=True)
class Resolution:
    """What ``--ckpt_path`` of a sub-command resolved to; the CLI applies it (sets the key, prints ``line``).

    ``path`` is the checkpoint to use (``None``: train from scratch), ``header`` its header, read once
    here and handed on (the step a continued run logs from, the step an evaluation logs at), ``line`` the
    resolution line (values from files already passed through :func:`lit_gpu.messages.shown`), ``run``
    the run folder the checkpoint belongs to (found once, here; ``None``: not inside a run folder), which
    a continued fit or an evaluation writes into when it is yours. ``no_cluster_resume``: Lightning must
    not pick a cluster checkpoint by itself (the store passed them over). ``data``: the file's bytes the
    header was read from and checked: the CLI hands them to the trainer's checkpoint IO, whose load reads
    them (one read: a file replaced after the resolution is not what is loaded).
    """

    key: str
    path: str | None
    header: CheckpointHeader | None = None
    line: str | None = None
    run: layout.Run | None = None
    no_cluster_resume: bool = False
    data: io.BytesIO | None = field(default=None, repr=False, compare=False)


RESUMING_FROM = "resuming from {path} ({why})"
USING_CHECKPOINT = "using {path} ({why})"
RUN_CONFIG_REFUSED = "{config}: {what}; nothing was read from it; pass the run's settings with --config FILE"
NO_MATCHING_RUN = (
    "--ckpt_path {which}: no run of {model} with a {which}*.ckpt under {where} (there: {listing})"
)
NO_MATCHING_RUN_FIX = "; pass --ckpt_path FILE, or --trainer.default_root_dir DIR of that run"
NO_CKPT_IN_DIRPATH = "--ckpt_path {which}: no {which}*.ckpt in checkpoint.dirpath {dirpath}"
CKPT_MODEL_CLASS_DIFFERS = (
    "{path} was saved from the model class {recorded} but the config builds {configured}; the config "
    "decides which model is built and the checkpoint only fills its weights, so pass the config the "
    "checkpoint was trained with (its run's config.yaml) or a checkpoint of this model"
)
NO_MATCHING_RUN_FIT = "; training from scratch"
UNKNOWN_RUNS = (
    "; your {runs} hold a {which}*.ckpt but name no model class (runs of a model_class= CLI before runs "
    "recorded it): pass --ckpt_path FILE of the one to continue"
)
NO_MATCHING_RUN_NEW = ", or leave --ckpt_path out to start a new run"
_UNKNOWN = Signature((), None).describe()


def of_file(path: str | os.PathLike, trust: bool = False) -> Resolution:
    """A checkpoint named by a Python caller: its header read once and its run found (no config needed)."""
    return Resolution("ckpt_path", str(path), _read(path, trust), None, layout.run_of_checkpoint(path))


def check_checkpoint(path: str | os.PathLike, sub: Any, trust: bool = False) -> CheckpointHeader:
    """Read ``path`` once and check it may start the sub-command's run (see :func:`_check`)."""
    return _check(path, sub, _read(path, trust))


def _look(path: str | os.PathLike, which: str, trust: bool, hold: bool = False) -> CheckpointFacts:
    """The reader's one look at ``path`` (:func:`~lit_gpu.checkpoints.read.inspect`); a link leading out of
    its run folder is refused by name, before anything of it is read."""
    facts = inspect(path, within=runs_around(path), trust=trust, opt_out=_OPT_OUT, hold=hold)
    refuse_leaving(facts, which)
    return facts


def refuse_leaving(facts: CheckpointFacts, which: str) -> None:
    """Refuse a checkpoint the reader found leading out of its run folder (:func:`runs_around`): one line."""
    if facts.leaves is not None:
        text = CKPT_SYMLINK_LEAVES_RUN.format(
            which=which, path=facts.path, target=facts.target, run=facts.leaves
        )
        raise LitGpuError(text)


def _read(path: str | os.PathLike, trust: bool, which: str | None = None) -> CheckpointHeader:
    """The header of the whole checkpoint at ``path``, from one look (an unfinished file is its error)."""
    facts = _look(path, str(path) if which is None else which, trust)
    if facts.unfinished is not None:
        raise facts.unfinished
    return CheckpointHeader.from_facts(facts)


def _held(path: str | os.PathLike, sub: Any, trust: bool) -> tuple[CheckpointHeader, io.BytesIO | None]:
    """The checkpoint named, from one look that keeps its bytes, checked (:func:`_check`) on them."""
    facts = _look(path, str(path), trust, hold=True)
    if facts.unfinished is not None:
        raise facts.unfinished
    return _check(path, sub, CheckpointHeader.from_facts(facts)), facts.data


# ---- the checkpoint against the config --------------------------------------------------------------------
def _loaded_class(class_path: str) -> type | None:
    """The class ``class_path`` names if its module is already imported (never imports anything)."""
    module_name, _, name = class_path.rpartition(".")
    module = sys.modules.get(module_name)
    obj = vars(module).get(name) if isinstance(module, types.ModuleType) else None
    return obj if isinstance(obj, type) else None


def _check(path: str | os.PathLike, sub: Any, found: CheckpointHeader) -> CheckpointHeader:
    """The checkpoint may start this sub-command's run: a Lightning checkpoint of the config's model class.

    LightningCLI's ``_parse_ckpt_path`` would re-parse the checkpoint's ``hyper_parameters``
    (``_class_path`` included) over the user's config, so a checkpoint could choose the model class;
    here its hparams select nothing, and a recorded class that differs from the config's is refused.

    Raises:
        LitGpuError: Not a Lightning checkpoint, or one of another model class than the config's.
    """
    if found.problem is not None:
        raise LitGpuError(found.problem)
    recorded, configured = found.class_path, config_value(sub, "model.class_path")
    if recorded is None or configured is None or recorded == configured:
        return found
    wanted = _loaded_class(str(configured))
    if wanted is not None and _loaded_class(recorded) is wanted:
        return found  # another import path of the same class
    raise LitGpuError(
        CKPT_MODEL_CLASS_DIFFERS.format(path=path, recorded=shown(recorded), configured=configured)
    )


# ---- files of a run, or of a folder -----------------------------------------------------------------------
def _read_files(
    files: Sequence[Path], which: str, where: Where
) -> tuple[FileChoice | None, dict[Path, CheckpointHeader], io.BytesIO | None]:
    """The facts of ``files`` (each file opened once), the choice among them, and the chosen one's bytes.

    Each look keeps the file's bytes until a better file is seen: the chosen file's bytes are the ones
    its header was read from, and what the load reads (the chosen file is opened once).
    """
    facts = []
    headers: dict[Path, CheckpointHeader] = {}
    data: io.BytesIO | None = None
    for path in files:
        look = _look(path, which, where.trust, hold=True)  # a link out of its run: refused, nothing read
        if look.unfinished is not None:  # truncated, empty: a save that did not finish
            facts.append(CkptFacts(path, False))
            continue
        found = headers[path] = CheckpointHeader.from_facts(look)
        logged = None if found.log_step is None else found.log_step - 1  # its last step, as metrics.csv
        score = found.score(where.monitor)
        facts.append(CkptFacts(path, True, found.step, found.epoch, score, logged))
        chosen = choose_file(facts, which, where.mode, where.monitor)
        if chosen is not None and chosen.path == path:
            data = look.data  # the bytes of the file chosen so far; the earlier one's are let go
    chosen = choose_file(facts, which, where.mode, where.monitor)
    return chosen, headers, data


def _yours(files: Sequence[Path]) -> tuple[list[Path], str]:
    """The ``files`` this user owns (a link: its own owner), and a note naming the others passed over.

    The owner rule of the runs, for each file: another user's checkpoint in a shared ``checkpoint.dirpath``
    (or a group-writable run folder) is never read or chosen, however new it is.
    """
    me = layout.my_uid()
    mine = [path for path in files if layout.owner_of(path) == me]
    others = [
        f"{shown(path.name, limit=60)}: owned by {layout.owner_name(layout.owner_of(path))}, not by you"
        for path in files
        if path not in mine
    ]
    note = "; ".join(others[:3]) + (f"; and {len(others) - 3} more" if len(others) > 3 else "")
    return mine, f"; passed over {note}" if others else ""


def _candidate(run: layout.Run, wanted: Signature, which: str) -> Candidate:
    owner = layout.owner_name(run.owner)
    if not run.mine:  # another user's run: nothing of it is read
        return Candidate(run, owner, None, ())
    signature = run_signature(run.path)
    files = tuple(p.name for p in run.checkpoints(which))
    matches = None if signature is None else wanted.matches(signature)
    model = signature.describe() if signature is not None else ""
    return Candidate(run, owner, matches, files, model)


def _describe(run: layout.Run) -> str:
    """``version_3 (RegressionModule(SimpleModel) + ...; last.ckpt, best-...ckpt)``."""
    if not run.mine:
        return f"{run.name} (owned by {layout.owner_name(run.owner)}, not by you)"
    signature = run_signature(run.path)
    what = shown(signature.describe()) if signature else f"no {layout.CONFIG_NAME}"
    names = sorted({shown(p.name, limit=60) for p in run.checkpoints()})
    ckpts = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "") if names else "no checkpoint"
    return f"{run.name} ({what}; {ckpts})"


def _listing(runs: Sequence[layout.Run], limit: int = 4) -> str:
    """What is there, newest first, for a one-line message."""
    if not runs:
        return "no runs"
    newest = sorted(runs, key=lambda r: r.version, reverse=True)
    text = ", ".join(_describe(r) for r in newest[:limit])
    return text + (f" and {len(newest) - limit} more" if len(newest) > limit else "")


# ---- the one call -----------------------------------------------------------------------------------------
def resolve(
    config: Any, where: Where | None = None, classes: Mapping[str, str] | None = None
) -> Resolution | None:
    """What ``ckpt_path: last|best|FILE`` of the sub-command means, checked; nothing is changed or printed.

    ``last`` / ``best``: the run and the file chosen by :func:`order_runs` and :func:`choose_file`. With no
    such run, ``fit --ckpt_path last`` starts from scratch (as Lightning does; the line lists what is
    there) unless a run naming no model may be this one (``classes`` given: :data:`UNKNOWN_RUNS`);
    ``test``/``validate``/``predict`` need a checkpoint: an error. ``fit --ckpt_path best`` is
    Lightning's. ``FILE``: checked, its header read once. No ``--ckpt_path`` under SLURM:
    :func:`cluster_resolution`. ``where``: by default from the sub-command's config (:func:`of_config`);
    ``classes``: the CLI's own (:func:`built_classes`).

    Raises:
        LitGpuError: No matching checkpoint for ``test``/``validate``/``predict``, a symlink leaving its
            run, a pickle payload, or a checkpoint of another model class.
    """
    subcommand = config_value(config, "subcommand")
    if not subcommand:
        return None
    sub = config[subcommand]
    where = of_config(sub) if where is None else where
    key = f"{subcommand}.ckpt_path"
    which = config_value(config, key)
    if not which:
        return cluster_resolution(key, where, sub) if subcommand == "fit" else None
    if which not in ("last", "best"):
        if which in _SPECIAL_CKPT or "://" in str(which):
            return None
        found, data = _held(which, sub, where.trust)  # one look: the link, the file, its header; bytes kept
        return Resolution(key, str(which), found, run=layout.run_of_checkpoint(which), data=data)
    if which == "best" and subcommand == "fit":
        return None
    text = RESUMING_FROM if subcommand == "fit" else USING_CHECKPOINT
    if where.dirpath:
        files, passed = _yours(layout.checkpoints_in(where.dirpath, which))
        chosen, headers, data = _read_files(files, which, where)
        if chosen is None:
            raise LitGpuError(NO_CKPT_IN_DIRPATH.format(which=which, dirpath=where.dirpath) + passed)
        found = _check(chosen.path, sub, headers[chosen.path])
        why = f"{chosen.reason} in checkpoint.dirpath {shown(where.dirpath)}{passed}"
        line = text.format(path=shown(chosen.path), why=why)
        return Resolution(
            key, str(chosen.path), found, line, layout.run_of_checkpoint(chosen.path), data=data
        )
    wanted = Signature.of_parsed(sub, classes)
    runs = [run for parent in where.parents for run in layout.list_runs(parent)]
    candidates = [_candidate(run, wanted, which) for run in runs]
    usable, skipped = order_runs(candidates, which)
    for run in usable:
        files, passed = _yours(run.run.checkpoints(which))
        chosen, headers, data = _read_files(files, which, where)
        if chosen is None:
            skipped.append(Skipped(run.name, run.version, f"no complete {which}*.ckpt of yours"))
            continue
        found = _check(chosen.path, sub, headers[chosen.path])
        why = f"{chosen.reason}{passed}; run {run.name}, the newest of yours with {wanted.describe()}"
        newer = skipped_newer(sorted(skipped, key=lambda s: -s.version), run.version)
        if newer:
            why += f"; passed over newer {newer}"
        line = text.format(path=shown(chosen.path), why=why)
        return Resolution(key, str(chosen.path), found, line, run.run, data=data)
    message = NO_MATCHING_RUN.format(
        which=which,
        model=wanted.describe(),
        where=" or ".join(str(p) for p in where.parents),
        listing=_listing(runs),
    )
    unknown = [c.name for c in candidates if c.mine and c.files and c.model == _UNKNOWN]
    if unknown:  # runs a model_class= CLI wrote before runs recorded its classes: maybe this model's
        message += UNKNOWN_RUNS.format(runs=", ".join(shown(n) for n in unknown[-3:]), which=which)
    if subcommand != "fit":
        raise LitGpuError(message + NO_MATCHING_RUN_FIX)
    if unknown and classes:  # never from scratch beside a stopped run that may be this model's
        raise LitGpuError(message + NO_MATCHING_RUN_NEW)
    return Resolution(key, None, None, message + NO_MATCHING_RUN_FIT)


# ---- Lightning's cluster checkpoints ----------------------------------------------------------------------
CLUSTER_RESUMING = "the newest cluster checkpoint (hpc_ckpt_N.ckpt) of yours in {root}"
CLUSTER_FRESH = (
    "starting a new run, not resuming a cluster checkpoint: none in {root} is yours{passed}"
    " (under SLURM lit-gpu resumes only your own hpc_ckpt_N.ckpt)"
)


def _on_slurm() -> bool:
    from lightning.fabric.plugins.environments import SLURMEnvironment

    return SLURMEnvironment.detect()


def cluster_resolution(key: str, where: Where, sub: Any) -> Resolution | None:
    """A fit without ``--ckpt_path`` under SLURM: the newest ``hpc_ckpt_N.ckpt`` of the root that is yours.

    Lightning would take the newest one in ``trainer.default_root_dir`` whoever wrote it, and stops with a
    traceback on a name it cannot number (``hpc_ckpt_.ckpt``). Here another user's file is passed over
    with the reason, a malformed name is ignored, and the line says which: your own newest one resumes,
    or the run starts fresh (and Lightning is told not to look for one itself). ``None``: not under
    SLURM, or no cluster checkpoint there (Lightning's own behaviour, unchanged).
    """
    if where.root is None or not _on_slurm():
        return None
    found, odd = layout.cluster_checkpoints(where.root)
    if not found and not odd:
        return None
    me = layout.my_uid()
    mine = [path for _, path, owner in found if owner == me]
    newest = mine[-1].name if mine else None
    passed = [
        f"{shown(path.name)}: owned by {layout.owner_name(owner)}, not by you"
        for number, path, owner in found
        if owner != me and (newest is None or number > layout.cluster_checkpoint_number(newest))
    ]
    passed += [f"{shown(name)}: not a cluster checkpoint (hpc_ckpt_N.ckpt, a non-empty file)" for name in odd]
    note = ""
    if passed:
        note = (
            "; passed over "
            + "; ".join(passed[:3])
            + (f"; and {len(passed) - 3} more" if len(passed) > 3 else "")
        )
    root = shown(where.root)
    if not mine:
        return Resolution(
            key, None, line=CLUSTER_FRESH.format(root=root, passed=note), no_cluster_resume=True
        )
    found_header, data = _held(mine[-1], sub, where.trust)
    why = f"step {shown(found_header.step)}; {CLUSTER_RESUMING.format(root=root)}{note}"
    line = RESUMING_FROM.format(path=shown(mine[-1]), why=why)
    return Resolution(key, str(mine[-1]), found_header, line, None, data=data)


# ---- the CLI's one call: --ckpt_path applied to the config ------------------------------------------------
def checkpoint_dirs(config: Any) -> list[str]:
    """Glob patterns of folders where this config's runs keep checkpoints."""
    return layout.checkpoint_patterns(
        root_dir(config), run_parents(config), config_value(config, "checkpoint.dirpath")
    )


def resolve_ckpt_path(config: Any, cli: Any = None) -> Resolution | None:
    """``ckpt_path: last|best|FILE`` of the sub-command, resolved by the run store and applied.

    The resolved path replaces the config's value, ``weights_only`` left unset becomes ``True``
    (Lightning would read ``http(s)://`` checkpoints with ``False``), and the resolution line is printed.
    Returns the resolution (with the checkpoint's header, read once) for the run folder to use.
    ``cli``: the CLI, whose classes (:func:`built_classes`) name the model where its config names none.
    """
    subcommand = config_value(config, "subcommand")
    if not subcommand:
        return None
    sub = config[subcommand]
    if "weights_only" in sub and config_value(sub, "weights_only") is None:
        sub["weights_only"] = True
    resolution = resolve(config, classes=built_classes(cli))  # where the runs live: from the config
    if resolution is None:
        return None
    config[resolution.key] = resolution.path
    if resolution.line:
        messages.tell(resolution.line)
    return resolution


def hand_over(trainer: pl.Trainer, resolution: Resolution | None) -> Resolution | None:
    """The resolved checkpoint's bytes (read and checked once) given to ``trainer``'s checkpoint IO.

    Lightning's load of ``ckpt_path`` then reads those bytes, not the file again; the resolution keeps
    no copy (one held copy, dropped by the load). A custom checkpoint IO reads the file itself.
    """
    if resolution is None or resolution.data is None:
        return resolution
    from lit_gpu.checkpoints.io import AtomicCheckpointIO

    checkpoint_io = trainer.strategy.checkpoint_io
    if isinstance(checkpoint_io, AtomicCheckpointIO) and resolution.path is not None:
        checkpoint_io.hold(resolution.path, resolution.data)
    return dataclasses.replace(resolution, data=None)


def clean_run_folders(config: Any) -> None:
    """Remove temp files left by killed saves in every checkpoint folder of this config's runs.

    A fit starts a new ``version_N``; the litter is in the earlier runs' folders. Only files whose
    writer is gone are removed (``checkpoints.io.clean_stale_temp_files``), only in this user's runs
    (:func:`~lit_gpu.run.layout.checkpoint_folders`: lit_gpu deletes nothing outside a run; the user's own
    ``--checkpoint.dirpath`` is theirs to place anywhere).
    """
    from lit_gpu.checkpoints.io import clean_stale_temp_files

    dirpath = config_value(config, "checkpoint.dirpath")
    for folder in layout.checkpoint_folders(root_dir(config), run_parents(config), dirpath):
        for removed in clean_stale_temp_files(folder):
            messages.tell(messages.REMOVED_STALE_TEMP.format(file=removed))
