"""The README's commands stay true.

* Every ``lit-gpu`` command in the README's ``bash`` blocks (also under ``srun`` and ``torchrun -m
  lit_gpu``) parses: fit/validate/test/predict with ``--print_config`` (configs exist, keys and types
  are valid; GPU-only commands included, since nothing is instantiated), tool commands by checking
  that every ``--flag`` they use is in the tool's ``--help``.
* A representative set runs for real on CPU, in README order, in a scratch folder: train, resume,
  plot, export, the README's Python loading snippets, predict, test, env, and the ``dp`` mode
  (fit/test/predict with ``configs/debug.yaml`` appended to stay fast).
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

import pytest

from lit_gpu.cli import LitGpuCLI, main
from lit_gpu.cli.main import COMMANDS
from tests.helpers.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
CLI_SUBCOMMANDS = ("fit", "validate", "test", "predict")
DEBUG = ["--config", "configs/debug.yaml"]

# README commands run for real (verbatim from the README, checked below), in this order.
RUN = [
    "lit-gpu fit --config configs/simple.yaml",
    "lit-gpu fit --config configs/simple.yaml --ckpt_path last",
    "lit-gpu fit --ckpt_path runs/lit_gpu/version_0/checkpoints/last.ckpt --trainer.max_epochs 4",
    "lit-gpu plot runs/lit_gpu/version_0",
    "lit-gpu export runs/lit_gpu/version_0/checkpoints/last.ckpt --out model.safetensors",
    "lit-gpu predict --config configs/simple.yaml --ckpt_path last --predict_out preds.csv",
    "lit-gpu env",
    "lit-gpu fit --config configs/foonet.yaml --config configs/trainer/dp.yaml",
    "lit-gpu test --config configs/foonet.yaml --ckpt_path last",
]


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)


def _python_blocks(text: str, section: str) -> list[str]:
    body = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", body, flags=re.DOTALL)


def readme_commands(text: str) -> list[list[str]]:
    """``lit-gpu`` argv lists (without the program name) of every command in the README's bash blocks.

    A trailing ``> file`` redirect is kept as the last two items (``">"``, file).
    """
    commands = []
    for block in _bash_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            tokens = shlex.split(line, comments=True)
            while tokens and re.fullmatch(r"[A-Z_]+=.*", tokens[0]):  # CUDA_VISIBLE_DEVICES=1 ...
                tokens = tokens[1:]
            if tokens and tokens[0] == "srun":
                tokens = tokens[1:]
            if tokens and tokens[0] == "torchrun" and "-m" in tokens:
                start = tokens.index("-m")
                if tokens[start + 1] == "lit_gpu":
                    tokens = ["lit-gpu", *tokens[start + 2 :]]
            if tokens and tokens[0].endswith("lit-gpu"):
                commands.append(tokens[1:])
    return commands


def _split_redirect(argv: list[str]) -> tuple[list[str], str | None]:
    if ">" in argv:
        i = argv.index(">")
        return argv[:i], argv[i + 1]
    return argv, None


@pytest.fixture(scope="module")
def readme_text() -> str:
    return README.read_text()


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working folder where ``configs/`` resolves to the repo's, as in a checkout."""
    (tmp_path / "configs").symlink_to(REPO_ROOT / "configs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])  # LightningCLI(args=...) warns about pytest's argv
    return tmp_path


def _call(func, *args) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            func(*args)
            code = 0
        except SystemExit as exit_info:
            code = exit_info.code if isinstance(exit_info.code, int) else (0 if exit_info.code is None else 1)
    return code, out.getvalue()


def test_readme_shows_the_expected_commands(readme_text):
    commands = [" ".join(argv) for argv in readme_commands(readme_text)]
    for command in RUN:
        assert command.removeprefix("lit-gpu ") in commands, f"README no longer shows: {command}"
    assert any(argv[0] == "plot" for argv in readme_commands(readme_text))
    assert "srun lit-gpu fit" in readme_text and "#SBATCH --nodes" in readme_text
    assert "torchrun" in readme_text
    for doc in ("docs/benchmarks.md", "docs/gpu_modes.md", "docs/checkpoints.md", "docs/architecture.md"):
        assert f"]({doc})" in readme_text and (REPO_ROOT / doc).is_file(), doc
    for link in re.findall(r"\]\(((?:notebooks|examples|docs)/[^)#]*)", readme_text):
        assert (REPO_ROOT / link).exists(), f"README links to a missing file: {link}"


def _fake_run_for(argv: list[str]) -> None:
    """A run folder with a config.yaml for ``--ckpt_path runs/.../last.ckpt`` (rebuilt from it)."""
    if "--ckpt_path" in argv and argv[argv.index("--ckpt_path") + 1].endswith(".ckpt"):
        ckpt = Path(argv[argv.index("--ckpt_path") + 1])
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        ckpt.touch()
        (ckpt.parent.parent / "config.yaml").write_text((REPO_ROOT / "configs/simple.yaml").read_text())


def test_every_readme_command_parses(readme_text, scratch):
    commands = readme_commands(readme_text)
    assert len(commands) >= 25
    failures = []
    for argv in commands:
        argv, redirect = _split_redirect(argv)
        name = argv[0]
        if name in CLI_SUBCOMMANDS:
            _fake_run_for(argv)
            args = [a for a in argv if a != "--print_config"] + ["--print_config"]
            if "--help" in argv:
                args = argv
            code, out = _call(LitGpuCLI, args)
            if redirect:  # e.g. `--print_config > my_run.yaml`, used by a later command
                Path(redirect).write_text(out)
        elif name in COMMANDS:  # a tool command
            code, out = _call(main, [name, "--help"])
            flags = [a.split("=")[0] for a in argv if a.startswith("--")]
            if name in ("bench", "sweep"):  # own flags, then job flags (--config, --data.*) for `fit`
                own = {f for f in flags if f != "--config" and "." not in f}
                job = [a for i, a in enumerate(argv[1:], 1) if a not in own and argv[i - 1] not in own]
                job_code, _ = _call(LitGpuCLI, ["fit", *job, "--print_config"])
                if job_code != 0:
                    failures.append(f"lit-gpu {' '.join(argv)}: job arguments {job} do not parse")
                flags = sorted(own)
            unknown = [f for f in flags if f not in out]
            if unknown:
                failures.append(f"lit-gpu {' '.join(argv)}: --help of {name} lacks {unknown}")
        elif name in ("--help", "--version"):  # the front door itself
            code, out = _call(main, argv)
        else:
            failures.append(f"unknown lit-gpu sub-command in README: {' '.join(argv)}")
            continue
        if code != 0:
            failures.append(f"lit-gpu {' '.join(argv)}: exit {code}")
    assert not failures, "\n".join(failures)


def test_representative_readme_commands_run_on_cpu(readme_text, scratch, capsys):
    for command in RUN:
        argv = shlex.split(command)[1:]
        if argv[0] in ("fit", "test", "predict") and "--config" in argv:
            argv = argv + DEBUG
        elif argv[0] in ("fit", "test", "predict"):  # a checkpoint alone: model + data of its config.yaml
            argv = argv + ["--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "2"]
        if command.endswith("--ckpt_path last") and argv[0] == "fit":
            argv = argv + ["--trainer.max_epochs", "3"]  # one epoch more than the first run's
        code, _ = _call(main, argv)
        assert code == 0, f"{command} exited {code}:\n{capsys.readouterr().err[-2000:]}"
        if command.endswith("--ckpt_path last") and argv[0] == "fit":
            assert "resuming from" in capsys.readouterr().err
        if argv[0] == "export":  # the README's Python snippets load the files just written
            for snippet in _python_blocks(readme_text, "Checkpoints"):
                exec(compile(snippet, "README.md", "exec"), {})

    run0 = scratch / "runs" / "lit_gpu" / "version_0"
    assert (run0 / "curves.png").stat().st_size > 0
    assert (run0 / "checkpoints" / "last.ckpt").is_file()
    # both resumes continued version_0; each changed config is saved beside its config.yaml
    assert "max_epochs: 3" in (run0 / "config.1.yaml").read_text()
    resumed = run0 / "config.2.yaml"  # rebuilt from the newest saved config, config.1.yaml
    assert "max_epochs: 4" in resumed.read_text() and "limit_train_batches: 4" in resumed.read_text()
    assert (scratch / "model.safetensors").is_file() and (scratch / "model.safetensors.json").is_file()
    header = (scratch / "preds.csv").read_text().splitlines()[0]
    assert header.startswith("index,output_0")
    assert "all 2 keys matched" in capsys.readouterr().out


def test_quickstart_in_order_then_plot_draws_the_training_run_and_evaluations_stay_in_it(scratch, capsys):
    """The Quickstart's first run, ``test --ckpt_path last`` twice, ``plot``, ``fit --ckpt_path last``: one
    run folder; both tests and the resumed fit resolve that run; the evaluations are inside it."""
    from lit_gpu.commands import plot as plot_cmd

    simple = ["--config", "configs/simple.yaml", *DEBUG]
    assert _call(main, ["fit", *simple])[0] == 0
    run0 = scratch / "runs" / "lit_gpu" / "version_0"
    capsys.readouterr()
    for _ in range(2):
        assert _call(main, ["test", *simple, "--ckpt_path", "last"])[0] == 0
        assert (
            f"using {Path('runs/lit_gpu/version_0/checkpoints/last.ckpt')} (step 8" in capsys.readouterr().err
        )
    drawn: dict[str, list[str]] = {}
    real_panel = plot_cmd._panel

    def panel(ax, series, names, title) -> None:
        real_panel(ax, series, names, title)
        drawn[title] = list(names)

    plot_cmd._panel = panel
    try:
        assert _call(main, ["plot"])[0] == 0  # the root: its newest run is the training run
    finally:
        plot_cmd._panel = real_panel
    assert "train/loss_step" in drawn["loss"] and "val/loss" in drawn["loss"]  # curves, not one test dot
    assert (run0 / "curves.png").is_file()
    capsys.readouterr()
    assert _call(main, ["fit", *simple, "--ckpt_path", "last", "--trainer.max_epochs", "3"])[0] == 0
    assert "resuming from runs/lit_gpu/version_0/checkpoints/last.ckpt" in capsys.readouterr().err
    assert sorted(p.name for p in run0.parent.iterdir()) == ["version_0"]
    assert sorted(p.name for p in (run0 / "evaluations").iterdir()) == ["test_0", "test_1"]
    for k in (0, 1):  # each evaluation logged at the checkpoint's last batch: marked on the curves there
        assert (
            (run0 / "evaluations" / f"test_{k}" / "metrics.csv")
            .read_text()
            .splitlines()[1]
            .startswith("0,7,")
        )
