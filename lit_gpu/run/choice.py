"""Which checkpoint ``--ckpt_path last|best`` means: pure functions of what the runs and checkpoints say.

No file is read here (:mod:`lit_gpu.run.store` gathers the facts): the choice is a function of
facts, and it returns its reasons, which the CLI prints.

* The run: the newest run (highest ``version_N``: folders are numbered in the order runs started)
  that is this user's, whose ``config.yaml`` names the same model and data, and that holds a
  ``{which}*.ckpt``. Runs passed over are kept with the reason (another user's, another model, no
  checkpoint yet), so the resolution line can say why a newer folder was not taken.
* The file in that run: for ``last`` the complete ``last*.ckpt`` with the highest global step (as
  torchtitan's checkpoint manager takes the highest complete step; never file times); for ``best`` the
  complete ``best*.ckpt`` with the best monitored value (``mode`` from the config, never from a file),
  the highest step on a tie or where no value was recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lit_gpu.messages import shown
from lit_gpu.numbering import ckpt_point
from lit_gpu.run.layout import Run

__all__ = ["Candidate", "CkptFacts", "FileChoice", "Skipped", "choose_file", "order_runs", "skipped_newer"]


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
