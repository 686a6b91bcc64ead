"""A continued trial keeps one ``metrics.csv``: the rows before its checkpoint, then the new ones.

Lightning's CSVLogger deletes ``metrics.csv`` when it opens a folder that has one. Before a trial is
continued its file is set aside; after the fit, the rows the stopped attempt wrote from the resumed
step on are dropped (the continuation writes them again) and the rest is put back in front.
"""

from __future__ import annotations

import contextlib
import csv
import os
from pathlib import Path

from lit_gpu.checkpoints.io import atomic_file
from lit_gpu.files.text import read_csv
from lit_gpu.run.layout import METRICS_NAME

METRICS = METRICS_NAME
ASIDE = ".metrics.before_continue.csv"
FIX = "remove it (the trial continues from its checkpoint; only the curves of its earlier steps are lost)"


def _rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    return read_csv(path, fix=FIX)


def _step(row: dict[str, str]) -> float:
    with contextlib.suppress(TypeError, ValueError):
        return float(row.get("step") or "nan")
    return float("nan")


def put_back(run_dir: Path) -> None:
    """Merge the set-aside rows before the new ``metrics.csv`` (rows from its first step on dropped)."""
    aside, current = run_dir / ASIDE, run_dir / METRICS
    if not aside.is_file():
        return
    keys, old = _rows(aside)
    new_keys, new = _rows(current) if current.is_file() else ([], [])
    steps = [s for s in map(_step, new) if s == s]
    first = min(steps) if steps else float("inf")
    kept = [r for r in old if not _step(r) >= first]
    fields = keys + [k for k in new_keys if k not in keys]
    with atomic_file(current, "w", newline="") as f:  # a fresh temp name: never through a planted link
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(kept + new)
    aside.unlink()


def set_aside(run_dir: Path) -> None:
    """Move ``metrics.csv`` out of the CSVLogger's way before the trial is continued."""
    put_back(run_dir)  # an earlier continuation that was stopped before it could merge
    current = run_dir / METRICS
    if current.is_file():
        os.replace(current, run_dir / ASIDE)
