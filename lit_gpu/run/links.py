"""Links that leave a run: a run folder is written into only when nothing in it leads outside it.

A checkpoint in ``version_N/checkpoints/`` whose real path leaves ``version_N`` is refused, naming its
target; a run folder holding links (or hard links) out of it is not continued, nor evaluated into.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from lit_gpu.checkpoints.contracts import inside
from lit_gpu.checkpoints.read import CheckpointFacts
from lit_gpu.errors import LitGpuError
from lit_gpu.run.layout import CHECKPOINTS, version_number

__all__ = ["escaping_links", "refuse_escaping_link", "refuse_leaving", "refuse_links_out_of", "runs_around"]


RUN_FOLDER_LINKS_OUT = (
    "not continuing the run in {folder}: it holds links that lead outside it ({links}), so writing there "
    "would write outside; remove them, or pass --new_run true to log into a new folder"
)
CKPT_SYMLINK_LEAVES_RUN = (
    "--ckpt_path {which}: {path} is a symlink to {target}, outside its run folder {run}; pass the target "
    "itself if you trust it"
)


def runs_around(path: str | os.PathLike) -> list[Path]:
    """The run folders a checkpoint at ``path`` lies in (``version_N/checkpoints/X.ckpt``, ``version_N/X``).

    Its real path must stay inside them (the reader checks it: ``inspect(path, within=...)``).
    """
    ckpt = Path(path).absolute()
    return [run for run in (ckpt.parent.parent, ckpt.parent) if version_number(run) is not None]


def refuse_leaving(facts: CheckpointFacts, which: str) -> None:
    """Refuse a checkpoint the reader found leading out of its run folder (:func:`runs_around`).

    Raises:
        LitGpuError: Naming the link and its target.
    """
    if facts.leaves is not None:
        text = CKPT_SYMLINK_LEAVES_RUN.format(
            which=which, path=facts.path, target=facts.target, run=facts.leaves
        )
        raise LitGpuError(text)


def refuse_escaping_link(path: str | os.PathLike, which: str) -> None:
    """Refuse a checkpoint in ``.../version_N/checkpoints/`` whose real path leaves ``version_N``.

    Raises:
        LitGpuError: Naming the link and its target.
    """
    ckpt = Path(path).absolute()
    for run in runs_around(ckpt):
        if not inside(ckpt, run):
            raise LitGpuError(
                CKPT_SYMLINK_LEAVES_RUN.format(which=which, path=path, target=os.path.realpath(ckpt), run=run)
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
    if version_number(folder) is not None and not inside(folder, folder.parent):
        found.append(f"{folder.name} itself -> {os.path.realpath(folder)}")  # a planted version_N link
    for parent in (folder, folder / CHECKPOINTS):
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


def refuse_links_out_of(run: str | os.PathLike, message: str = RUN_FOLDER_LINKS_OUT, **fields: Any) -> None:
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
