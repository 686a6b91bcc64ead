"""``lit-gpu completion``: the candidates at each TAB, the flags table against the parsers, a real bash."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
import time

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


def test_complete_prints_candidates_nul_separated(capsys):
    assert completion.main(["--complete", "--", "fit", "--config", "lit_gpu:trainer/cp"]) == 0
    assert capsys.readouterr().out == "lit_gpu:trainer/cpu\0"


def test_a_file_name_that_is_not_utf8_is_answered_as_its_bytes(tmp_path, monkeypatch, capfdbinary):
    """Found by attacking the door: one such name in the folder was a UnicodeEncodeError, and every TAB
    there (zsh's and bash's) answered nothing; bash gets the byte as ``$'\\xe9'``."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / os.fsdecode(b"x\xe9$(touch pwned).yaml")).write_text("")
    assert completion.main(["--complete", "--", "fit", "--config", "x"]) == 0
    assert capfdbinary.readouterr().out == b"x\xe9$(touch pwned).yaml\0"
    assert completion.main(["--complete-bash", " \t\n\"'><=;|&(:", "lit-gpu fit --config x"]) == 0
    assert capfdbinary.readouterr().out == b"x$'\\xe9'\\$\\(touch\\ pwned\\).yaml\0"


def test_the_zsh_script_lets_compadd_quote_and_reads_nul_separated_words():
    """zsh is not installed here: its script's text. compadd without -Q quotes what it inserts; the words
    go to lit-gpu unquoted (${(Q)...}) and the answer is split at NULs (a file name may hold a newline)."""
    script = completion.SCRIPTS["zsh"]
    adds = [line for line in script.splitlines() if "compadd" in line and not line.startswith("#")]
    assert len(adds) == 2 and not any("-Q" in line for line in adds)
    assert "${(@Q)words[2,CURRENT]}" in script and "${(@0)$(" in script


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


#: (what is typed before the TAB, the file it completes to): hostile names, each with its own first letter
HOSTILE_FILES = [
    ("a", "a$(touch pwned).yaml"),
    ("b", "b`touch pwned`.yaml"),
    ("'c", "c'q $(touch pwned).yaml"),
    ('--config="d', 'd"q!$HOME.yaml'),
    ("e", "e y;touch pwned&.yaml"),
    ("f", "f\ntouch pwned\n.yaml"),
]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_tab_in_an_interactive_bash_inserts_quoted_names_and_running_the_line_runs_nothing(tmp_path, capsys):
    """A real interactive bash (readline, in a pseudo-terminal) with the generated script: TAB after each
    typed start, then Enter. ``lit-gpu`` is a shell function there that records its arguments (the TAB
    still asks the real command): each is exactly the file's name, and no ``pwned`` file appears."""
    completion.main(["bash"])
    script = tmp_path / "lit-gpu.bash"
    script.write_text(capsys.readouterr().out)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "lit-gpu"
    launcher.write_text(f'#!/bin/sh\nexec {sys.executable} -m lit_gpu "$@"\n')
    launcher.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    for _, name in HOSTILE_FILES:
        (work / name).touch()
    (work / "g $(touch pwned)").mkdir()
    (work / "g $(touch pwned)" / "in.yaml").touch()
    keys = "".join(f"lit-gpu fit {'' if t.startswith('-') else '--config '}{t}\t\n" for t, _ in HOSTILE_FILES)
    keys += "lit-gpu fit --config g\t\t\nexit\n"
    record = "lit-gpu() { printf '%s\\0' \"$@\" >> ../args; printf '\\n' >> ../args; }\n"
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", PS1="$ ", TERM="dumb")
    env.update(INPUTRC=os.devnull, HOME=str(tmp_path))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    master, slave = pty.openpty()
    shell = subprocess.Popen(
        ["bash", "--norc", "--noprofile", "-i"],
        stdin=slave, stdout=slave, stderr=slave, cwd=work, env=env, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    os.write(master, f"source {script}\n{record}{keys}".encode())
    screen, deadline = b"", time.monotonic() + 120
    while shell.poll() is None and time.monotonic() < deadline:
        if select.select([master], [], [], 0.2)[0]:
            try:
                screen += os.read(master, 65536)
            except OSError:
                break
    shell.wait(timeout=10)
    os.close(master)
    lines = (tmp_path / "args").read_bytes().decode().split("\0\n")[:-1]
    expected = [
        "\0".join(["fit", "--config=" + n if t.startswith("-") else f"--config\0{n}"])
        for t, n in HOSTILE_FILES
    ] + ["fit\0--config\0g $(touch pwned)/in.yaml"]
    assert lines == expected, screen.decode(errors="replace")
    assert not (work / "pwned").exists() and not (tmp_path / "pwned").exists()  # nothing ran


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_tab_mid_line_after_non_ascii_text_completes_the_word_at_the_cursor(tmp_path, capsys):
    """Reported by the red team: COMP_POINT counting bytes while ``${COMP_LINE:0:COMP_POINT}`` cuts by
    characters. In a real interactive bash (5.2, UTF-8 locale) both count characters: the cursor moved back
    (Ctrl-B) to the end of ``trainer/cp`` after ``été``, TAB completes that word, the rest is kept."""
    completion.main(["bash"])
    script = tmp_path / "lit-gpu.bash"
    script.write_text(capsys.readouterr().out)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "lit-gpu").write_text(f'#!/bin/sh\nexec {sys.executable} -m lit_gpu "$@"\n')
    (bin_dir / "lit-gpu").chmod(0o755)
    record = "lit-gpu() { printf '%s\\0' \"$@\" >> args; }\n"
    keys = "lit-gpu fit --trainer.default_root_dir été --config lit_gpu:trainer/cp --x" + "\x02" * 4 + "\t\n"
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", PS1="$ ", TERM="dumb")
    env.update(INPUTRC=os.devnull, HOME=str(tmp_path), LANG="C.UTF-8", LC_ALL="C.UTF-8")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    master, slave = pty.openpty()
    shell = subprocess.Popen(
        ["bash", "--norc", "--noprofile", "-i"],
        stdin=slave, stdout=slave, stderr=slave, cwd=tmp_path, env=env, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    os.write(master, f"source {script}\n{record}{keys}exit\n".encode())
    screen, deadline = b"", time.monotonic() + 120
    while shell.poll() is None and time.monotonic() < deadline:
        if select.select([master], [], [], 0.2)[0]:
            try:
                screen += os.read(master, 65536)
            except OSError:
                break
    shell.wait(timeout=10)
    os.close(master)
    args = (tmp_path / "args").read_bytes().decode().split("\0")[:-1]
    assert args == ["fit", "--trainer.default_root_dir", "été", "--config", "lit_gpu:trainer/cpu", "--x"], (
        screen.decode(errors="replace")
    )
