"""The folder a run writes into: a new ``version_N`` claimed, a run continued, an evaluation inside a run.

* :class:`RunFolder`: the folder lit_gpu's loggers share, claimed on global rank 0 when a run starts
  (:func:`lit_gpu.run.claims.claim_run`: a new ``version_N``, or the folder of a start of the same
  model that died before its first checkpoint), continued (a fit resumed from a checkpoint of one of
  your runs: :func:`continuation`), or, for ``validate``/``test``/``predict``, a new
  ``evaluations/<command>_<k>`` inside the run of the checkpoint evaluated (:func:`evaluation`);
* :func:`remove_if_unused` removes the folder of a run that failed before it logged or saved anything;
* :func:`continue_run`: a continued run's ``metrics.csv`` rows written after the checkpoint are dropped
  (and the TensorBoard events purged), unless ``--new_run true`` asked for a new folder.

:func:`continuation` and :func:`evaluation` take the checkpoint as the store resolved it
(:class:`lit_gpu.run.store.Resolution`: its header read once, its run found once); given a path (a
Python caller), they resolve it once with :func:`lit_gpu.run.store.of_file`.
"""

from __future__ import annotations

import csv
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning.fabric.utilities.rank_zero import rank_zero_only

from lit_gpu import messages
from lit_gpu.checkpoints.io import atomic_file
from lit_gpu.errors import LitGpuError
from lit_gpu.files.text import METRICS_FIX, read_csv
from lit_gpu.messages import shown
from lit_gpu.run import claim as claims
from lit_gpu.run import layout
from lit_gpu.run.config import Signature, run_signature
from lit_gpu.run.links import escaping_links, refuse_links_out_of
from lit_gpu.run.store import Resolution, of_file
from lit_gpu.run.where import root_dir, value

__all__ = [
    "Continuation",
    "Evaluation",
    "RunFolder",
    "continuation",
    "continue_run",
    "evaluation",
    "of_command",
    "remove_if_unused",
]


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


# ---- continuing a run in its folder ------------------------------------------------------------------
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
    header, rows = read_csv(path, fix=METRICS_FIX)  # lit_gpu.files.text: budgeted, one-line errors
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


# ---- the folder lit_gpu's loggers share ---------------------------------------------------------------
def _rank() -> int:
    return int(getattr(rank_zero_only, "rank", 0) or 0)


class RunFolder:
    """The folder lit_gpu's loggers share; claimed on first use, on global rank 0 only.

    Not a second run type: a run on disk is a :class:`~lit_gpu.run.layout.Run`. This is the loggers'
    handle on the folder a starting run *will* write, before it exists: Lightning's ``(root, name,
    version)`` triple, claimed lazily on rank 0 and adopted by the other ranks, and which may be an
    evaluation's folder (``evaluations/<command>_<k>``, not a run).

    The claim happens when a logger first needs its folder (Lightning creates the loggers'
    experiments on rank 0 when a run starts), so building a Trainer claims nothing, and other ranks
    never create folders: :class:`RunFolderSync` hands them rank 0's folder at setup.

    * a new run: :func:`lit_gpu.files.claims.claim_run` (with ``same_model``, the folder of a start of
      the same model that died before its first checkpoint is taken over); the run's lock is held
      until :meth:`release`;
    * ``continues``: a fit resumed from a checkpoint of one of your run folders uses that folder:
      rank 0 drops the ``metrics.csv`` rows logged after the checkpoint (:func:`continue_run`), and
      the TensorBoard logger purges those events;
    * ``evaluates``: a new ``evaluations/<command>_<k>`` in the evaluated run (or in
      ``ROOT/lit_gpu/evaluations/``), where metrics are logged at the checkpoint's step.

    Args:
        root: ``trainer.default_root_dir``.
        name: Folder between the root and the version folders.
        continues: The run folder to continue (:func:`continuation`); ``root`` and ``name`` then
            come from where that folder is.
        same_model: The model and data this run trains, to take over an abandoned start of it.
        evaluates: The evaluation this run is (:func:`evaluation`).
    """

    def __init__(
        self,
        root: str | os.PathLike,
        name: str = layout.NAME,
        continues: Continuation | None = None,
        same_model: Signature | None = None,
        evaluates: Evaluation | None = None,
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
        self.claimed: Path | None = None  # the folder this process created
        self.lock: claims.RunLock | None = None
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
                self.claimed = claims.claim_evaluation(self.root, self.evaluates.command)
                self._version = self.claimed.name
            else:
                claim = claims.claim_run(self.root, self.name, self._same_model_check())
                self.lock = claim.lock
                self.claimed = claim.folder  # a taken-over folder holds only start-up files again
                self._version = claim.folder.name
                if claim.taken_over:
                    messages.tell(TAKING_OVER.format(folder=shown(claim.folder)))
        return self._version

    def _continue(self, continues: Continuation) -> None:
        folder, step = continues.folder, continues.step
        claims.remove_dead_claims(folder.parent)  # a start killed while it claimed a folder
        self.lock = claims.RunLock.hold(folder)
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
    command: str | None, config: Any, resolution: Resolution | None, parsed: Any = None
) -> RunFolder:
    """The folder the loggers of ``command`` share, from its config and its resolved ``--ckpt_path``.

    ``validate``/``test``/``predict``: a new ``evaluations/<command>_<k>`` of the evaluated checkpoint's run
    (:func:`evaluation`); ``fit`` resumed from a checkpoint of one of your runs continues that run
    (:func:`continuation`) unless ``--new_run true``; otherwise a new run, which may take over the folder
    of a start of the same model (``parsed``: the parsed config naming it; ``config`` if not given) that
    died before its first checkpoint. One call hands the resolution on (docs/architecture.md, the route).
    """
    root = root_dir(config)
    if command in ("validate", "test", "predict"):
        return RunFolder(root, layout.NAME, evaluates=evaluation(command, resolution))
    continues = None
    if command == "fit" and not value(config, "new_run", False):
        continues = continuation(resolution)
    same_model = Signature.of_parsed(config if parsed is None else parsed)
    return RunFolder(root, layout.NAME, continues=continues, same_model=same_model)


TAKING_OVER = "taking over {folder}: its start stopped before its first checkpoint"
