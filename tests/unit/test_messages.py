"""``lit_gpu.messages.tell``: user lines printed once per job (global rank zero), errors on every rank."""

from __future__ import annotations

import sys

from lightning.fabric.utilities.rank_zero import rank_zero_only

from lit_gpu import messages
from lit_gpu.run import store


def test_tell_prints_prefixed_on_rank_zero(capsys, monkeypatch):
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    messages.tell(store.USING_CHECKPOINT.format(path="runs/x/last.ckpt", why="step 3"))
    messages.tell("to stdout", stream=sys.stdout)
    out, err = capsys.readouterr()
    assert err == "lit-gpu: using runs/x/last.ckpt (step 3)\n" and out == "lit-gpu: to stdout\n"


def test_tell_is_silent_on_other_ranks_but_errors_are_not(capsys, monkeypatch):
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    messages.tell("only once")
    messages.tell_error("bad flag")
    out, err = capsys.readouterr()
    assert out == "" and err == "lit-gpu: error: bad flag\n"


def test_tell_reads_the_launchers_rank_where_lightning_is_not_imported(capsys, monkeypatch):
    monkeypatch.delitem(sys.modules, "lightning.fabric.utilities.rank_zero")  # as in `lit-gpu configs`
    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(name, raising=False)
    messages.tell("rank zero")
    monkeypatch.setenv("SLURM_PROCID", "2")
    messages.tell("rank two")
    monkeypatch.setenv("RANK", "0")  # RANK first, as Lightning reads them
    messages.tell("rank zero again")
    assert capsys.readouterr().err == "lit-gpu: rank zero\nlit-gpu: rank zero again\n"
    assert "lightning.fabric.utilities.rank_zero" not in sys.modules  # read, not imported


def test_shown_escapes_control_characters_and_keeps_one_line() -> None:
    from lit_gpu.messages import shown

    forged = "7\nlit-gpu: error: forged\x1b]0;pwned\x07\r\x9b31m\u202eevil"
    line = shown(forged)
    assert "\n" not in line and "\r" not in line and "\x1b" not in line and "\x07" not in line
    assert "\x9b" not in line and "\u202e" not in line
    assert line.startswith("7\\nlit-gpu: error: forged\\x1b]0;pwned\\x07\\r")
    assert shown("plain text / é ✓") == "plain text / é ✓"
    assert shown(3.5) == "3.5"
    long = shown("x" * 1000)
    assert len(long) == 200 and long.endswith("\u2026")


def test_an_error_line_is_one_line_whatever_it_quotes(capsys) -> None:
    from lit_gpu import messages

    messages.tell_error("checkpoint /tmp/x\n\x1b]0;pwned\x07lit-gpu: error: forged is corrupt")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("\n") and "\x1b" not in err and "\x07" not in err
    assert err.startswith("lit-gpu: error: checkpoint /tmp/x\\n\\x1b]0;pwned\\x07lit-gpu: error: forged")
