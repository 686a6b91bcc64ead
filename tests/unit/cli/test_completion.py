"""``lit-gpu completion bash|zsh``: the static script jsonargparse and shtab generate, sourced by bash."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from lit_gpu.cli.main import COMMANDS
from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.integration  # builds LitGpuCLI's parser in a fresh interpreter


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    """Each shell's script as ``lit-gpu completion SHELL > FILE`` writes it."""
    folder = tmp_path_factory.mktemp("completion")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    written = {}
    for shell in ("bash", "zsh"):
        done = subprocess.run(
            [sys.executable, "-m", "lit_gpu", "completion", shell], capture_output=True, text=True, env=env
        )
        assert done.returncode == 0, done.stderr[-2000:]
        written[shell] = folder / f"lit-gpu.{shell}"
        written[shell].write_text(done.stdout)
    return written


BASH_TAB = """
source {script}
tab() {{ COMP_WORDS=("$@"); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
  COMP_LINE="$*"; COMP_POINT=${{#COMP_LINE}}; COMPREPLY=(); _shtab_lit_gpu
  printf '%s\\n' "${{COMPREPLY[@]}}"; echo ---; }}
complete -p lit-gpu; echo ---
"""


def _bash(script, *lines: str) -> list[list[str]]:
    """Source the script in a bash without Python on its PATH, press TAB on each line; the answers."""
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/")}  # a TAB that ran Python would fail
    text = BASH_TAB.format(script=script) + "\n".join(f"tab lit-gpu {line}" for line in lines)
    done = subprocess.run(["bash", "--norc", "-c", text], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and not done.stderr, done.stderr[-2000:]
    return [answer.strip("\n").split("\n") for answer in done.stdout.split("---")[:-1]]


def test_bash_sources_the_script_and_completes_commands_flags_and_recipes(scripts):
    registered, commands, fit_flag, recipe, tool_flag, shells = _bash(
        scripts["bash"],
        '""',
        "fit --trainer.max_e",
        "fit --config lit_gpu:trainer/g",
        "env --pi",
        'completion ""',
    )
    assert registered == ["complete -o bashdefault -F _shtab_lit_gpu lit-gpu"]
    assert commands == list(COMMANDS)
    assert fit_flag == ["--trainer.max_epochs"]
    assert recipe == ["lit_gpu:trainer/gpu"]
    assert tool_flag == ["--pick-free"]
    assert shells == ["bash", "zsh"]


def test_the_script_is_static_a_tab_runs_no_python(scripts):
    """A TAB runs shell functions only: no ``lit-gpu``, no ``python`` in the script (nothing is imported)."""
    for script in scripts.values():
        text = script.read_text()
        assert re.search(r"\bpython3?\b", text) is None and "-m lit_gpu" not in text
        assert "command lit-gpu" not in text and "COMPREPLY=( $(lit-gpu" not in text


def test_zsh_script_defines_the_lit_gpu_completion(scripts):
    text = scripts["zsh"].read_text()
    assert text.startswith("#compdef lit-gpu")
    assert all(name in text for name in COMMANDS)
    if shutil.which("zsh"):
        done = subprocess.run(["zsh", "-n", str(scripts["zsh"])], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_an_unknown_shell_is_argparse_s_usage_error(capsys):
    from lit_gpu.cli import completion

    with pytest.raises(SystemExit) as stop:
        completion.main(["fish"])
    assert stop.value.code == 2 and "invalid choice: 'fish'" in capsys.readouterr().err
