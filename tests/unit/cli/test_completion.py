"""``lit-gpu completion``: the candidates at each TAB, the flags table against the parsers, a real bash."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from lit_gpu import recipes
from lit_gpu.cli import completion
from lit_gpu.cli.completion import candidates, collect_flags
from lit_gpu.cli.completion_flags import FLAGS
from lit_gpu.cli.main import COMMANDS
from tests.helpers.paths import REPO_ROOT


def test_command_names_complete_from_the_command_table():
    assert candidates([""]) == [*COMMANDS, "-h", "--help", "--version"]
    assert candidates(["f"]) == ["fit"]
    assert candidates(["--v"]) == ["--version"]


def test_config_values_are_the_shipped_recipes_then_config_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lit_mine.yaml").write_text("trainer: {}\n")
    (tmp_path / "lit_notes.txt").write_text("")
    (tmp_path / "lit_runs").mkdir()
    trainer = [f"lit_gpu:{n}" for n in recipes.names() if n.startswith("trainer/")]
    assert candidates(["fit", "--config", "lit_gpu:trainer/"]) == trainer
    assert candidates(["fit", "-c", "lit_gpu:trainer/g"]) == ["lit_gpu:trainer/gpu"]
    assert candidates(["fit", "--config=lit_gpu:trainer/g"]) == ["--config=lit_gpu:trainer/gpu"]
    assert candidates(["fit", "--config", "lit_"]) == [
        *[f"lit_gpu:{n}" for n in recipes.names() if not n.startswith("sweeps/")],
        "lit_mine.yaml",
        "lit_runs/",
    ]
    assert candidates(["sweep", "--search", "lit_gpu:"]) == [
        f"lit_gpu:{n}" for n in recipes.names() if n.startswith("sweeps/")
    ]
    assert candidates(["configs", "trainer/c"]) == ["trainer/cpu"]
    assert candidates(["configs", "lit_gpu:trainer/c"]) == ["trainer/cpu"]


def test_flags_complete_per_command():
    assert candidates(["fit", "--trainer.max_e"]) == ["--trainer.max_epochs"]
    assert "--return_predictions" in candidates(["predict", "--ret"])
    assert candidates(["env", "--j"]) == ["--json"]
    assert candidates(["sweep", "--n_t"]) == ["--n_trials"]
    assert candidates(["sweep", "--trainer.max_e"]) == ["--trainer.max_epochs"]  # passed on to each trial
    assert "--ckpt_path" in candidates(["fit", ""])
    assert candidates(["completion", ""]) == ["bash", "zsh"]


def test_the_flags_table_is_the_parsers_flags():
    """Regenerate with ``python -m lit_gpu.cli.completion`` when a parser changes."""
    assert collect_flags() == {name: list(flags) for name, flags in FLAGS.items()}
    assert set(FLAGS) == set(COMMANDS)


def test_complete_prints_one_candidate_a_line(capsys):
    assert completion.main(["--complete", "--", "fit", "--config", "lit_gpu:trainer/cp"]) == 0
    assert capsys.readouterr().out == "lit_gpu:trainer/cpu\n"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_real_bash_completes_with_the_generated_script(tmp_path, capsys):
    completion.main(["bash"])
    script = tmp_path / "lit-gpu.bash"
    script.write_text(capsys.readouterr().out)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "lit-gpu"
    launcher.write_text(f'#!/bin/sh\nexec {sys.executable} -m lit_gpu "$@"\n')
    launcher.chmod(0o755)
    drive = f"""
source {script}
complete -p lit-gpu
tab() {{
    COMP_LINE="$1"; COMP_POINT=${{#COMP_LINE}}; COMPREPLY=(); _lit_gpu_complete; echo "${{COMPREPLY[*]}}"
}}
tab "lit-gpu fi"
tab "lit-gpu fit --config lit_gpu:trainer/cp"
tab "lit-gpu fit --config=lit_gpu:trainer/gp"
tab "lit-gpu test --ckpt_pa"
"""
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", drive],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "complete -F _lit_gpu_complete lit-gpu",
        "fit",
        "trainer/cpu",  # bash replaces the text after the ':' (COMP_WORDBREAKS)
        "trainer/gpu",
        "--ckpt_path",
    ]
