"""A run stopped and restarted keeps one folder (issue 20).

The requeue loop (the same ``fit --ckpt_path last`` command after every stop) continues the
checkpoint's run folder: ``metrics.csv`` and TensorBoard hold each step once, with the values of an
uninterrupted run, and ``lit-gpu plot`` reads all of them. ``--new_run true`` starts a new folder; a
changed config is saved beside the first one; DDP ranks continue the same folder.
"""

from __future__ import annotations

import random
import shutil
import signal
import time
from pathlib import Path

import pytest
import torch
import yaml

from lit_gpu.cli import LitGpuCLI, main
from lit_gpu.commands import plot as plot_cmd
from lit_gpu.commands.plot import main as plot_main
from lit_gpu.commands.plot import read_metrics
from tests.helpers.forked_cli import popen, run_cli
from tests.helpers.paths import CONFIGS

SIMPLE = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]
# 3 epochs x 4 batches; a step checkpoint every 2 steps besides the epoch-end ones
ARGS = [*SIMPLE, "--trainer.max_epochs", "3", "--checkpoint.every_n_train_steps", "2"]
STEPS = list(range(12))
RUN = Path("runs") / "lit_gpu"


def _versions(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.glob("version_*"))


def _scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    """The scalars of a folder's event files as TensorBoard shows them (purged events left out)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def _steps_once(csv_path: Path) -> dict[str, list[int]]:
    """Per metric column, the steps of the rows holding a value (in file order)."""
    import csv

    steps: dict[str, list[int]] = {}
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            for name, cell in row.items():
                if name not in ("step", "epoch") and cell:
                    steps.setdefault(name, []).append(int(row["step"]))
    return steps


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """metrics of the same run, uninterrupted."""
    root = tmp_path_factory.mktemp("reference")
    LitGpuCLI(args=["fit", *ARGS, "--trainer.default_root_dir", str(root)])
    return read_metrics(root / "lit_gpu" / "version_0")


def _record_plotted_lines(monkeypatch) -> dict[str, dict]:
    """What ``lit-gpu plot`` draws, per panel: ``{title: {label: (xs, ys, xlim)}}``."""
    drawn: dict[str, dict] = {}
    real_panel = plot_cmd._panel

    def panel(ax, series, names, title) -> None:
        real_panel(ax, series, names, title)
        drawn[title] = {
            line.get_label(): ([float(x) for x in line.get_xdata()], list(line.get_ydata()), ax.get_xlim())
            for line in ax.get_lines()
        }

    monkeypatch.setattr(plot_cmd, "_panel", panel)
    return drawn


def test_requeue_loop_keeps_one_folder_with_each_step_once(tmp_path, cli_env, reference, monkeypatch):
    cmd = ["fit", *ARGS, "--ckpt_path", "last"]
    cmd += ["--trainer.callbacks+=tests.helpers.robustness.KillAtStepFromEnv"]
    # SIGKILL (node loss) one step after a checkpoint, three times: the killed attempts logged
    # steps past their checkpoint (2, 6, 10), which the next attempt logs again
    for kill_at in ("3", "7", "11", ""):
        env = dict(cli_env, LIT_GPU_TEST_KILL_AT=kill_at)
        done = run_cli(cmd, tmp_path, env, timeout=300)  # forked: tests/helpers/forked_cli.py
        assert done.returncode == (0 if not kill_at else -9), done.stderr[-3000:]
        if kill_at != "3":  # the first attempt found no checkpoint and started the folder
            assert f"lit-gpu: continuing the run in {RUN / 'version_0'} from step " in done.stderr

    assert _versions(tmp_path / RUN) == ["version_0"]
    run = tmp_path / RUN / "version_0"
    assert sorted(p.name for p in run.glob("config*.yaml")) == ["config.yaml"]  # same command: one config
    for name, steps in _steps_once(run / "metrics.csv").items():
        assert len(steps) == len(set(steps)), (name, steps)  # no duplicate, no rewound step
    series = read_metrics(run)  # what lit-gpu plot draws
    assert [s for s, _ in series["train/loss_step"]] == STEPS
    assert series["train/loss_step"] == reference["train/loss_step"]  # the exact resume's values
    assert series["val/loss"] == reference["val/loss"]
    tb = _scalars(run, "train/loss_step")  # TensorBoard: purged events of the killed attempts
    assert [s for s, _ in tb] == STEPS
    assert [v for _, v in tb] == pytest.approx([v for _, v in reference["train/loss_step"]], rel=1e-6)
    drawn = _record_plotted_lines(monkeypatch)
    assert plot_main([str(run)]) == 0 and (run / "curves.png").is_file()
    xs, ys, (left, right) = drawn["loss"]["train/loss (step)"]  # the plot covers every step of the run
    assert xs == STEPS and left <= 0 and right >= STEPS[-1]
    assert ys == [v for _, v in reference["train/loss_step"]]
    assert drawn["loss"]["val/loss"][0] == [s for s, _ in reference["val/loss"]]  # 3 epochs' validations
    assert len(drawn["loss"]["val/loss"][0]) == 3
    assert sorted(p.name for p in (run / "checkpoints").glob("last*")) == ["last.ckpt"]


def test_new_run_flag_starts_a_new_folder_and_a_changed_config_is_kept_beside(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    LitGpuCLI(args=["fit", *SIMPLE, "--trainer.max_epochs", "1"])
    run = tmp_path / RUN / "version_0"
    first_config = (run / "config.yaml").read_text()
    metrics = (run / "metrics.csv").read_text()
    LitGpuCLI(args=["fit", *SIMPLE, "--trainer.max_epochs", "2", "--ckpt_path", "last", "--new_run", "true"])
    assert _versions(tmp_path / RUN) == ["version_0", "version_1"]
    assert (run / "metrics.csv").read_text() == metrics  # the old folder is left alone
    capsys.readouterr()

    # the same run, continued with more epochs: config.yaml stays, the change is saved beside and named
    fit = LitGpuCLI(
        args=[
            "fit",
            *SIMPLE,
            "--trainer.max_epochs",
            "3",
            "--ckpt_path",
            str(run / "checkpoints" / "last.ckpt"),
        ]
    )
    err = capsys.readouterr().err
    assert fit.trainer.global_step == 12 and _versions(tmp_path / RUN) == ["version_0", "version_1"]
    assert (run / "config.yaml").read_text() == first_config
    saved = yaml.safe_load((run / "config.1.yaml").read_text())
    assert saved["trainer"]["max_epochs"] == 3
    lines = [ln for ln in err.splitlines() if "config differs" in ln]
    assert lines == [
        "lit-gpu: the config differs from config.yaml (trainer.max_epochs: 1 -> 3); "
        "saved it beside as config.1.yaml"
    ]
    assert [s for s, _ in read_metrics(run)["train/loss_step"]] == STEPS
    # the checkpoint alone takes only model and data from the newest config (files are data): the
    # trainer settings of this call differ, so they are kept beside as config.2.yaml, in the same folder
    LitGpuCLI(
        args=["fit", "--ckpt_path", str(run / "checkpoints" / "last.ckpt"), "--trainer.max_epochs", "3"]
    )
    assert sorted(p.name for p in run.glob("config*.yaml")) == [
        "config.1.yaml",
        "config.2.yaml",
        "config.yaml",
    ]
    rebuilt = yaml.safe_load((run / "config.2.yaml").read_text())
    assert rebuilt["model"] == saved["model"] and rebuilt["data"] == saved["data"]
    assert _versions(tmp_path / RUN) == ["version_0", "version_1"]


def test_checkpoint_copied_from_another_machine_continues_where_it_is(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    LitGpuCLI(
        args=["fit", *SIMPLE, "--trainer.max_epochs", "1", "--trainer.default_root_dir", "cluster/runs"]
    )
    copied = tmp_path / "laptop" / "runs"
    shutil.copytree(tmp_path / "cluster" / "runs", copied)
    shutil.rmtree(tmp_path / "cluster")  # the other machine's path does not exist here
    run = copied / "lit_gpu" / "version_0"
    # the checkpoint alone rebuilds model and data only; trainer settings come from the command line
    trainer = [
        "--trainer.max_epochs",
        "2",
        "--trainer.limit_train_batches",
        "4",
        "--trainer.log_every_n_steps",
        "1",
    ]
    LitGpuCLI(args=["fit", "--ckpt_path", str(run / "checkpoints" / "last.ckpt"), *trainer])
    assert not (tmp_path / "cluster").exists() and _versions(copied / "lit_gpu") == ["version_0"]
    assert [s for s, _ in read_metrics(run)["train/loss_step"]] == list(range(8))
    assert sorted(p.name for p in (run / "checkpoints").glob("last*")) == ["last.ckpt"]  # no last-v1.ckpt


def test_ddp_ranks_continue_one_folder(tmp_path, cli_env):
    cmd = [
        "fit",
        *SIMPLE,
        "--trainer.strategy",
        "ddp",
        "--trainer.devices",
        "2",
    ]
    for epochs in ("1", "2"):
        done = run_cli(
            [*cmd, "--trainer.max_epochs", epochs, "--ckpt_path", "last"], tmp_path, cli_env, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("lit-gpu: continuing the run in") == 1  # said once, by rank 0
    assert _versions(tmp_path / RUN) == ["version_0"]
    run = tmp_path / RUN / "version_0"
    steps = _steps_once(run / "metrics.csv")
    assert steps["train/loss_step"] == list(range(8))  # 2 epochs x 4 batches, each step once
    assert sorted(p.name for p in run.glob("config*.yaml")) == ["config.1.yaml", "config.yaml"]


def test_a_run_folder_with_links_out_of_it_is_not_continued(tmp_path, monkeypatch, capsys):
    """Issue 18: continuing writes hparams.yaml, metrics.csv, config.N.yaml into the folder; a planted
    link there would make that a write outside. One line, exit 2, the victim untouched; --new_run works."""
    monkeypatch.chdir(tmp_path)
    LitGpuCLI(args=["fit", *SIMPLE, "--trainer.max_epochs", "1"])
    run = tmp_path / RUN / "version_0"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (run / "hparams.yaml").unlink()
    (run / "hparams.yaml").symlink_to(victim)
    (run / "config.1.yaml").symlink_to(tmp_path / "created.yaml")  # dangling: a write would create it
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["fit", *SIMPLE, "--trainer.max_epochs", "2", "--ckpt_path", "last"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("lit-gpu: error")]
    assert info.value.code == 2 and len(err) == 1 and "links that lead outside it" in err[0]
    assert victim.read_text() == "precious" and not (tmp_path / "created.yaml").exists()
    LitGpuCLI(args=["fit", *SIMPLE, "--trainer.max_epochs", "2", "--ckpt_path", "last", "--new_run", "true"])
    assert _versions(tmp_path / RUN) == ["version_0", "version_1"]
    assert victim.read_text() == "precious" and not (tmp_path / "created.yaml").exists()


def _started_since(parent: Path, since: float) -> bool:
    """An attempt has claimed, taken over or started writing a run folder since ``since``."""
    marks = [
        *parent.glob("version_*"),
        *parent.glob("version_*/.lit_gpu.lock"),
    ]  # a take-over touches its lock
    return any(p.stat().st_mtime >= since for p in marks)


#: the default tier's sample of the loop below: a kill as the folder appears, one a random 0-0.5 s after
#: it, one a random 0-8 s after the start; the full loop (15 attempts) is marked ``full`` (CI)
REQUEUE_SAMPLE = (0, 2, 8)


def test_a_requeue_loop_of_a_sample_of_sigkills_leaves_one_run_folder(tmp_path, cli_env):
    """The loop below, 3 attempts: each kind of kill once."""
    _requeue_loop(tmp_path, cli_env, REQUEUE_SAMPLE)


@pytest.mark.full
def test_a_requeue_loop_of_sigkills_at_random_times_leaves_one_run_folder(tmp_path, cli_env):
    """15 SIGKILLs at random times, then the same command to the end: one run folder, no claim litter,
    no lock left, the run complete. While no checkpoint exists, the first eight attempts are killed a
    random 0-0.5 s after their run folder appeared or was taken over (the first two at once): before their
    first checkpoint, the folder a requeued job used to leave behind; the others a random 0-8 s after the
    start."""
    _requeue_loop(tmp_path, cli_env, range(15))


def _requeue_loop(tmp_path: Path, cli_env: dict[str, str], attempts) -> None:
    # 16 batches an epoch: the first checkpoint ~1 s after the folder appears (with 4, ~0.3 s: on an idle
    # machine every kill came after it)
    cmd = [*("fit", *SIMPLE, "--trainer.max_epochs", "12"), *("--trainer.limit_train_batches", "16")]
    cmd += ["--ckpt_path", "last"]
    rng = random.Random(40)
    parent = tmp_path / RUN
    before_first_checkpoint = 0
    for attempt in attempts:
        start = time.time() - 0.05  # file times are a little coarse
        run = popen(cmd, tmp_path, cli_env)
        if attempt < 8 and not any(parent.glob("version_*/checkpoints/*.ckpt")):
            while run.poll() is None and not _started_since(parent, start):  # watched, never slowed
                time.sleep(0.002)
            wait = 0 if attempt < 2 else rng.uniform(0, 0.5)  # the first two killed as their folder appears
            deadline = time.time() + wait
        else:
            deadline = start + rng.uniform(0, 8)
        while run.poll() is None and time.time() < deadline:
            time.sleep(0.002)
        if run.poll() is None:
            before_first_checkpoint += not any(parent.glob("version_*/checkpoints/*.ckpt"))
            run.send_signal(signal.SIGKILL)
        run.communicate(timeout=120)
    assert before_first_checkpoint >= 2  # the case this is about happened
    done = run_cli(cmd, tmp_path, cli_env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in parent.iterdir()) == ["version_0"], done.stderr[-2000:]
    run_dir = parent / "version_0"
    assert not (run_dir / ".lit_gpu.lock").exists()
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert state["global_step"] == 192  # 12 epochs x 16 batches
    for name, steps in _steps_once(run_dir / "metrics.csv").items():
        assert len(steps) == len(set(steps)), (name, steps)
