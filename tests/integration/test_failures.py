"""Every common mistake ends with one clear line and a non-zero exit, and nothing saved is lost."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lit_gpu.checkpoints import load_into
from lit_gpu.cli import main
from lit_gpu.nets import SimpleModel
from tests.helpers.forked_cli import popen
from tests.helpers.paths import CONFIGS
from tests.helpers.robustness import HOLD_ENV
from tests.helpers.simple_run import SIMPLE, fit_simple

RUN = Path("runs") / "lit_gpu"


def _run(argv: list[str], capsys) -> tuple[int, str]:
    """Run ``lit-gpu`` in-process; return (exit code, the lit-gpu error lines of stderr)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    return info.value.code, [ln for ln in err.splitlines() if ln.startswith("lit-gpu: error:")]


@pytest.fixture(autouse=True)
def _plain_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])  # in-process runs: no pytest flags in sys.argv


@pytest.fixture(scope="module")
def simple_ckpt(tmp_path_factory) -> Path:
    """A real last.ckpt of the simple model (one short fit, in-process)."""
    return fit_simple(tmp_path_factory.mktemp("simple_run"))


MEANT = "(did you mean --trainer.max_epochs?)"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--trainer.max_epochz", "3"], f"unknown flag --trainer.max_epochz {MEANT}"),
        # argparse's abbreviations are off: a prefix of a flag is a typo, not max_epochs (issue 58)
        (["--trainer.max_epoch", "3"], f"unknown flag --trainer.max_epoch {MEANT}"),
        (["--trainer.max_epoch=3"], f"unknown flag --trainer.max_epoch {MEANT}"),
        (["--trainer.max_epochs", "three"], 'Parser key "trainer.max_epochs"'),
    ],
)
def test_bad_config_key_or_type_is_one_line(args, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, lines = _run(["fit", *SIMPLE, *args], capsys)
    assert code == 2 and len(lines) == 1 and needle in lines[0], lines
    assert "Given value: three" in lines[0] or "three" not in args


def test_missing_mnist_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["fit", "--config", str(CONFIGS / "mnist.yaml"), "--config", str(CONFIGS / "debug.yaml")]
    code, lines = _run([*argv, "--data.data_dir", str(tmp_path / "nope"), "--data.download", "false"], capsys)
    assert code == 2 and len(lines) == 1 and "MNIST not found" in lines[0]


MNIST_ARGS = ["--config", str(CONFIGS / "mnist.yaml"), "--config", str(CONFIGS / "debug.yaml")]


def _one_line(argv: list[str], capsys) -> str:
    """Run ``lit-gpu`` in-process; assert exit 2, no traceback and one error line; return that line."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("lit-gpu: error:")]
    assert info.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


@pytest.mark.parametrize(
    "args, needles",
    [
        (
            ["--model", "lit_gpu.modules.ClassificationModul"],
            [
                "model: module 'lit_gpu.modules' has no attribute 'ClassificationModul'",
                "ClassificationModule?",
            ],
        ),
        (
            ["--model.optimizer", "torch.optim.Adamm"],
            ["model.optimizer: module 'torch.optim' has no attribute 'Adamm'", "torch.optim.Adam?"],
        ),
        (["--model", "mymod.MyModule"], ["No module named 'mymod'", "PYTHONPATH=."]),
        (
            ["--model.optimizer.init_args.lrr", "0.1"],
            ["torch.optim.SGD has no argument 'lrr' (did you mean lr?)"],
        ),
        (["--data.batch_size", "0"], ["data.batch_size must be a positive integer, got 0"]),
        (["--data.batch_size", "-1"], ["data.batch_size must be a positive integer, got -1"]),
        (["--trainer.devices", "0"], ["--trainer.devices 0: invalid trainer setting", "devices='0'"]),
        (
            ["--trainer.max_epochs", "-5"],
            ["--trainer.max_epochs -5: invalid trainer setting", "You passed in -5"],
        ),
        (["--trainer.strategy", "ddpp"], ["--trainer.strategy ddpp: invalid trainer setting"]),
        (
            ["--model.optimizer.lr", "-1"],
            ["model.optimizer.init_args.lr: -1.0 refused by SGD (Invalid learning rate: -1.0)"],
        ),
        (
            ["--checkpoint.monitor", "val/accc"],
            ["--checkpoint.monitor val/accc: the model never logs", "val/loss"],
        ),
        (["--trainer.devices", "abc"], ["--trainer.devices abc: invalid trainer setting", "`devices`"]),
        (["--trainer.val_check_interval", "5000"], ["trainer.val_check_interval: invalid trainer setting"]),
        (["--data.teacher", "foo"], ["data.teacher must be one of linear, relu, got 'foo'"]),
        (["--model.net.in_features", "5"], ["the net SimpleModel does not fit the data", "shape (64, 10)"]),
        (["--data.out_features", "null"], ["data.out_features must be a positive integer, got None"]),
        (["--data.noise", "-1"], ["data.noise must be a finite number >= 0, got -1.0"]),
        (
            ["--data.num_samples", "1000000000000"],
            ["data.num_samples=1000000000000", "would need 120.0 TB", "make data.num_samples smaller"],
        ),
        (  # ~2 EB: more than any address space, so refused at once even where the kernel overcommits
            [
                "--model.net.init_args.in_features",
                "700000000",
                "--model.net.init_args.out_features",
                "700000000",
            ],
            [
                "model.init_args.net: lit_gpu.nets.SimpleModel(in_features=700000000, "
                "out_features=700000000) asks for 2.0 EB while it is built",
                "make it smaller (model.init_args.net.init_args.*",
            ],
        ),
        (  # more than 2**63 bytes: torch refuses to compute the size
            [
                "--model.net.init_args.in_features",
                str(10**10),
                "--model.net.init_args.out_features",
                str(10**10),
            ],
            ["model.init_args.net: lit_gpu.nets.SimpleModel(in_features=10000000000", "over 9.2 EB"],
        ),
    ],
)
def test_user_mistakes_are_one_line_with_the_cause(args, needles, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _one_line(["fit", *SIMPLE, *args], capsys)
    assert "Expected a NoneType" not in line
    for needle in needles:
        assert needle in line, line


def test_users_module_found_with_pythonpath_hint_only_when_missing(tmp_path, monkeypatch, capsys):
    (tmp_path / "mymod_for_test.py").write_text(
        "from lit_gpu.modules import RegressionModule\n\nclass MyModule(RegressionModule):\n    pass\n"
    )
    monkeypatch.chdir(tmp_path)
    line = _one_line(["fit", *SIMPLE, "--model", "mymod_for_test.MyModule"], capsys)
    assert "cannot import mymod_for_test.MyModule" in line
    assert "mymod_for_test.py is in this folder, which is not on the Python path; run PYTHONPATH=." in line
    monkeypatch.syspath_prepend(str(tmp_path))  # PYTHONPATH=. : the same command runs
    main(["fit", *SIMPLE, "--model", "mymod_for_test.MyModule", "--trainer.max_epochs", "1"])


def test_predict_out_that_is_a_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _one_line(["predict", *SIMPLE, "--predict_out", str(tmp_path)], capsys)
    assert f"--predict_out {tmp_path} is a directory; give a file name" in line


@pytest.mark.parametrize("text, holds", [("- a\n- b\n", "'- a\\n- b'"), ("", "nothing")])
def test_a_config_that_is_not_a_mapping_is_named(text, holds, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("odd.yaml").write_text(text)
    line = _one_line(["fit", *SIMPLE, "--config", "odd.yaml"], capsys)
    assert line.startswith("lit-gpu: error: odd.yaml is not a config") and f"holds {holds};" in line, line


def test_yaml_syntax_error_names_the_file_and_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("mine.yaml").write_text("trainer:\n  max_epochs: 3\n  callbacks: [\n")
    line = _one_line(["fit", *SIMPLE, "--config", "mine.yaml"], capsys)
    assert line.startswith("lit-gpu: error: mine.yaml, line ") and "YAML syntax error" in line


def test_truncated_mnist_file_is_named_with_its_size(tmp_path, monkeypatch, capsys):
    from tests.helpers.fake_mnist import make_fake_mnist

    root = make_fake_mnist(tmp_path / "data", n_train=120, n_test=20)
    images = root / "MNIST" / "raw" / "train-images-idx3-ubyte"
    full = images.stat().st_size
    images.write_bytes(images.read_bytes()[:1000])
    monkeypatch.chdir(tmp_path)
    args = ["--data.data_dir", str(root), "--data.download", "false", "--data.val_size", "20"]
    line = _one_line(["fit", *MNIST_ARGS, *args], capsys)
    assert f"{images} is truncated or corrupt: 1000 bytes, its header promises {full} bytes" in line
    assert "download MNIST again" in line


def test_simple_model_on_mnist_names_net_batch_shape_and_expectation(
    fake_mnist_dir, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    args = ["--data.data_dir", str(fake_mnist_dir), "--data.download", "false", "--data.num_workers", "0"]
    args += ["--data.val_size", "100", "--data.batch_size", "16", "--model.net", "lit_gpu.nets.SimpleModel"]
    line = _one_line(["fit", *MNIST_ARGS, *args], capsys)
    assert "the net SimpleModel does not fit the data: it got a batch of shape (16, 1, 28, 28)" in line
    assert "fc: Linear, in_features=10" in line and "(B, 10)" in line
    assert "use an image net (e.g. --model.net lit_gpu.nets.MnistCNN)" in line


def test_truncated_checkpoint(simple_ckpt, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    data = simple_ckpt.read_bytes()
    (tmp_path / "trunc.ckpt").write_bytes(data[: len(data) // 3])
    code, lines = _run(["fit", *SIMPLE, "--ckpt_path", "trunc.ckpt"], capsys)
    assert code == 2 and len(lines) == 1 and "trunc.ckpt is corrupt or truncated" in lines[0]
    assert simple_ckpt.read_bytes() == data  # the good one is untouched


def test_checkpoint_of_another_model(simple_ckpt, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    foonet = ["--config", str(CONFIGS / "foonet.yaml"), "--config", str(CONFIGS / "debug.yaml")]
    code, lines = _run(["fit", *foonet, "--ckpt_path", str(simple_ckpt)], capsys)
    assert code == 2 and len(lines) == 1, lines
    assert "does not fit RegressionModule" in lines[0]
    assert "3 missing (net.linears.0.weight" in lines[0] and "2 unexpected (net.fc.weight" in lines[0]


def test_nan_loss_stops_with_step_and_keeps_last_good_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = [
        "fit", *SIMPLE,
        "--model", "tests.helpers.robustness.NaNAtStepModule",
        "--model.init_args.bad_step", "6",
        "--checkpoint.every_n_train_steps", "2",
        "--checkpoint.monitor", "null",
    ]  # fmt: skip
    code, lines = _run(argv, capsys)
    assert code == 2 and len(lines) == 1 and "loss became NaN at step 6" in lines[0], lines
    last = tmp_path / RUN / "version_0" / "checkpoints" / "last.ckpt"
    assert str(last.relative_to(tmp_path)) in lines[0]
    ckpt = torch.load(last, weights_only=True)
    assert ckpt["global_step"] == 6
    assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values())


def test_oom_gives_next_steps(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, lines = _run(["fit", *SIMPLE, "--model", "tests.helpers.robustness.OOMModule"], capsys)
    assert code == 2 and len(lines) == 1
    for step in (
        "tried to allocate 2.00 GiB",
        "--data.batch_size",
        "--trainer.accumulate_grad_batches",
        "--config lit_gpu:trainer/amp",
        "--config lit_gpu:trainer/fsdp;",
        "--tune_batch_size true",
    ):
        assert step in lines[0], step


def test_dataloader_worker_crash(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = [
        "fit", *SIMPLE,
        "--data", "tests.helpers.robustness.CrashingWorkerDataModule",
        "--data.init_args.kill_after", "200",
        "--checkpoint.every_n_train_steps", "1",
        "--checkpoint.monitor", "null",
    ]  # fmt: skip
    code, lines = _run(argv, capsys)
    assert code == 2 and len(lines) == 1 and "DataLoader worker process died" in lines[0], lines
    assert "--data.num_workers 0" in lines[0]
    net = SimpleModel(10, 10)
    assert load_into(net, tmp_path / RUN / "version_0" / "checkpoints" / "last.ckpt").ok


def test_sigint_saves_a_usable_checkpoint_and_exits_130(tmp_path, cli_env):
    argv = ["fit", *SIMPLE, "--trainer.max_epochs", "50"]
    argv += ["--trainer.callbacks+=tests.helpers.robustness.SlowSteps", "--trainer.callbacks.seconds", "0"]
    held = {**cli_env, HOLD_ENV: "2"}  # the run waits at step 2 for the signal: it lands there
    proc = popen(argv, tmp_path, held, stdout=subprocess.DEVNULL)  # forked: tests/helpers/forked_cli.py
    progress = tmp_path / "progress.txt"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if progress.exists() and int(progress.read_text() or 0) >= 2:
            break
        time.sleep(0.05)
    assert not list(tmp_path.glob("runs/lit_gpu/version_0/checkpoints/*.ckpt"))  # nothing saved yet
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    err = err.decode()
    assert proc.returncode == 130, err[-2000:]
    assert "lit-gpu: stopped by SIGINT at step" in err
    assert err.rstrip().endswith("--ckpt_path runs/lit_gpu/version_0/checkpoints/last.ckpt")  # this run's
    last = tmp_path / RUN / "version_0" / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    assert ckpt["global_step"] == 2
    assert load_into(SimpleModel(10, 10), ckpt).ok


def test_fsdp_config_parses(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    fsdp = CONFIGS / "trainer" / "fsdp.yaml"
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", str(CONFIGS / "simple.yaml"), "--config", str(fsdp), "--print_config"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "FSDPStrategy" in out and "bf16-mixed" in out
    shutil.rmtree(tmp_path / "runs", ignore_errors=True)


def test_a_sweep_search_space_passed_as_config_does_not_blame_typing_union(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _one_line(["fit", *SIMPLE, "--config", str(CONFIGS / "sweeps" / "mnist_fast.yaml")], capsys)
    assert "no class_path given there?" in line and "typing.Union" not in line, line


@pytest.mark.parametrize(
    ("command", "step"), [("predict", "predict_step"), ("test", "test_step"), ("validate", "validation_step")]
)
def test_an_evaluation_of_a_model_without_its_step_is_one_line(command, step, tmp_path, monkeypatch, capsys):
    (tmp_path / "nostep_for_test.py").write_text(
        "import lightning.pytorch as pl\nimport torch\n\n\n"
        "class NoSteps(pl.LightningModule):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.layer = torch.nn.Linear(10, 10)\n\n"
        "    def training_step(self, batch, batch_idx):\n"
        "        return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    line = _one_line([command, *SIMPLE, "--model", "nostep_for_test.NoSteps"], capsys)
    assert f"model.class_path nostep_for_test.NoSteps: the model has no {step}" in line
    assert f"lit-gpu {command} cannot run it" in line
    assert f"define {step}(self, batch, batch_idx)" in line and "lit_gpu.modules" in line
    assert not (tmp_path / "predictions.csv").exists()
    assert not (tmp_path / "runs" / "lit_gpu" / "version_0" / "evaluations").exists()


@pytest.mark.parametrize(
    "old, new, needles",
    [
        ("lr: 0.05", "lr: {}", ["model.optimizer.init_args.lr: tensor([]) refused by SGD (Tensor lr"]),
        ("momentum: 0.9", "momentum: null", ["model.optimizer.init_args.momentum: None refused by SGD"]),
        (
            "    out_features: 10\n    num_samples",
            "    out_features: null\n    num_samples",
            ["data.out_features"],
        ),
        ("num_samples: 2048", "num_samples: 1e12", ['Parser key "data.num_samples"', "1000000000000.0"]),
        ("num_samples: 2048", "num_samples: 1000000000000", ["make data.num_samples smaller"]),
    ],
)
def test_one_field_changes_of_simple_yaml_are_one_line(old, new, needles, tmp_path, monkeypatch, capsys):
    """Values that reach torch unchecked from a config file (the command line's parser checks more)."""
    text = (CONFIGS / "simple.yaml").read_text()
    assert old in text
    (tmp_path / "changed.yaml").write_text(text.replace(old, new, 1))
    monkeypatch.chdir(tmp_path)
    line = _one_line(["fit", "--config", "changed.yaml", "--config", str(CONFIGS / "debug.yaml")], capsys)
    for needle in needles:
        assert needle in line, line


def test_a_misspelt_key_in_a_config_file_is_one_line_with_the_key_meant(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "typo.yaml").write_text("trainer:\n  max_epoch: 3\n")
    code, lines = _run(["fit", *SIMPLE, "--config", "typo.yaml"], capsys)
    assert code == 2 and len(lines) == 1, lines
    assert "does not accept option 'trainer.max_epoch' (did you mean trainer.max_epochs?)" in lines[0]
