"""The run store: which run and which checkpoint a command means, answered in one call, each header read once.

:func:`resolve` answers ``--ckpt_path last|best|FILE`` of a sub-command with a :class:`Resolution` (the
checkpoint, its :class:`~lit_gpu.run.header.CheckpointHeader`, its :class:`~lit_gpu.run.layout.Run`, the
line to print); it changes nothing and prints nothing: the CLI applies it.

* ``last`` / ``best``: this user's runs under ``trainer.default_root_dir`` whose ``config.yaml`` names the
  same model and data classes (compared as strings, nothing imported), newest first; in the run taken, the
  complete ``last*.ckpt`` of the highest step or the ``best*.ckpt`` of the best monitored value
  (:mod:`lit_gpu.run.choice`, pure). Another user's run is never chosen (a shared root is not trusted).
* ``FILE``: checked as a file, its header read once, its run found from where it lies.
* Under SLURM with no ``--ckpt_path``, Lightning resumes from the newest ``hpc_ckpt_N.ckpt`` in the root
  by itself: the store chooses it instead, by the same owner rules (:func:`cluster_resolution`).
* A checkpoint inside a run folder that is a symlink leading outside it is refused, naming its target; a
  pickle payload is one line; a checkpoint of another model class than the config's is refused
  (LightningCLI would re-parse its hyper-parameters over ``--config``).
"""

from __future__ import annotations

import io
import os
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lit_gpu import messages
from lit_gpu.checkpoints.read import CheckpointFacts, inspect
from lit_gpu.errors import LitGpuError
from lit_gpu.messages import shown
from lit_gpu.run import choice, layout
from lit_gpu.run.config import Signature, run_signature
from lit_gpu.run.header import CheckpointHeader
from lit_gpu.run.links import refuse_leaving, runs_around
from lit_gpu.run.where import Where, of_config

__all__ = [
    "Resolution",
    "Where",
    "check_checkpoint",
    "cluster_resolution",
    "of_file",
    "resolve",
]

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


def _read(path: str | os.PathLike, trust: bool, which: str | None = None) -> CheckpointHeader:
    """The header of the whole checkpoint at ``path``, from one look (an unfinished file is its error)."""
    facts = _look(path, str(path) if which is None else which, trust)
    if facts.unfinished is not None:
        raise facts.unfinished
    return CheckpointHeader.from_facts(facts)


CHANGED_WHILE_CHOSEN = (
    "{path} changed while it was being chosen (another process wrote it); run the command again"
)


def _held(
    path: str | os.PathLike, sub: Any, trust: bool, chosen_by: CheckpointHeader | None = None
) -> tuple[CheckpointHeader, io.BytesIO | None]:
    """The checkpoint to use, from one look that keeps its bytes, checked (:func:`_check`) on them.

    ``chosen_by``: the header it was chosen by (``last``/``best``); if the bytes now say otherwise, the
    file was replaced in between: one line.
    """
    facts = _look(path, str(path), trust, hold=True)
    if facts.unfinished is not None:
        raise facts.unfinished
    found = CheckpointHeader.from_facts(facts)
    if chosen_by is not None and found != chosen_by:
        raise LitGpuError(CHANGED_WHILE_CHOSEN.format(path=shown(path)))
    return _check(path, sub, found), facts.data


# ---- the checkpoint against the config ---------------------------------------------------------------
def _get(config: Any, key: str) -> Any:
    try:
        return config[key]
    except (KeyError, TypeError, AttributeError):
        return None


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
    recorded, configured = found.class_path, _get(sub, "model.class_path")
    if recorded is None or configured is None or recorded == configured:
        return found
    wanted = _loaded_class(str(configured))
    if wanted is not None and _loaded_class(recorded) is wanted:
        return found  # another import path of the same class
    raise LitGpuError(
        CKPT_MODEL_CLASS_DIFFERS.format(path=path, recorded=shown(recorded), configured=configured)
    )


# ---- files of a run, or of a folder ------------------------------------------------------------------
def _read_files(
    files: Sequence[Path], which: str, where: Where
) -> tuple[choice.FileChoice | None, dict[Path, CheckpointHeader]]:
    """The facts of ``files`` (each header read once), and the choice among them."""
    facts = []
    headers: dict[Path, CheckpointHeader] = {}
    for path in files:
        look = _look(path, which, where.trust)  # a link out of its run: refused before anything is read
        if look.unfinished is not None:  # truncated, empty: a save that did not finish
            facts.append(choice.CkptFacts(path, False))
            continue
        found = headers[path] = CheckpointHeader.from_facts(look)
        logged = None if found.log_step is None else found.log_step - 1  # its last step, as metrics.csv
        score = found.score(where.monitor)
        facts.append(choice.CkptFacts(path, True, found.step, found.epoch, score, logged))
    return choice.choose_file(facts, which, where.mode, where.monitor), headers


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


def _candidate(run: layout.Run, wanted: Signature, which: str) -> choice.Candidate:
    owner = layout.owner_name(run.owner)
    if not run.mine:  # another user's run: nothing of it is read
        return choice.Candidate(run, owner, None, ())
    signature = run_signature(run.path)
    files = tuple(p.name for p in run.checkpoints(which))
    matches = None if signature is None else wanted.matches(signature)
    model = signature.describe() if signature is not None else ""
    return choice.Candidate(run, owner, matches, files, model)


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


# ---- the one call ----------------------------------------------------------------------------------------
def resolve(config: Any, where: Where | None = None) -> Resolution | None:
    """What ``ckpt_path: last|best|FILE`` of the sub-command means, checked; nothing is changed or printed.

    ``last`` / ``best``: the run and the file chosen by :mod:`lit_gpu.run.choice` from what the runs and
    checkpoints say. With no such run, ``fit --ckpt_path last`` starts from scratch (as Lightning does;
    the line lists what is there); ``test``/``validate``/``predict`` need a checkpoint, so it is an
    error. ``fit --ckpt_path best`` is Lightning's. ``FILE``: checked, its header read once. No
    ``--ckpt_path`` under SLURM: :func:`cluster_resolution`. ``where``: where the runs live, by default
    from the sub-command's config (:func:`lit_gpu.run.where.of_config`).

    Raises:
        LitGpuError: No matching checkpoint for ``test``/``validate``/``predict``, a symlink leaving its
            run, a pickle payload, or a checkpoint of another model class.
    """
    subcommand = _get(config, "subcommand")
    if not subcommand:
        return None
    sub = config[subcommand]
    where = of_config(sub) if where is None else where
    key = f"{subcommand}.ckpt_path"
    which = _get(config, key)
    if not which:
        return cluster_resolution(key, where, sub) if subcommand == "fit" else None
    if which not in ("last", "best"):
        if which in _SPECIAL_CKPT or "://" in str(which):
            return None
        found, data = _held(which, sub, where.trust)  # one look: the link, the file, its header; bytes kept
        return Resolution(key, str(which), found, run=layout.run_of_checkpoint(which), data=data)
    if which == "best" and subcommand == "fit":
        return None
    text = messages.RESUMING_FROM if subcommand == "fit" else messages.USING_CHECKPOINT
    if where.dirpath:
        files, passed = _yours(layout.checkpoints_in(where.dirpath, which))
        chosen, headers = _read_files(files, which, where)
        if chosen is None:
            raise LitGpuError(NO_CKPT_IN_DIRPATH.format(which=which, dirpath=where.dirpath) + passed)
        found, data = _held(chosen.path, sub, where.trust, headers[chosen.path])
        why = f"{chosen.reason} in checkpoint.dirpath {shown(where.dirpath)}{passed}"
        line = text.format(path=shown(chosen.path), why=why)
        return Resolution(
            key, str(chosen.path), found, line, layout.run_of_checkpoint(chosen.path), data=data
        )
    wanted = Signature.of_parsed(sub)
    runs = [run for parent in where.parents for run in layout.list_runs(parent)]
    usable, skipped = choice.order_runs([_candidate(run, wanted, which) for run in runs], which)
    for run in usable:
        files, passed = _yours(run.run.checkpoints(which))
        chosen, headers = _read_files(files, which, where)
        if chosen is None:
            skipped.append(choice.Skipped(run.name, run.version, f"no complete {which}*.ckpt of yours"))
            continue
        found, data = _held(chosen.path, sub, where.trust, headers[chosen.path])
        why = f"{chosen.reason}{passed}; run {run.name}, the newest of yours with {wanted.describe()}"
        newer = choice.skipped_newer(sorted(skipped, key=lambda s: -s.version), run.version)
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
    if subcommand == "fit":
        return Resolution(key, None, None, message + NO_MATCHING_RUN_FIT)
    raise LitGpuError(message + NO_MATCHING_RUN_FIX)


# ---- Lightning's cluster checkpoints -----------------------------------------------------------------------
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
    line = messages.RESUMING_FROM.format(path=shown(mine[-1]), why=why)
    return Resolution(key, str(mine[-1]), found_header, line, None, data=data)
