"""Which run, which checkpoint: ``--ckpt_path last|best|FILE``, gathered in one place, each header read once.

* ``last`` / ``best``: the facts of the runs under ``trainer.default_root_dir`` (owner, whether their
  ``config.yaml`` names the same model and data classes, compared as strings, nothing imported; their
  ``{which}*.ckpt`` files) and of the checkpoints of the run taken (step, monitored value, from their
  headers) are gathered here and handed to :mod:`lit_gpu.files.run_choice`, which chooses and says why.
  Another user's run is never chosen (a shared root is not a trusted root).
* ``FILE``: checked as a file; with neither ``--config`` nor ``--model`` the run is rebuilt from the
  model and data of its ``version_N/config.yaml`` (:func:`args_with_saved_config`), nothing else.
* A checkpoint inside a run folder that is a symlink leading outside it is refused, naming its target.
* The chosen checkpoint is read once (weights-only, tensors memory-mapped; :func:`check_checkpoint`):
  a pickle payload is one line, and a checkpoint of another model class than the config's is refused
  (LightningCLI would re-parse its hyper-parameters over ``--config``).

:func:`resolve` returns a :class:`Resolution` (the path, the header, the line to print); it changes
nothing and prints nothing: the CLI applies it (:mod:`lit_gpu.cli.ckpt_path`).
"""

from __future__ import annotations

import glob
import json
import math
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
from lit_gpu.files import layout, run_choice
from lit_gpu.files.checkpoint import check_checkpoint_file, inside, not_lightning, read_header
from lit_gpu.files.run_config import (
    CONFIG_NAME,
    RebuildFields,
    Signature,
    config_of_checkpoint,
    rebuild_fields,
    root_of_checkpoint,
    run_signature,
)
from lit_gpu.messages import shown
from lit_gpu.upstream.loops import recorded_class_path

__all__ = [
    "Resolution",
    "Run",
    "SUBCOMMANDS",
    "Where",
    "args_with_saved_config",
    "check_checkpoint",
    "escaping_links",
    "explain_choice",
    "find_last_checkpoint",
    "find_runs",
    "refuse_links_out_of",
    "resolve",
    "run_checkpoints",
]

SUBCOMMANDS = ("fit", "validate", "test", "predict")
_SPECIAL_CKPT = ("best", "last", "hpc", "registry")
_VERSION_PREFIX = "version_"


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
    """A ``version_N`` folder with what it holds, as the listing of a ``no matching run`` line shows it."""

    folder: Path
    signature: Signature | None
    checkpoints: list[Path] = field(default_factory=list)
    owner: int | None = None

    @property
    def mine(self) -> bool:
        """Owned by the user this process runs as."""
        return self.owner == layout.my_uid()

    def describe(self) -> str:
        """``version_3 (RegressionModule(SimpleModel) + ...; last.ckpt, best-...ckpt)``."""
        if not self.mine:
            return f"{self.folder.name} (owned by {layout.owner_name(self.owner)}, not by you)"
        what = shown(self.signature.describe()) if self.signature else f"no {CONFIG_NAME}"
        names = sorted({shown(p.name, limit=60) for p in self.checkpoints})
        ckpts = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "") if names else "no checkpoint"
        return f"{self.folder.name} ({what}; {ckpts})"


def find_runs(parent: str | os.PathLike) -> list[Run]:
    """Every ``version_N`` run folder in ``parent`` (``ROOT/lit_gpu``), by ``N``; others' configs unread."""
    found = []
    for run in layout.list_runs(parent):
        if not run.mine:
            found.append(Run(run.path, None, [], run.owner))
            continue
        found.append(Run(run.path, run_signature(run.path), run_checkpoints(run.path), run.owner))
    return found


def run_checkpoints(folder: str | os.PathLike, prefix: str = "") -> list[Path]:
    """Non-empty ``{prefix}*.ckpt`` in ``folder/checkpoints`` (a link leaving the run: refused when read)."""
    return _dir_files(Path(folder) / layout.CHECKPOINTS, prefix)


def _listing(runs: Sequence[Run], limit: int = 4) -> str:
    """What is there, newest first, for a one-line message."""
    if not runs:
        return "no runs"
    newest = sorted(runs, key=lambda r: layout.version_number(r.folder) or 0, reverse=True)
    text = ", ".join(r.describe() for r in newest[:limit])
    return text + (f" and {len(newest) - limit} more" if len(newest) > limit else "")


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
        return f"step {shown(header['global_step'])}, epoch {shown(header.get('epoch'))}"
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


def check_checkpoint(path: str | os.PathLike, sub: Any, header: Any = None) -> Any:
    """Read ``path`` once (weights-only unless ``sub.weights_only`` is ``False``) and compare its model class.

    LightningCLI's ``_parse_ckpt_path`` would re-parse the checkpoint's ``hyper_parameters``
    (``_class_path`` included) over the user's config, so a checkpoint could choose the model class;
    here its hparams select nothing, and a recorded class that differs from the config's is refused.

    Args:
        path: The checkpoint.
        sub: The sub-command's config (``weights_only``, ``model.class_path``).
        header: The header already read (the choice of ``last``/``best`` read it); ``None``: read it here.

    Returns:
        The checkpoint header (tensors memory-mapped).

    Raises:
        LitGpuError: A pickle payload, or a checkpoint of another model class than the config's.
    """
    if header is None:
        header = read_header(path, trust=_trusted(sub), opt_out=_OPT_OUT)
    problem = not_lightning(path, header)
    if problem is not None:
        raise LitGpuError(problem)
    hparams = header.get("hyper_parameters") if isinstance(header, Mapping) else None
    recorded = recorded_class_path(hparams)
    configured = _get(sub, "model.class_path")
    if recorded is None or configured is None or recorded == configured:
        return header
    wanted = _loaded_class(str(configured))
    if wanted is not None and isinstance(recorded, str) and _loaded_class(recorded) is wanted:
        return header  # another import path of the same class
    raise LitGpuError(
        messages.CKPT_MODEL_CLASS_DIFFERS.format(path=path, recorded=shown(recorded), configured=configured)
    )


_OPT_OUT = "pass --weights_only false"


def _trusted(sub: Any) -> bool:
    return _get(sub, "weights_only") is False  # the user's flag, never a file's


@dataclass
class Where:
    """Where a sub-command's runs live (from the config being run, not from any file)."""

    dirpath: str | None  # an explicit checkpoint.dirpath
    parents: list[Path]  # ROOT/NAME folders holding version_N runs
    mode: str = "min"  # checkpoint.mode: which monitored value is best
    monitor: str | None = None  # checkpoint.monitor


@dataclass
class Resolution:
    """What ``--ckpt_path`` of a sub-command resolved to; the CLI applies it (sets the key, prints ``line``).

    ``path`` is the checkpoint to use (``None``: train from scratch), ``header`` its header, read once
    here and handed on (the model-class check, the step a continued run logs from), ``line`` the
    resolution line (values from files already passed through :func:`lit_gpu.messages.shown`), ``run``
    the run folder the checkpoint belongs to (found once, here; ``None``: not inside a run folder), which a
    continued fit or an evaluation writes into when it is yours.
    """

    key: str
    path: str | None
    header: Any = None
    line: str | None = None
    run: layout.RunDir | None = None


def _header_facts(path: Path, header: Any, monitor: str | None) -> run_choice.CkptFacts:
    step = epoch = None
    score = None
    if isinstance(header, Mapping):
        step = _int(header.get("global_step"))
        epoch = _int(header.get("epoch"))
        callbacks = header.get("callbacks")
        if isinstance(callbacks, Mapping):
            for state in callbacks.values():
                if not (isinstance(state, Mapping) and "current_score" in state):
                    continue
                if monitor is None or state.get("monitor") == monitor:
                    score = _float(state.get("current_score"))
                    break
    return run_choice.CkptFacts(path, True, step, epoch, score)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    try:
        number = float(value)  # a 0-d tensor too
    except (TypeError, ValueError, RuntimeError):
        return None
    return number if math.isfinite(number) else None


def _read_files(
    files: Sequence[Path], which: str, sub: Any, where: Where
) -> tuple[run_choice.FileChoice | None, dict[Path, Any]]:
    """The facts of ``files`` (each header read once), and the choice among them."""
    facts = []
    headers: dict[Path, Any] = {}
    for path in files:
        refuse_escaping_link(path, which)  # before anything of it is read
        try:
            check_checkpoint_file(path)
        except LitGpuError:  # truncated, empty: a save that did not finish
            facts.append(run_choice.CkptFacts(path, False))
            continue
        headers[path] = read_header(path, trust=_trusted(sub), opt_out=_OPT_OUT)
        facts.append(_header_facts(path, headers[path], where.monitor))
    return run_choice.choose_file(facts, which, where.mode, where.monitor), headers


def _run_facts(run: layout.RunDir, wanted: Signature, which: str) -> run_choice.RunFacts:
    owner = layout.owner_name(run.owner)
    if not run.mine:  # another user's run: nothing of it is read
        return run_choice.RunFacts(run.name, run.version, False, owner, None, ())
    signature = run_signature(run.path)
    files = tuple(p.name for p in run_checkpoints(run.path, which))
    matches = None if signature is None else wanted.matches(signature)
    model = signature.describe() if signature is not None else ""
    return run_choice.RunFacts(run.name, run.version, True, owner, matches, files, model)


def resolve(config: Any, where: Where) -> Resolution | None:
    """What ``ckpt_path: last|best|FILE`` of the sub-command means, checked; nothing is changed or printed.

    ``last`` / ``best``: the run and the file are chosen by :mod:`lit_gpu.files.run_choice` from what
    the runs and checkpoints say (this user's runs of the same model; the highest step, the best
    monitored value). With no such run, ``fit --ckpt_path last`` starts from scratch (as Lightning
    does; the line lists what is there); ``test``/``validate``/``predict`` need a checkpoint, so it is
    an error. ``fit --ckpt_path best`` is Lightning's. ``FILE``: checked, its header read once.

    Raises:
        LitGpuError: No matching checkpoint for ``test``/``validate``/``predict``, a symlink leaving its
            run, a pickle payload, or a checkpoint of another model class.
    """
    subcommand = _get(config, "subcommand")
    if not subcommand:
        return None
    sub = config[subcommand]
    key = f"{subcommand}.ckpt_path"
    which = _get(config, key)
    if not which:
        return None
    if which not in ("last", "best"):
        if which in _SPECIAL_CKPT or "://" in str(which):
            return None
        refuse_escaping_link(which, str(which))
        check_checkpoint_file(which)
        header = check_checkpoint(which, sub)
        return Resolution(key, str(which), header, run=layout.run_of_checkpoint(which))
    if which == "best" and subcommand == "fit":
        return None
    text = messages.RESUMING_FROM if subcommand == "fit" else messages.USING_CHECKPOINT
    if where.dirpath:
        choice, headers = _read_files(_dir_files(where.dirpath, which), which, sub, where)
        if choice is None:
            raise LitGpuError(messages.NO_CKPT_IN_DIRPATH.format(which=which, dirpath=where.dirpath))
        header = check_checkpoint(choice.path, sub, headers[choice.path])
        why = f"{choice.reason} in checkpoint.dirpath {shown(where.dirpath)}"
        line = text.format(path=shown(choice.path), why=why)
        return Resolution(key, str(choice.path), header, line, layout.run_of_checkpoint(choice.path))
    wanted = Signature.of({"model": _plain(_get(sub, "model")), "data": _plain(_get(sub, "data"))})
    found = [
        (run, _run_facts(run, wanted, which)) for parent in where.parents for run in layout.list_runs(parent)
    ]
    run_of = {id(facts): run for run, facts in found}
    usable, skipped = run_choice.order_runs([facts for _, facts in found], which)
    for run in usable:
        folder = run_of[id(run)].path
        choice, headers = _read_files(run_checkpoints(folder, which), which, sub, where)
        if choice is None:
            skipped.append(run_choice.Skipped(run.name, run.version, f"no complete {which}*.ckpt"))
            continue
        header = check_checkpoint(choice.path, sub, headers[choice.path])
        why = f"{choice.reason}; run {run.name}, the newest of yours with {wanted.describe()}"
        newer = run_choice.skipped_newer(sorted(skipped, key=lambda s: -s.version), run.version)
        if newer:
            why += f"; passed over newer {newer}"
        line = text.format(path=shown(choice.path), why=why)
        return Resolution(key, str(choice.path), header, line, run_of[id(run)])
    message = messages.NO_MATCHING_RUN.format(
        which=which,
        model=wanted.describe(),
        where=" or ".join(str(p) for p in where.parents),
        listing=_listing([r for parent in where.parents for r in find_runs(parent)]),
    )
    if subcommand == "fit":
        return Resolution(key, None, None, message + messages.NO_MATCHING_RUN_FIT)
    raise LitGpuError(message + messages.NO_MATCHING_RUN_FIX)


def _dir_files(dirpath: str | os.PathLike, which: str) -> list[Path]:
    """Non-empty ``{which}*.ckpt`` directly in ``dirpath``, sorted; none when it cannot be listed."""
    folder = Path(dirpath)
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    return [
        p
        for p in entries
        if p.name.startswith(which) and p.name.endswith(".ckpt") and p.is_file() and p.stat().st_size > 0
    ]


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
