"""The stop line's resume command, pasted into bash, gives back the run's own words (any argv)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lit_gpu.messages import LINE_MAX_CHARS, RESUME_MAX_CHARS, resume_command, shown

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

CORPUS = [
    ["fit", "--config", "configs/a b.yaml", "--model.lr", "1e-3"],
    ["fit", "--config=x.yaml", "--ckpt_path=runs/old/last.ckpt", "--new_run", "true"],
    ["fit", "--config", '{trainer: {max_epochs: 2}, model: {name: "it\'s"}}'],
    ["fit", "--model.name", "$(touch /tmp/pwned) `id` ${HOME} !! ~ *"],
    ["fit", "--config", "a\nb.yaml", "--data.root", "tab\there"],
    ["fit", "--model.name", "\u202eevil\u200b", "--data.root", "données/ünï\u0085"],
    ["fit", "--data.root", "raw-\udce9-byte"],  # an undecodable byte of argv (surrogateescape)
    ["fit", "-c", "x.yaml", "--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitor", "val/loss"],
    ["fit", "--config", "new_run_true.yaml", "--new_run", "false"],  # kept: the file's true must not win
    ["fit", "--new_run=False", "--ckpt_path", "a.ckpt", "--new_run", "true"],  # the last one decides: dropped
]


def _bash_words(command: str) -> list[str]:
    """The words bash reads from ``command`` after its program name (``printf`` in its place)."""
    assert command.startswith("lit-gpu ")
    script = "printf '%s\\0' " + command.removeprefix("lit-gpu ")
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout
    return [os.fsdecode(word) for word in out.split(b"\0")[:-1]]


def _expected(argv: list[str], checkpoint: str) -> list[str]:
    kept, skip, new_run = [], "", None
    for arg in argv:
        if skip:
            new_run, skip = (arg if skip == "--new_run" else new_run), ""
        elif arg in ("--ckpt_path", "--new_run"):
            skip = arg
        elif arg.startswith("--new_run="):
            new_run = arg.partition("=")[2]
        elif not arg.startswith("--ckpt_path="):
            kept.append(arg)
    false = new_run is not None and new_run.strip().lower() == "false"
    return [*kept, *(["--new_run", "false"] if false else []), "--ckpt_path", checkpoint]


@pytest.mark.parametrize("argv", CORPUS)
def test_the_printed_resume_command_reads_back_as_the_runs_words(argv):
    checkpoint = "runs/it's here\n/version_0/checkpoints/last.ckpt"
    command = resume_command(argv, checkpoint)
    assert shown(command, limit=LINE_MAX_CHARS) == command  # printed unchanged
    assert _bash_words(command) == _expected(argv, checkpoint)


_WORDS = st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")), max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argv=_WORDS)
def test_any_argv_reads_back(argv):
    command = resume_command(["fit", *argv], "runs/v/last.ckpt")
    assert shown(command, limit=LINE_MAX_CHARS) == command
    if len(command) < RESUME_MAX_CHARS:
        assert _bash_words(command) == _expected(["fit", *argv], "runs/v/last.ckpt")


def test_a_command_too_long_for_the_line_names_the_arguments_instead_of_a_cut_one():
    command = resume_command(["fit", "--config", "{" + "a: 1, " * 1000 + "}"], "runs/v/last.ckpt")
    assert command == "lit-gpu <the same arguments> --ckpt_path runs/v/last.ckpt"


def test_a_false_new_run_is_kept_and_a_true_one_dropped():
    assert (
        resume_command(["fit", "--new_run", "false"], "l.ckpt")
        == "lit-gpu fit --new_run false --ckpt_path l.ckpt"
    )
    assert resume_command(["fit", "--new_run=true"], "l.ckpt") == "lit-gpu fit --ckpt_path l.ckpt"


def test_the_program_is_lit_gpu_unless_argv_is_this_process_own(monkeypatch):
    monkeypatch.setattr("sys.argv", ["-c"])  # a pytest-xdist worker, a notebook: no command line of its own
    assert resume_command(["fit"], "l.ckpt") == "lit-gpu fit --ckpt_path l.ckpt"
    monkeypatch.setattr("sys.argv", ["train.py", "fit"])
    monkeypatch.setattr("sys.orig_argv", ["python3", "-X", "dev", "train.py", "fit"])
    assert resume_command(["fit"], "l.ckpt") == "python3 -X dev train.py fit --ckpt_path l.ckpt"
    monkeypatch.setattr("sys.argv", ["/venv/bin/lit-gpu", "fit"])
    monkeypatch.setattr("sys.orig_argv", ["/venv/bin/python", "/venv/bin/lit-gpu", "fit"])
    assert resume_command(["fit"], "l.ckpt") == "lit-gpu fit --ckpt_path l.ckpt"
