"""The README's commands stay true (and those of the docs pages its detail moved to, ``COMMAND_PAGES``).

* Every ``lit-gpu`` command in their ``bash`` blocks (also under ``srun`` and ``torchrun -m
  lit_gpu``) parses: fit/validate/test/predict with ``--print_config`` (configs exist, keys and types
  are valid; GPU-only commands included, since nothing is instantiated), tool commands by checking
  that every ``--flag`` they use is in the tool's ``--help``.
* A representative set runs for real on CPU, in README order, in a scratch folder: train, resume,
  plot, export, the README's Python loading snippets, predict, test, env, and the ``dp`` mode
  (fit/test/predict with ``configs/debug.yaml`` appended to stay fast).
* The Quickstart, in order after the first run: every run names its folder, ``plot`` draws the run just
  trained, ``test --ckpt_path last`` evaluates it; the ``# N callbacks`` comment counts right.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from lit_gpu.cli import LitGpuCLI, main
from lit_gpu.cli.main import COMMANDS
from tests.helpers.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
#: the docs pages holding what the README held before it became a quick start: their commands are checked too
COMMAND_PAGES = tuple(
    REPO_ROOT / "docs" / f"{name}.md"
    for name in ("modes", "multi_gpu", "runs", "sweeps", "usage", "troubleshooting", "install")
)
RUNS_PAGE = REPO_ROOT / "docs" / "runs.md"  # its Python snippets load the files the commands wrote
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
    """The README, then each of ``COMMAND_PAGES``."""
    return "\n\n".join(page.read_text() for page in (README, *COMMAND_PAGES))


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
    readme = README.read_text()
    assert len(readme.splitlines()) <= 250  # a quick start; the detail is one link away
    assert len((REPO_ROOT / "docs" / "benchmarks.md").read_text().splitlines()) <= 400  # current figures
    topics = ("benchmarks", "gpu_modes", "checkpoints", "architecture", *(p.stem for p in COMMAND_PAGES))
    for doc in (f"docs/{name}.md" for name in topics):
        assert f"]({doc})" in readme and (REPO_ROOT / doc).is_file(), doc  # every topic one link away
    for link in re.findall(r"\]\(((?:notebooks|examples|docs|configs|tests)/[^)#]*)", readme):
        assert (REPO_ROOT / link).exists(), f"README links to a missing file: {link}"
    for page in COMMAND_PAGES:
        for link in re.findall(r"\]\((?!https?:)([^)#]+)", page.read_text()):
            assert (page.parent / link).exists(), f"{page.name} links to a missing file: {link}"
    for page in (README, *sorted((REPO_ROOT / "docs").glob("*.md"))):  # a user's machine has no ../shared
        assert "../shared" not in page.read_text(), f"{page.name} names a path beside this repository"


def test_the_readme_mnist_commands_read_data_and_offline_from_data_mnist_raw(scratch, fake_mnist_dir, capsys):
    """The README's MNIST commands use ``./data``; the offline one trains from the IDX files put in
    ``data/MNIST/raw/`` (here a small fake MNIST), as the README says."""
    mnist = [argv for argv in readme_commands(README.read_text()) if "configs/mnist.yaml" in argv]
    assert ["fit", "--config", "configs/mnist.yaml"] in mnist
    assert all("--data.data_dir" not in argv for argv in mnist)
    [offline] = [argv for argv in mnist if "--data.download" in argv]
    (scratch / "data").symlink_to(fake_mnist_dir)
    small = ["--model.init_args.net.init_args.channels", "4", "--data.val_size", "100", *DEBUG]
    code, _ = _call(main, offline + small)
    assert code == 0, capsys.readouterr().err[-2000:]
    assert (scratch / "runs" / "lit_gpu" / "version_0" / "checkpoints" / "last.ckpt").is_file()


def _fake_run_for(argv: list[str]) -> None:
    """A run folder with a config.yaml for ``--ckpt_path runs/.../last.ckpt`` (rebuilt from it)."""
    if "--ckpt_path" in argv and argv[argv.index("--ckpt_path") + 1].endswith(".ckpt"):
        ckpt = Path(argv[argv.index("--ckpt_path") + 1])
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        ckpt.touch()
        (ckpt.parent.parent / "config.yaml").write_text((REPO_ROOT / "configs/simple.yaml").read_text())


def _unique(commands: list[list[str]], seen: set[tuple[str, ...]]) -> list[list[str]]:
    """``commands`` less those in ``seen`` or repeated (a parse builds the CLI: ~1 s); ``seen`` grows."""
    fresh = []
    for argv in commands:
        if tuple(argv) not in seen:
            seen.add(tuple(argv))
            fresh.append(argv)
    return fresh


def test_every_readme_command_parses(scratch):
    """README.md's own commands; the docs pages' (what the README held before it became a quick start)
    are the ``full`` test below."""
    commands = _unique(readme_commands(README.read_text()), set())
    assert len(commands) >= 20
    _assert_each_parses(commands)


@pytest.mark.full
def test_every_command_of_the_docs_pages_parses(readme_text, scratch):
    """Every command of the README and the docs pages (``COMMAND_PAGES``), in order (a page's command may
    read a file an earlier one wrote), each distinct command once."""
    commands = _unique(readme_commands(readme_text), set())
    assert len(commands) >= 50
    _assert_each_parses(commands)


def _assert_each_parses(commands: list[list[str]]) -> None:
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
            for snippet in _python_blocks(RUNS_PAGE.read_text(), "Checkpoints"):
                exec(compile(snippet, "docs/runs.md", "exec"), {})

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
        chosen = Path("runs/lit_gpu/version_0/checkpoints/last.ckpt")
        assert f"using {chosen} (step 7" in capsys.readouterr().err  # metrics.csv's step: global step - 1
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


#: appended to the Quickstart's training commands: the same commands, a few batches each
FEW_BATCHES = [
    "--trainer.max_epochs",
    "2",
    "--trainer.limit_train_batches",
    "4",
    "--trainer.limit_val_batches",
    "2",
]
RUN_LINE = re.compile(r"^lit-gpu: run (\S+?)(?:;|$)", re.MULTILINE)


def _quickstart(text: str) -> list[list[str]]:
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return readme_commands("```" + section.split("```", 2)[1] + "```")  # the section's first block


def test_the_quickstart_in_order_names_each_run_and_plots_and_tests_the_one_just_trained(scratch, capsys):
    """After the README's first run (version_0), the Quickstart as written: each ``fit`` prints its run folder
    (the debug config's too); ``plot`` draws the run the ``fit`` before it trained; ``test --ckpt_path
    last`` evaluates that run's ``last.ckpt``, not the debug run's, and logs into it."""
    readme = README.read_text()
    exp1 = scratch / "exp1"
    assert _call(main, ["fit", "--config", "configs/simple.yaml", *FEW_BATCHES])[0] == 0  # the first run
    trained: Path | None = None
    seen = {"fit": 0, "plot": 0, "test": 0}
    for argv in _quickstart(readme):
        argv = [str(exp1) if a == "/tmp/exp1" else a for a in argv]  # the scratch folder, not /tmp
        argv, redirect = _split_redirect(argv)
        is_run = argv[0] in ("fit", "test") and "--help" not in argv and "--print_config" not in argv
        extra = FEW_BATCHES if argv[0] == "fit" and is_run and "configs/debug.yaml" not in argv else []
        capsys.readouterr()
        code, out = _call(main, argv + extra)
        err = capsys.readouterr().err
        assert code == 0, f"{' '.join(argv)} exited {code}:\n{err[-2000:]}"
        if redirect:
            Path(redirect).write_text(out)
        if not is_run and argv[0] != "plot":
            continue
        seen[argv[0]] += 1
        if argv[0] == "fit":
            folders = RUN_LINE.findall(out)
            assert len(folders) == 1, f"{' '.join(argv)} does not name its run folder:\n{out[-2000:]}"
            trained = scratch / folders[0] if argv[-1] != "configs/debug.yaml" else trained
            assert (scratch / folders[0] / "config.yaml").is_file()
            assert "lit-gpu: fit done in " in out
        elif argv[0] == "plot":
            assert trained is not None
            root = Path(argv[1]) if len(argv) > 1 else scratch / "runs"
            assert trained.is_relative_to(root)
            drawn = sorted(root.rglob("curves.png"))
            assert trained / "curves.png" in drawn, (trained, drawn)  # the run just trained, not version_0
        else:  # test --ckpt_path last
            assert trained is not None and trained.name != "version_0"
            chosen = Path("runs") / "lit_gpu" / trained.name / "checkpoints" / "last.ckpt"
            assert f"using {chosen} " in err, err[-2000:]
            evaluation = Path("runs") / "lit_gpu" / trained.name / "evaluations" / "test_0"
            assert RUN_LINE.findall(out) == [str(evaluation)]  # inside the run just trained
            assert (trained / "evaluations" / "test_0" / "metrics.csv").is_file()
    assert seen == {"fit": 4, "plot": 2, "test": 1}, seen  # the Quickstart still shows what this checks


def test_the_callbacks_comment_counts_the_printed_callbacks(readme_text, scratch):
    """``--trainer.callbacks+=... --print_config   # N callbacks``: the config printed holds N."""
    lines = [ln for ln in readme_text.splitlines() if re.search(r"--print_config\s+# \d+ callbacks", ln)]
    assert lines, "the docs no longer show the callbacks example"
    for line in lines:
        argv = shlex.split(line.split("#")[0])[1:]
        said = int(re.search(r"# (\d+) callbacks", line).group(1))
        code, out = _call(LitGpuCLI, argv)
        assert code == 0
        callbacks = yaml.safe_load(out)["trainer"]["callbacks"]
        assert len(callbacks) == said, [c["class_path"] for c in callbacks]
