"""The choice of ``--ckpt_path last|best``: pure functions of what runs and checkpoints say."""

from __future__ import annotations

import os
from pathlib import Path

from lit_gpu.run.layout import Run
from lit_gpu.run.store import Candidate, CkptFacts, choose_file, order_runs, skipped_newer


def _run(
    version: int, mine: bool = True, matches: bool | None = True, files: tuple[str, ...] = ("last.ckpt",)
):
    run = Run(Path(f"runs/lit_gpu/version_{version}"), version, os.geteuid() if mine else os.geteuid() + 1)
    return Candidate(run, "bob (uid 1002)", matches, files, "FooNet")


def test_runs_are_taken_newest_first_and_the_others_say_why():
    runs = [
        _run(0),
        _run(1, files=()),
        _run(2, matches=False),
        _run(3, mine=False),
        _run(4, matches=None),
        _run(5),
    ]
    usable, skipped = order_runs(runs, "last")
    assert [r.name for r in usable] == ["version_5", "version_0"]
    assert [(s.name, s.reason) for s in skipped] == [
        ("version_4", "no config.yaml"),
        ("version_3", "owned by bob (uid 1002), not by you"),
        ("version_2", "another model (FooNet)"),
        ("version_1", "no last*.ckpt yet"),
    ]
    assert skipped_newer(skipped, 0, limit=2) == (
        "version_4: no config.yaml; version_3: owned by bob (uid 1002), not by you; and 2 more"
    )
    assert skipped_newer(skipped, 5) == ""


def test_last_is_the_highest_complete_step_and_best_the_best_value():
    files = [
        CkptFacts(Path("last-v1.ckpt"), True, 12, 2),
        CkptFacts(Path("last.ckpt"), True, 12, 2),  # a tie: the plain name
        CkptFacts(Path("last-v2.ckpt"), False),  # incomplete: never chosen
        CkptFacts(Path("last-v3.ckpt"), True, 4, 0),
    ]
    chosen = choose_file(files, "last")
    assert chosen.path == Path("last.ckpt")
    assert (
        chosen.reason == "step 11, epoch 2; the highest step of 3 complete last*.ckpt; 1 incomplete left out"
    )
    assert choose_file([CkptFacts(Path("last.ckpt"), False)], "last") is None
    best = [CkptFacts(Path("best-a.ckpt"), True, 4, 0, 0.5), CkptFacts(Path("best-b.ckpt"), True, 8, 1, 0.2)]
    assert choose_file(best, "best", "min", "val/loss").reason.startswith(
        "step 7, epoch 1, val/loss 0.2; the min"  # metrics.csv's numbers: global step - 1, epoch from 0
    )
    assert choose_file(best, "best", "max").path == Path("best-a.ckpt")
    unscored = [CkptFacts(Path("best-a.ckpt"), True, 4), CkptFacts(Path("best-b.ckpt"), True, 8)]
    assert choose_file(unscored, "best").path == Path("best-b.ckpt")  # no value recorded: the highest step
