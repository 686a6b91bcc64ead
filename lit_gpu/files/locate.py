"""Which run, which checkpoint: ``--ckpt_path last|best|FILE``, answered in one place, the file read once.

* ``last`` / ``best``: the newest ``{which}*.ckpt`` among runs under ``trainer.default_root_dir`` whose
  saved ``config.yaml`` names the same model and data classes (:func:`pick_checkpoint`; the configs are
  compared as strings, nothing is imported), or in ``checkpoint.dirpath`` when one is set.
* ``FILE``: checked as a file; with neither ``--config`` nor ``--model`` the run is rebuilt from the
  model and data of its ``version_N/config.yaml`` (:func:`args_with_saved_config`), nothing else.
* A checkpoint inside a run folder that is a symlink leading outside it is refused, naming its target.
* The chosen checkpoint is read once (weights-only, tensors memory-mapped; :func:`check_checkpoint`):
  a pickle payload is one line, its step and epoch are told, and a checkpoint of another model class
  than the config's is refused (LightningCLI would re-parse its hyper-parameters over ``--config``).
"""

from __future__ import annotations

import glob
import json
import os
import stat
import sys
import time
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.files.checkpoint import check_checkpoint_file, inside, read_header
from lit_gpu.files.run_config import (
    CONFIG_NAME,
    RebuildFields,
    Signature,
    config_of_checkpoint,
    rebuild_fields,
    root_of_checkpoint,
    run_signature,
)

__all__ = [
    "Pick",
    "Run",
    "SUBCOMMANDS",
    "args_with_saved_config",
    "escaping_links",
    "refuse_links_out_of",
    "check_checkpoint",
    "explain_choice",
    "find_last_checkpoint",
    "find_runs",
    "pick_checkpoint",
    "resolve",
]

SUBCOMMANDS = ("fit", "validate", "test", "predict")
_SPECIAL_CKPT = ("best", "last", "hpc", "registry")
_VERSION_PREFIX = "version_"


def _version_folders(parent: Path) -> list[Path]:
    if not parent.is_dir():
        return []
    found = [
        p
        for p in parent.iterdir()
        if p.is_dir()
        and p.name[len(_VERSION_PREFIX) :].isdigit()
        and p.name.startswith(_VERSION_PREFIX)
        and inside(p, parent)  # a version_N planted as a link to a folder elsewhere is not a run here
    ]
    return sorted(found, key=lambda p: int(p.name[len(_VERSION_PREFIX) :]))


# ---- symlinks that leave a run ----------------------------------------------------------------------
def refuse_escaping_link(path: str | os.PathLike, which: str) -> None:
    """Refuse a checkpoint in ``.../version_N/checkpoints/`` whose real path leaves ``version_N``.

    Raises:
        LitGpuError: Naming the link and its target.
    """
    ckpt = Path(path).absolute()
    for run in (ckpt.parent.parent, ckpt.parent):
        if run.name.startswith(_VERSION_PREFIX) and not inside(ckpt, run):
            raise LitGpuError(
                messages.CKPT_SYMLINK_LEAVES_RUN.format(
                    which=which, path=path, target=os.path.realpath(ckpt), run=run
                )
            )


def escaping_links(run: str | os.PathLike) -> list[str]:
    """Entries of a run folder (and of its ``checkpoints/``) that are symlinks leading outside it.

    A fit that continues a run folder writes there (``hparams.yaml``, ``metrics.csv``, ``config.N.yaml``,
    checkpoints); through such a link it would write outside. Dangling links count (their target is
    where a write would go), and so do files of the folder with more than one name (hard links: a
    write in place, as Lightning writes ``hparams.yaml``, would change the other name too). The run
    folder may be reached through links (``runs/`` on a scratch disk), but a ``version_N`` that is
    itself a link out of its ``ROOT/NAME`` is named. Returns ``"name -> target"`` texts.
    """
    folder = Path(run)
    found = []
    if folder.name.startswith(_VERSION_PREFIX) and not inside(folder, folder.parent):
        found.append(f"{folder.name} itself -> {os.path.realpath(folder)}")  # a planted version_N link
    for parent in (folder, folder / "checkpoints"):
        try:
            entries = sorted(parent.iterdir()) if parent.is_dir() else []
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink() and not inside(entry, folder):
                found.append(f"{entry.relative_to(folder)} -> {os.path.realpath(entry)}")
            elif parent == folder and (names := _names(entry)) > 1:  # hparams.yaml & co.: written in place
                found.append(f"{entry.name} (a hard link: {names} names)")
    return found


def _names(path: Path) -> int:
    """How many names (hard links) a regular file has; 0 for links, folders and the missing."""
    try:
        info = path.lstat()
    except OSError:
        return 0
    return info.st_nlink if stat.S_ISREG(info.st_mode) else 0


def refuse_links_out_of(
    run: str | os.PathLike, message: str = messages.RUN_FOLDER_LINKS_OUT, **fields: Any
) -> None:
    """Refuse to continue (write into) a run folder holding links that lead outside it.

    Args:
        run: The run folder.
        message: The refusal, formatted with ``folder``, ``links`` and ``fields`` (a sweep trial
            says it with its number and its own fix).

    Raises:
        LitGpuError: One line naming the links and the fix.
    """
    links = escaping_links(run)
    if links:
        shown = ", ".join(links[:3]) + (f" and {len(links) - 3} more" if len(links) > 3 else "")
        raise LitGpuError(message.format(folder=run, links=shown, **fields))


# ---- finding earlier runs ---------------------------------------------------------------------------
@dataclass
class Run:
    """A ``version_N`` folder with what it holds."""

    folder: Path
    signature: Signature | None
    checkpoints: list[Path] = field(default_factory=list)

    def newest(self, prefix: str) -> Path | None:
        """Newest non-empty ``{prefix}*.ckpt`` of this run."""
        found = [p for p in self.checkpoints if p.name.startswith(prefix)]
        return max(found, key=lambda p: p.stat().st_mtime) if found else None

    def describe(self) -> str:
        """``version_3 (RegressionModule(SimpleModel) + ...; last.ckpt, best-...ckpt)``."""
        what = self.signature.describe() if self.signature else f"no {CONFIG_NAME}"
        names = sorted({p.name for p in self.checkpoints})
        ckpts = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "") if names else "no checkpoint"
        return f"{self.folder.name} ({what}; {ckpts})"


def find_runs(parent: str | os.PathLike) -> list[Run]:
    """Every ``version_N`` run folder in ``parent`` (``ROOT/lit_gpu``), by ``N``."""
    runs = []
    for folder in _version_folders(Path(parent)):
        ckpt_dir = folder / "checkpoints"
        ckpts = [p for p in ckpt_dir.glob("*.ckpt") if p.is_file() and p.stat().st_size > 0]
        runs.append(Run(folder, run_signature(folder), ckpts))
    return runs


@dataclass
class Pick:
    """The checkpoint chosen for ``last``/``best`` (or ``None``) and every run that was looked at."""

    checkpoint: Path | None
    run: Run | None
    looked_at: list[Run]
    parents: list[Path]

    def listing(self, limit: int = 4) -> str:
        """What is there, newest first, for a one-line message."""
        if not self.looked_at:
            return "no runs"
        newest = sorted(self.looked_at, key=_run_age, reverse=True)
        text = ", ".join(r.describe() for r in newest[:limit])
        return text + (f" and {len(newest) - limit} more" if len(newest) > limit else "")


def _run_age(run: Run) -> float:
    times = [p.stat().st_mtime for p in run.checkpoints]
    return max(times) if times else run.folder.stat().st_mtime


def pick_checkpoint(parents: Iterable[str | os.PathLike], signature: Signature, which: str = "last") -> Pick:
    """Newest ``{which}*.ckpt`` among runs in ``parents`` whose saved config matches ``signature``."""
    parents = [Path(p) for p in parents]
    looked_at = [run for parent in parents for run in find_runs(parent)]
    best: tuple[float, Path, Run] | None = None
    for run in looked_at:
        if run.signature is None or not signature.matches(run.signature):
            continue
        ckpt = run.newest(which)
        if ckpt is not None and (best is None or ckpt.stat().st_mtime > best[0]):
            best = (ckpt.stat().st_mtime, ckpt, run)
    if best is None:
        return Pick(None, None, looked_at, parents)
    return Pick(best[1], best[2], looked_at, parents)


def find_last_checkpoint(patterns: Iterable[str | os.PathLike], prefix: str = "last") -> Path | None:
    """Newest (by modification time) ``{prefix}*.ckpt`` in folders matching any glob pattern."""
    found: list[Path] = []
    for pattern in patterns:
        for folder in glob.glob(str(pattern)):
            matches = Path(folder).glob(f"{prefix}*.ckpt")
            found.extend(p for p in matches if p.is_file() and p.stat().st_size > 0)
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _run_folders(pattern: str | os.PathLike) -> list[Path]:
    """Run folders of a checkpoint-folder glob: ``runs/x/version_*/checkpoints`` -> ``runs/x/version_*``."""
    pattern = Path(pattern)
    if pattern.name == "checkpoints" and glob.has_magic(str(pattern.parent)):
        return [Path(p) for p in glob.glob(str(pattern.parent)) if Path(p).is_dir()]
    return []


def _facts(header: Any) -> str | None:
    if isinstance(header, Mapping) and "global_step" in header:
        return f"step {header['global_step']}, epoch {header.get('epoch')}"
    return None


def explain_choice(
    chosen: str | os.PathLike,
    patterns: Iterable[str | os.PathLike],
    prefix: str = "last",
    header: Any = None,
) -> str:
    """Why ``chosen`` was taken: its step and time (from ``header``), and the newer runs skipped.

    E.g. ``"step 120, epoch 2, written 2026-11-22 08:10:02; the newest last*.ckpt in
    runs/lit_gpu/version_*/checkpoints; skipped newer version_4: no last*.ckpt yet"``.
    """
    chosen = Path(chosen)
    mtime = chosen.stat().st_mtime
    if header is None:
        try:
            header = read_header(chosen)
        except LitGpuError:
            header = None
    facts = [f] if (f := _facts(header)) else []
    facts.append("written " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime)))
    patterns = [str(p) for p in patterns]
    why = messages.CHECKPOINT_CHOICE.format(
        facts="; ".join(facts), prefix=prefix, where=" or ".join(patterns)
    )
    skipped = []
    for pattern in patterns:
        for run in _run_folders(pattern):
            if run == chosen.parent.parent or run.stat().st_mtime <= mtime:
                continue
            if not any(p.stat().st_size > 0 for p in (run / "checkpoints").glob(f"{prefix}*.ckpt")):
                skipped.append(run)
    if skipped:
        names = ", ".join(r.name for r in sorted(skipped, key=lambda r: (r.stat().st_mtime, r.name))[-3:])
        why += "; " + messages.SKIPPED_NEWER_RUNS.format(names=names, prefix=prefix)
    return why


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


def check_checkpoint(path: str | os.PathLike, sub: Any) -> Any:
    """Read ``path`` once (weights-only unless ``sub.weights_only`` is ``False``) and compare its model class.

    LightningCLI's ``_parse_ckpt_path`` would re-parse the checkpoint's ``hyper_parameters``
    (``_class_path`` included) over the user's config, so a checkpoint could choose the model class;
    here its hparams select nothing, and a recorded class that differs from the config's is refused.

    Returns:
        The checkpoint header (tensors memory-mapped).

    Raises:
        LitGpuError: A pickle payload, or a checkpoint of another model class than the config's.
    """
    trust = _get(sub, "weights_only") is False
    header = read_header(path, trust=trust, opt_out="pass --weights_only false")
    hparams = header.get("hyper_parameters") if isinstance(header, Mapping) else None
    recorded = hparams.get("_class_path") if isinstance(hparams, Mapping) else None
    configured = _get(sub, "model.class_path")
    if recorded is None or configured is None or recorded == configured:
        return header
    wanted = _loaded_class(str(configured))
    if wanted is not None and isinstance(recorded, str) and _loaded_class(recorded) is wanted:
        return header  # another import path of the same class
    raise LitGpuError(
        messages.CKPT_MODEL_CLASS_DIFFERS.format(
            path=path, recorded=str(recorded)[:200], configured=configured
        )
    )


@dataclass
class Where:
    """Where a sub-command's runs live (from the config being run, not from any file)."""

    dirpath: str | None  # an explicit checkpoint.dirpath
    parents: list[Path]  # ROOT/NAME folders holding version_N runs


def resolve(config: Any, where: Where) -> None:
    """Turn ``ckpt_path: last|best`` into a file of a matching earlier run, check it, say which.

    With no matching run, ``fit --ckpt_path last`` starts from scratch (as Lightning does) with one
    line listing what is there; ``test``/``validate``/``predict`` need a checkpoint, so it is an error.
    ``fit --ckpt_path best`` is Lightning's. ``weights_only`` left unset becomes ``True`` (Lightning
    would read ``http(s)://`` checkpoints with ``False``).

    Raises:
        LitGpuError: No matching checkpoint for ``test``/``validate``/``predict``, a symlink leaving its
            run, a pickle payload, or a checkpoint of another model class.
    """
    subcommand = _get(config, "subcommand")
    if not subcommand:
        return
    sub = config[subcommand]
    if "weights_only" in sub and _get(sub, "weights_only") is None:
        sub["weights_only"] = True
    key = f"{subcommand}.ckpt_path"
    which = _get(config, key)
    if not which:
        return
    if which not in ("last", "best"):
        if which not in _SPECIAL_CKPT and "://" not in str(which):
            refuse_escaping_link(which, str(which))
            check_checkpoint_file(which)
            check_checkpoint(which, sub)
        return
    if which == "best" and subcommand == "fit":
        return
    text = messages.RESUMING_FROM if subcommand == "fit" else messages.USING_CHECKPOINT
    if where.dirpath:
        found = find_last_checkpoint([where.dirpath], prefix=which)
        if found is None:
            raise LitGpuError(messages.NO_CKPT_IN_DIRPATH.format(which=which, dirpath=where.dirpath))
        refuse_escaping_link(found, which)
        header = check_checkpoint(found, sub)
        messages.tell(text.format(path=found, why=explain_choice(found, [where.dirpath], which, header)))
        config[key] = str(found)
        return
    wanted = Signature.of({"model": _plain(_get(sub, "model")), "data": _plain(_get(sub, "data"))})
    picked = pick_checkpoint(where.parents, wanted, which)
    if picked.checkpoint is None or picked.run is None:
        message = messages.NO_MATCHING_RUN.format(
            which=which,
            model=wanted.describe(),
            where=" or ".join(str(p) for p in picked.parents),
            listing=picked.listing(),
        )
        if subcommand == "fit":
            messages.tell(message + messages.NO_MATCHING_RUN_FIT)
            config[key] = None
            return
        raise LitGpuError(message + messages.NO_MATCHING_RUN_FIX)
    refuse_escaping_link(picked.checkpoint, which)
    header = check_checkpoint(picked.checkpoint, sub)
    patterns = [str(parent / "version_*" / "checkpoints") for parent in picked.parents]
    why = explain_choice(picked.checkpoint, patterns, prefix=which, header=header)
    why += messages.PICKED_RUN.format(run=picked.run.describe())
    messages.tell(text.format(path=picked.checkpoint, why=why))
    config[key] = str(picked.checkpoint)


def _plain(node: Any) -> Any:
    return node.as_dict() if hasattr(node, "as_dict") else node


# ---- a checkpoint alone: the model and data of its run ----------------------------------------------------
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
    argv: Sequence[str], trust_modules: Iterable[str] = ()
) -> tuple[list[str], RebuildFields | None]:
    """Put the model and data of the checkpoint's run config in front of the user's flags.

    For ``SUBCOMMAND --ckpt_path FILE`` with neither ``--config`` nor ``--model``: ``--model`` and
    ``--data`` from ``version_N/config.yaml`` (checked, path-like init args left out) and
    ``--trainer.default_root_dir ROOT`` from where the checkpoint lies; flags given on the command line
    come later, so they override. Returns the new argv and what was taken (``None``: argv unchanged).

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
        looked = (
            f"looked for {Path(ckpt).parent.parent / CONFIG_NAME} in a ROOT/NAME/version_N/checkpoints layout"
        )
        raise LitGpuError(messages.NO_CONFIG_BESIDE.format(ckpt=ckpt, looked=looked))
    fields = rebuild_fields(config, trust_modules)
    inserted = ["--model", json.dumps(fields.model, default=str)]
    if fields.data is not None:
        inserted += ["--data", json.dumps(fields.data, default=str)]
    root = root_of_checkpoint(ckpt)
    if root is not None:
        inserted += ["--trainer.default_root_dir", str(root)]
    return argv[: sub_index + 1] + inserted + rest, fields
