"""The folder a run writes into: a new ``version_N`` claimed, a run continued, an evaluation inside a run.

* :class:`RunFolder`: the folder lit_gpu's loggers share, claimed on global rank 0 when a run starts
  (:func:`~lit_gpu.run.layout.claim_run`: a new ``version_N``, or the folder of a start of the same model
  that died before its first checkpoint), continued (a fit resumed from a checkpoint of one of your runs:
  :func:`continuation`; its ``metrics.csv`` rows after the checkpoint dropped, :func:`continue_run`), or,
  for ``validate``/``test``/``predict``, a new ``evaluations/<command>_<k>`` inside the run of the
  checkpoint evaluated (:func:`evaluation`); :func:`of_command` is the one call that hands it the
  resolution (:class:`~lit_gpu.run.store.Resolution`: header read once, run found once).
* :class:`RunConfigSaver`: Lightning's config saver; a continued run keeps its ``config.yaml`` and a
  changed config is saved beside it as ``config.<n>.yaml`` with one line naming the change.
* :func:`args_with_saved_config`: ``SUBCOMMAND --ckpt_path FILE`` alone rebuilds the run from the model and
  data of the checkpoint's ``version_N/config.yaml`` (checked, path-like init args left out).
"""

from __future__ import annotations

import csv
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import yaml
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.cli import SaveConfigCallback
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.checkpoints.io import atomic_file
from lit_gpu.errors import LitGpuError
from lit_gpu.messages import shown
from lit_gpu.run import layout
from lit_gpu.run.layout import (
    CHECKPOINTS,
    CLASSES_NAME,
    CONFIG_N_RE,
    CONFIG_NAME,
    RunLock,
    claim_evaluation,
    claim_run,
    config_value,
    escaping_links,
    refuse_escaping_link,
    refuse_links_out_of,
    remove_dead_claims,
    root_dir,
)
from lit_gpu.run.store import (
    RebuildFields,
    Resolution,
    Signature,
    config_of_checkpoint,
    of_file,
    read_plain,
    rebuild_fields,
    root_of_checkpoint,
    run_signature,
    saved_configs,
)
from lit_gpu.textfiles import METRICS_FIX, read_csv

CONFIG_CHANGED = "the config differs from {old} ({changes}); saved it beside as {new}"
SETTING_NOT_USED = (
    "{settings}: not used, the checkpoint's optimizer state restores {restored} (torch's load_state_dict); "
    "to apply the change, resume with --fresh_optimizer true (the checkpoint's weights and progress, the "
    "optimizers and schedulers started as the config builds them)"
)
CONFIG_EXISTS = (
    "{path} exists: an earlier run saved its config into the same folder. Aborting to avoid overwriting it "
    "(nothing ran); give this run its own folder (--trainer.default_root_dir DIR, or lit_gpu's loggers: "
    "a version_N folder per run), or remove the file"
)
NO_CONFIG_BESIDE = (
    "no config.yaml for {ckpt} ({looked}) to rebuild its run from; pass the run's settings with --config FILE"
)
CONTINUING_RUN = (
    "continuing the run in {folder} from step {step}{dropped}; --new_run true starts a new folder"
)
CONTINUING_OPTIMIZER_STEPS = " (the metrics' step: batches; global step {global_step} counts optimizer steps)"
CONTINUING_DROPPED = " (dropped {rows} metrics.csv rows logged after that step by the stopped attempt)"


def remove_if_unused(folder: str | os.PathLike) -> bool:
    """Remove a run folder that holds only start-up files (no metrics, no checkpoint); True if removed.

    Start-up files are ``config.yaml``, ``hparams.yaml``, TensorBoard event files, the run's lock and
    empty folders; anything else (``metrics.csv``, a checkpoint, a user's file) keeps the folder.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return False
    for path in folder.rglob("*"):
        if path.is_file() and not (layout.is_start_file(path.name) or path.name == layout.LOCK_NAME):
            return False
    shutil.rmtree(folder, ignore_errors=True)
    return not folder.exists()


# ---- continuing a run in its folder -----------------------------------------------------------------------
@dataclass(frozen=True)
class Continuation:
    """A fit resumed from a checkpoint of ``folder`` logs there again, from ``step`` on."""

    folder: Path
    step: int
    global_step: int | None = field(default=None, compare=False)  # optimizer steps; named if not ``step``


NOT_YOUR_RUN = "the run {folder} of {ckpt} is owned by {owner}, not by you: {what} goes to a folder of yours"
RUN_BEING_WRITTEN = (
    "not continuing the run in {folder}: another process is writing it; wait for it to end, "
    "or pass --new_run true to log into a new folder"
)


def _not_yours(run: layout.Run, ckpt_path: str | os.PathLike, what: str) -> None:
    owner = layout.owner_name(run.owner)
    messages.tell(
        NOT_YOUR_RUN.format(folder=shown(run.path), ckpt=shown(Path(ckpt_path).name), owner=owner, what=what)
    )


def _resolved(checkpoint: Resolution | str | os.PathLike | None) -> Resolution | None:
    """The checkpoint as the store resolved it; a path (a Python caller) is resolved here, once."""
    if checkpoint is None or isinstance(checkpoint, Resolution):
        return checkpoint if checkpoint is None or checkpoint.path else None
    if not Path(checkpoint).is_file():
        return None
    try:
        return of_file(checkpoint)
    except LitGpuError:  # the run's own load reports a bad file properly
        return Resolution("ckpt_path", str(checkpoint), None, None, layout.run_of_checkpoint(checkpoint))


def continuation(checkpoint: Resolution | str | os.PathLike | None) -> Continuation | None:
    """How a fit resumed from the resolved ``checkpoint`` continues its run, or ``None`` (a new folder).

    Only a checkpoint inside one of *your* run folders (``version_N/checkpoints/``) continues it (another
    user's run in a shared root is never written to: one line says so). The step comes from its header
    (read once by the store; tensors are not loaded).
    """
    checkpoint = _resolved(checkpoint)
    if checkpoint is None or not Path(str(checkpoint.path)).is_file():
        return None
    run = checkpoint.run
    if run is None:
        return None
    if not run.mine:
        _not_yours(run, checkpoint.path, "this fit")
        return None
    refuse_links_out_of(run.path)  # hparams.yaml, metrics.csv, config.N.yaml... are written there
    header = checkpoint.header
    step = header.log_step if header is not None else None
    global_step = header.step if header is not None else None
    return None if step is None else Continuation(run.path, step, global_step)


@dataclass(frozen=True)
class Evaluation:
    """A ``validate``/``test``/``predict`` run: its ``command``, the run it evaluates, the step it logs at.

    ``run`` is the run folder of the checkpoint evaluated (``None``: not one of your runs; the
    evaluation then goes to ``ROOT/lit_gpu/evaluations/``); ``step`` is where its metrics are logged:
    the step of the checkpoint's last training batch on the run's curves (its global step - 1, as the
    training rows are logged), where ``lit-gpu plot`` marks them.
    """

    command: str
    run: Path | None = None
    step: int | None = None


def evaluation(command: str, checkpoint: Resolution | str | os.PathLike | None) -> Evaluation:
    """Where the evaluation of the resolved ``checkpoint`` writes: inside its run when the run is yours."""
    checkpoint = _resolved(checkpoint)
    if checkpoint is None or not Path(str(checkpoint.path)).is_file():
        return Evaluation(command)
    step = checkpoint.header.step if checkpoint.header is not None else None
    # the training curves log a batch's metrics at its index: the checkpoint's last batch is step - 1
    step = max(step - 1, 0) if step is not None else None
    run = checkpoint.run
    if run is None:
        return Evaluation(command, None, step)
    if not run.mine:
        _not_yours(run, checkpoint.path, "this " + command)
        return Evaluation(command, None, step)
    if escaping_links(run.path):  # evaluations/ would be written through a link: not in that run
        return Evaluation(command, None, step)
    return Evaluation(command, run.path, step)


def continue_run(run_dir: str | os.PathLike, step: int) -> int:
    """Prepare ``run_dir`` for a fit that logs again from ``step``: drop later ``metrics.csv`` rows.

    Rows with a step at or after ``step`` were written by an attempt that was stopped after the
    checkpoint was saved; the resumed fit logs those steps again. The file is rewritten atomically.
    TensorBoard events are purged by the writer (``purge_step``). Call on global rank 0 only.

    Returns:
        The number of rows dropped.
    """
    path = Path(run_dir) / layout.METRICS_NAME
    if not path.is_file():
        return 0
    header, rows = read_csv(path, fix=METRICS_FIX)  # lit_gpu.textfiles: budgeted, one-line errors
    kept = [row for row in rows if not _step_at_or_after(row.get("step"), step)]
    if len(kept) == len(rows):
        return 0
    with atomic_file(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(kept)
    return len(rows) - len(kept)


def _step_at_or_after(cell: str | None, step: int) -> bool:
    try:
        return float(cell or "") >= step
    except ValueError:
        return False


# ---- the folder lit_gpu's loggers share -------------------------------------------------------------------
def _rank() -> int:
    return int(getattr(rank_zero_only, "rank", 0) or 0)


class RunFolder:
    """The folder lit_gpu's loggers share; claimed on first use, on global rank 0 only.

    Not a second run type (a run on disk is a :class:`~lit_gpu.run.layout.Run`): the loggers' handle on
    the folder a starting run *will* write, Lightning's ``(root, name, version)``, claimed when a logger
    first needs it (building a Trainer claims nothing) and adopted by the other ranks at setup
    (:class:`~lit_gpu.run.loggers.RunFolderSync`). A new run: :func:`~lit_gpu.run.layout.claim_run` (an
    abandoned start of ``same_model`` taken over), its lock held until :meth:`release`; ``continues``:
    the checkpoint's run, its ``metrics.csv`` rows after the checkpoint dropped (:func:`continue_run`)
    and TensorBoard's events purged; ``evaluates``: a new ``evaluations/<command>_<k>``.

    Args:
        root: ``trainer.default_root_dir``.
        name: Folder between the root and the version folders.
        continues: The run folder to continue (:func:`continuation`); ``root`` and ``name`` then
            come from where that folder is.
        same_model: The model and data this run trains, to take over an abandoned start of it.
        evaluates: The evaluation this run is (:func:`evaluation`).
        classes: The classes the CLI was built with where its config names none
            (:func:`~lit_gpu.run.store.built_classes`): recorded in the run's ``classes.yaml``.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        name: str = layout.NAME,
        continues: Continuation | None = None,
        same_model: Signature | None = None,
        evaluates: Evaluation | None = None,
        classes: Mapping[str, str] | None = None,
    ) -> None:
        if continues is not None:
            root, name = continues.folder.parent.parent, continues.folder.parent.name
        elif evaluates is not None:
            root = evaluates.run if evaluates.run is not None else Path(root) / name
            name = layout.EVALUATIONS
        self.root = str(root)
        self.name = name
        self.continues = continues
        self.same_model = same_model
        self.evaluates = evaluates
        self.classes = dict(classes or {})
        self.claimed: Path | None = None  # the folder this process created
        self.lock: RunLock | None = None
        self._version: str | None = None

    @property
    def fixed_step(self) -> int | None:
        """The step an evaluation's metrics are logged at (the checkpoint's), else ``None``."""
        return self.evaluates.step if self.evaluates is not None else None

    @property
    def version(self) -> str:
        """``version_N``; claims (or continues) the folder on rank 0 the first time it is asked for."""
        if self._version is None:
            rank = _rank()
            if rank != 0:
                return f"version_pending_rank{rank}"  # replaced by rank 0's at setup; never created
            if self.continues is not None:
                self._continue(self.continues)
            elif self.evaluates is not None:
                self.claimed = claim_evaluation(self.root, self.evaluates.command)
                self._version = self.claimed.name
            else:
                claim = claim_run(self.root, self.name, self._same_model_check())
                self.lock = claim.lock
                self.claimed = claim.folder  # a taken-over folder holds only start-up files again
                self._version = claim.folder.name
                if claim.taken_over:
                    messages.tell(TAKING_OVER.format(folder=shown(claim.folder)))
            if self.evaluates is None:
                self._record_classes(self.path)
        return self._version

    def _record_classes(self, folder: Path) -> None:
        """``classes.yaml``: the classes a ``model_class=`` CLI was built with (its config.yaml names none),
        so that ``--ckpt_path last|best`` finds the run and export rebuilds it."""
        if self.classes and not os.path.lexists(folder / CLASSES_NAME):
            with atomic_file(folder / CLASSES_NAME, "w") as f:
                yaml.safe_dump(self.classes, f)

    def _continue(self, continues: Continuation) -> None:
        folder, step = continues.folder, continues.step
        remove_dead_claims(folder.parent)  # a start killed while it claimed a folder
        self.lock = RunLock.hold(folder)
        if self.lock is None:
            raise LitGpuError(RUN_BEING_WRITTEN.format(folder=shown(folder)))
        dropped = continue_run(folder, step)
        self._version = folder.name
        note = CONTINUING_DROPPED.format(rows=dropped) if dropped else ""
        if continues.global_step is not None and continues.global_step not in (step, step - 1):
            note = CONTINUING_OPTIMIZER_STEPS.format(global_step=continues.global_step) + note
        messages.tell(CONTINUING_RUN.format(folder=shown(folder), step=step, dropped=note))

    def _same_model_check(self) -> Any:
        wanted = self.same_model
        if wanted is None or not wanted.model:
            return None

        def same(folder: Path) -> bool:
            saved = run_signature(folder)
            return saved is None or wanted.matches(saved)  # no config.yaml: killed before it was written

        return same

    @property
    def path(self) -> Path:
        """The run folder."""
        return Path(self.root) / self.name / self.version

    def adopt(self, version: str, root: str | None = None, name: str | None = None) -> None:
        """Use the folder another rank claimed (or continues)."""
        self._version = version
        self.root = self.root if root is None else root
        self.name = self.name if name is None else name

    def remove_if_unused(self) -> bool:
        """Remove the folder this process claimed if the run left nothing in it (a failed start)."""
        removed = self.claimed is not None and remove_if_unused(self.claimed)
        self.release()
        return removed

    def release(self) -> None:
        """The run ended here (done, stopped or failed): let go of its lock, removing the lock file."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def of_command(
    command: str | None,
    config: Any,
    resolution: Resolution | None,
    parsed: Any = None,
    classes: Mapping[str, str] | None = None,
) -> RunFolder:
    """The folder the loggers of ``command`` share, from its config and its resolved ``--ckpt_path``.

    ``validate``/``test``/``predict``: a new ``evaluations/<command>_<k>`` of the evaluated checkpoint's run
    (:func:`evaluation`); ``fit`` resumed from a checkpoint of one of your runs continues that run
    (:func:`continuation`) unless ``--new_run true``; otherwise a new run, which may take over the folder
    of a start of the same model (``parsed``: the parsed config naming it; ``config`` if not given) that
    died before its first checkpoint. One call hands the resolution on (docs/architecture.md, the route).
    ``classes``: the classes the CLI was built with (:func:`~lit_gpu.run.store.built_classes`).
    """
    root = root_dir(config)
    if command in ("validate", "test", "predict"):
        return RunFolder(root, layout.NAME, evaluates=evaluation(command, resolution))
    continues = None
    if command == "fit" and not config_value(config, "new_run", False):
        continues = continuation(resolution)
    same_model = Signature.of_parsed(config if parsed is None else parsed, classes)
    return RunFolder(root, layout.NAME, continues=continues, same_model=same_model, classes=classes)


TAKING_OVER = "taking over {folder}: its start stopped before its first checkpoint"


# ---- config.yaml of a run folder: saved when the run starts; a continued run keeps it ---------------------
# how a run was started and where it lives, not what it trains
_IGNORED_CONFIG_KEYS = ("ckpt_path", "weights_only", "new_run", "free_gpus", "trainer.default_root_dir")


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, Mapping) and node:
        flat: dict[str, Any] = {}
        for key, value in node.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: node}


def config_changes(old: Mapping[str, Any], new: Mapping[str, Any], limit: int = 3) -> list[str]:
    """What differs between two saved configs, as ``key: old -> new`` (at most ``limit``, then a count).

    Where a run lives and how it was started (``ckpt_path``, ``weights_only``, ``new_run``,
    ``free_gpus``, ``trainer.default_root_dir``) are not changes of the run.
    """
    changed = changed_values(old, new)
    keys = list(changed)
    shown = [f"{k}: {changed[k][0]!r} -> {changed[k][1]!r}" for k in keys[:limit]]
    if len(keys) > limit:
        shown.append(f"and {len(keys) - limit} more")
    return shown


def changed_values(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Each key (dotted) whose value differs between two saved configs: ``(old, new)``."""
    before, after = _flatten(old), _flatten(new)
    return {
        k: (before.get(k), after.get(k))
        for k in dict.fromkeys([*before, *after])
        if before.get(k) != after.get(k) and not k.startswith(_IGNORED_CONFIG_KEYS)
    }


def _plain(value: Any) -> Any:
    """A param-group value as the config writes it (a tensor's number, a tuple as a list)."""
    value = value.tolist() if hasattr(value, "tolist") else value
    return [_plain(v) for v in value] if isinstance(value, list | tuple) else value


def settings_not_used(changed: Mapping[str, tuple[Any, Any]], trainer: pl.Trainer) -> str | None:
    """The line for changed config values that the restored optimizer state replaced, or ``None``.

    A changed key whose last part names a param-group setting (``lr``, ``weight_decay``, ``betas``; a
    schedule's ``initial_lr`` stands for ``lr``) whose restored value is not the config's: torch's
    ``load_state_dict`` takes the saved groups' values. Read after the restore (``on_train_start``)."""
    groups = [group for optimizer in trainer.optimizers for group in optimizer.param_groups]
    settings, restored = [], []
    for key, (_, new) in changed.items():
        name = key.rsplit(".", 1)[-1]
        held = [
            group.get("initial_lr", group.get("lr")) if name == "lr" else group.get(name) for group in groups
        ]
        held = [_plain(v) for v in held if v is not None]
        if (
            new is None
            or name in ("params", "param_names")
            or not held
            or all(v == _plain(new) for v in held)
        ):
            continue
        settings.append(f"{key} {new!r}")
        restored.append(f"{name} {', '.join(dict.fromkeys(repr(v) for v in held))}")
    if not settings:
        return None
    return SETTING_NOT_USED.format(settings="; ".join(settings), restored="; ".join(restored))


def next_config_path(folder: str | os.PathLike) -> Path:
    """``config.<n>.yaml`` with the next free ``n`` (from 1) in a run folder."""
    saved = saved_configs(folder)
    numbers = [int(m.group(1)) for p in saved if (m := CONFIG_N_RE.match(p.name))]
    return Path(folder) / f"config.{max(numbers, default=0) + 1}.yaml"


def continued_run(trainer: pl.Trainer) -> RunFolder | None:
    """The run folder lit_gpu's loggers continue, or ``None`` (a new folder, or other loggers)."""
    for logger in trainer.loggers:
        run = getattr(logger, "run", None)
        if isinstance(run, RunFolder):
            return run if run.continues is not None else None
    return None


class RunConfigSaver(SaveConfigCallback):
    """Lightning's config saver; a continued run folder (or a folder evaluations share) keeps ``config.yaml``,
    a change is saved beside."""

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # a continued run keeps its config.yaml; so does a folder an evaluation shares with earlier ones
        # (validate/test/predict with the loggers off): a changed config goes beside it, never over it
        beside = (
            continued_run(trainer) is not None
            or (stage == "fit" and self._resumes_its_own_folder(trainer))
            or (stage != "fit" and not self.overwrite)
        )
        if self.already_saved or not self.save_to_log_dir or not beside:
            try:
                super().setup(trainer, pl_module, stage)
            except RuntimeError as err:  # Lightning's stop before an earlier run's config.yaml: one line
                if "Aborting to avoid overwriting" not in str(err):
                    raise
                path = os.path.join(str(trainer.log_dir), self.config_filename)
                raise LitGpuError(CONFIG_EXISTS.format(path=path)) from err
            return
        log_dir = trainer.log_dir  # broadcast from rank 0, as Lightning's saver does
        if trainer.is_global_zero:
            self._save_beside(Path(str(log_dir)))
            self.save_config(trainer, pl_module, stage)
        self.already_saved = trainer.strategy.broadcast(True)

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A changed optimizer setting the restored optimizer state replaced: one line (not with
        ``--fresh_optimizer``: then the optimizers are the config's)."""
        changed = getattr(self, "changed", None)
        if not changed or getattr(trainer.strategy.checkpoint_io, "fresh_optimizer", False) is True:
            return
        if line := settings_not_used(changed, trainer):
            messages.tell(line)

    def _resumes_its_own_folder(self, trainer: pl.Trainer) -> bool:
        """A fit resumed from a checkpoint inside the folder it logs into (a sweep trial continued, a logger
        with a fixed ``version``): that run, continued, whichever loggers write it."""
        ckpt = self.config.get("ckpt_path") if hasattr(self.config, "get") else None
        log_dir = trainer.log_dir
        if not isinstance(ckpt, str | os.PathLike) or not ckpt or log_dir is None:
            return False
        try:
            return Path(ckpt).resolve().is_relative_to(Path(log_dir).resolve())
        except (OSError, ValueError):
            return False

    def _save_beside(self, folder: Path) -> None:
        saved = saved_configs(folder)
        if not saved:
            folder.mkdir(parents=True, exist_ok=True)
            self.parser.save(self.config, folder / self.config_filename, skip_none=False, overwrite=True)
            return
        old = read_plain(saved[-1]) or {}
        new = yaml.safe_load(self.parser.dump(self.config, skip_none=False)) or {}  # as config.yaml is saved
        self.changed = changed_values(old if isinstance(old, dict) else {}, new)
        changes = config_changes(old if isinstance(old, dict) else {}, new)
        if not changes:
            return
        path = next_config_path(folder)
        self.parser.save(self.config, path, skip_none=False, overwrite=False, multifile=self.multifile)
        messages.tell(CONFIG_CHANGED.format(old=saved[-1].name, changes="; ".join(changes), new=path.name))


# ---- SUBCOMMAND --ckpt_path FILE alone: the model and data of the checkpoint's run put before the flags ----
SUBCOMMANDS = ("fit", "validate", "test", "predict")


def _option_value(argv: Sequence[str], option: str) -> str | None:
    """Value of the last ``--option VALUE`` / ``--option=VALUE`` in ``argv``."""
    value = None
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(option + "="):
            value = arg.split("=", 1)[1]
    return value


def args_with_saved_config(
    argv: Sequence[str], trust_modules: Iterable[str] = (), fixed: Mapping[str, str] | None = None
) -> tuple[list[str], RebuildFields | None]:
    """Put the model and data of the checkpoint's run config in front of the user's flags.

    For ``SUBCOMMAND --ckpt_path FILE`` with neither ``--config`` nor ``--model``: ``--model`` and
    ``--data`` from ``version_N/config.yaml`` (checked, path-like init args left out) and
    ``--trainer.default_root_dir ROOT`` from where the checkpoint lies; flags given on the command line
    come later, so they override. Returns the new argv and what was taken (``None``: argv unchanged).
    ``fixed``: the classes the CLI was built with (``model_class=``): their init args only are taken.

    Raises:
        LitGpuError: The checkpoint is not in a run folder with a ``config.yaml``, or the config names
            something the build policy refuses.
    """
    argv = list(argv)
    sub_index = next((i for i, a in enumerate(argv) if a in SUBCOMMANDS), None)
    if sub_index is None:
        return argv, None
    rest = argv[sub_index + 1 :]
    if any(a in ("-c", "--config", "--model") or a.startswith(("--config=", "--model=")) for a in argv):
        return argv, None
    ckpt = _option_value(rest, "--ckpt_path")
    if not ckpt or not Path(ckpt).is_file():
        return argv, None
    refuse_escaping_link(ckpt, ckpt)
    config = config_of_checkpoint(ckpt)
    if config is None:
        beside = Path(ckpt).parent.parent / CONFIG_NAME
        looked = f"looked for {beside} in a ROOT/NAME/version_N/{CHECKPOINTS} layout"
        raise LitGpuError(NO_CONFIG_BESIDE.format(ckpt=ckpt, looked=looked))
    fields = rebuild_fields(config, trust_modules, fixed)
    inserted = fields.argv()
    root = root_of_checkpoint(ckpt)
    if root is not None:
        inserted += ["--trainer.default_root_dir", str(root)]
    return argv[: sub_index + 1] + inserted + rest, fields
