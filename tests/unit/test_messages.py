"""``lit_gpu.messages.tell``: user lines printed once per job (global rank zero), errors on every rank."""

from __future__ import annotations

import sys

from lightning.fabric.utilities.rank_zero import rank_zero_only

from lit_gpu import messages


def test_tell_prints_prefixed_on_rank_zero(capsys, monkeypatch):
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    messages.tell(messages.USING_CHECKPOINT.format(path="runs/x/last.ckpt", why="step 3"))
    messages.tell("to stdout", stream=sys.stdout)
    out, err = capsys.readouterr()
    assert err == "lit-gpu: using runs/x/last.ckpt (step 3)\n" and out == "lit-gpu: to stdout\n"


def test_tell_is_silent_on_other_ranks_but_errors_are_not(capsys, monkeypatch):
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    messages.tell("only once")
    messages.tell_error("bad flag")
    out, err = capsys.readouterr()
    assert out == "" and err == "lit-gpu: error: bad flag\n"
