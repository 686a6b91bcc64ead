"""Malicious checkpoints and run folders: every vector ends in one line, exit 2, and no marker file.

Each vector tries to create ``marker`` in ``tmp_path``; the legitimate runs beside them still work.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from lit_gpu.checkpoints import build as safe_build
from lit_gpu.checkpoints import read_checkpoint
from lit_gpu.cli import main
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from tests.helpers.payload import Payload as _Payload
from tests.helpers.simple_run import SIMPLE, fit_simple

RUN = Path("runs") / "lit_gpu"


@pytest.fixture(autouse=True)
def _plain_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])
    monkeypatch.delenv(safe_build.TRUST_ENV, raising=False)


@pytest.fixture(scope="module")
def good_ckpt(tmp_path_factory) -> Path:
    """A real last.ckpt of configs/simple.yaml (one short in-process fit)."""
    return fit_simple(tmp_path_factory.mktemp("good_run"))


def _tampered(good_ckpt: Path, out: Path, **changes: Any) -> Path:
    """A copy of the good checkpoint with top-level entries replaced (``hyper_parameters``: merged)."""
    checkpoint = torch.load(good_ckpt, weights_only=True)
    for key, value in changes.items():
        if key == "hyper_parameters":
            checkpoint[key] = {**checkpoint[key], **value}
        else:
            checkpoint[key] = value  # no deepcopy: copying a _Payload would run it
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, out)
    return out


def _one_line_exit_2(argv: list[str], capsys) -> str:
    """Run lit-gpu in-process; assert exit 2 and that stderr is exactly one ``lit-gpu: error:`` line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2, err
    assert len(err) == 1 and err[0].startswith("lit-gpu: error: "), err
    return err[0]


@pytest.fixture
def side_effect_pkg(tmp_path, monkeypatch) -> tuple[str, Path]:
    """A module on sys.path whose import creates the marker; defines an nn.Module and a LightningModule."""
    name = f"evil_{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "marker"
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / f"{name}.py").write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path
            from torch import nn
            from lit_gpu.modules import RegressionModule
            Path({str(marker)!r}).write_text("imported")

            class Net(nn.Module):
                def __init__(self, in_features: int = 10, out_features: int = 10) -> None:
                    super().__init__()
                    self.fc = nn.Linear(in_features, out_features)

            class Module(RegressionModule):
                pass
            """
        )
    )
    monkeypatch.syspath_prepend(str(folder))
    yield name, marker
    sys.modules.pop(name, None)


# ---- lit-gpu export: the checkpoint's lit_gpu_net and the run's config.yaml ------------------------
@pytest.mark.parametrize(
    "net, needle",
    [
        (
            lambda m: {"class_path": "os.system", "init_args": {"command": f"touch {m}"}},
            "refusing to build lit_gpu_net: importing 'os' for class_path 'os.system' would run its code and "
            "'os' is not a trusted package",
        ),
        (
            lambda m: {"class_path": "subprocess.Popen", "init_args": {"args": ["touch", str(m)]}},
            "'subprocess' is not a trusted package",
        ),
        (
            lambda m: {
                "class_path": "lit_gpu.nets.SimpleModel",
                "init_args": {
                    "in_features": {"class_path": "os.system", "init_args": {"command": f"touch {m}"}}
                },
            },
            "init_args.in_features: a nested class_path ('os.system') fills a parameter typed int",
        ),
    ],
    ids=["os.system", "subprocess.Popen", "nested-init_args"],
)
def test_export_refuses_net_specs_that_are_not_modules(net, needle, good_ckpt, tmp_path, capsys):
    marker = tmp_path / "marker"
    ckpt = _tampered(good_ckpt, tmp_path / "evil.ckpt", lit_gpu_net=net(marker))
    line = _one_line_exit_2(["export", str(ckpt), "--out", str(tmp_path / "m.pt")], capsys)
    assert needle in line and f"{ckpt}:" in line and "nothing was run" in line
    assert not marker.exists() and not (tmp_path / "m.pt").exists()


def test_export_does_not_import_an_untrusted_module(side_effect_pkg, good_ckpt, tmp_path, capsys):
    name, marker = side_effect_pkg
    spec = {"class_path": f"{name}.Net", "init_args": {}}
    ckpt = _tampered(good_ckpt, tmp_path / "evil.ckpt", lit_gpu_net=spec)
    line = _one_line_exit_2(["export", str(ckpt), "--out", str(tmp_path / "m.pt")], capsys)
    assert f"importing '{name}'" in line and f"--trust_module {name}" in line
    assert not marker.exists() and name not in sys.modules
    # the user's explicit trust is the way to export their own package's net
    with pytest.raises(SystemExit) as info:
        main(["export", str(ckpt), "--out", str(tmp_path / "m.pt"), "--trust_module", name])
    assert info.value.code == 0 and marker.exists() and (tmp_path / "m.pt").exists()


def test_export_ignores_a_bad_class_in_config_yaml_beside_the_checkpoint(good_ckpt, tmp_path, capsys):
    """Export rebuilds the net from the spec the checkpoint records (checked), never from a config.yaml."""
    marker = tmp_path / "marker"
    run = tmp_path / "version_0"
    ckpt = _tampered(good_ckpt, run / "checkpoints" / "last.ckpt", lit_gpu_net=None)
    net = {"class_path": "subprocess.Popen", "init_args": {"args": ["touch", str(marker)]}}
    config = {"model": {"class_path": "lit_gpu.modules.RegressionModule", "init_args": {"net": net}}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(SystemExit) as info:
        main(["export", str(ckpt), "--out", str(tmp_path / "m.pt")])
    assert info.value.code == 0
    assert (tmp_path / "m.pt").is_file() and "Popen" not in capsys.readouterr().err
    assert not marker.exists()


def test_export_refuses_a_pickle_payload(good_ckpt, tmp_path, capsys):
    marker = tmp_path / "marker"
    ckpt = _tampered(good_ckpt, tmp_path / "evil.ckpt", extra=_Payload(marker))
    line = _one_line_exit_2(["export", str(ckpt), "--out", str(tmp_path / "m.pt")], capsys)
    assert "holds pickled Python objects" in line and "pass --trust" in line
    assert not marker.exists()
    read_checkpoint(ckpt, trust=True)  # control: the payload is real, and trust=True stays the opt-out
    assert marker.exists()


def test_export_of_a_real_run_still_works(good_ckpt, tmp_path):
    with pytest.raises(SystemExit) as info:
        main(["export", str(good_ckpt), "--out", str(tmp_path / "m.safetensors")])
    assert info.value.code == 0 and (tmp_path / "m.safetensors").stat().st_size > 0


# ---- fit / test / predict --ckpt_path ----------------------------------------------------------------
@pytest.mark.parametrize("subcommand", ["test", "fit", "predict"])
def test_pickle_payload_is_one_line_for_every_subcommand(
    subcommand, good_ckpt, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "marker"
    ckpt = _tampered(good_ckpt, tmp_path / "evil.ckpt", extra=_Payload(marker))
    line = _one_line_exit_2([subcommand, *SIMPLE, "--ckpt_path", str(ckpt)], capsys)
    assert f"checkpoint {ckpt} holds pickled Python objects" in line
    assert "pass --weights_only false" in line and "Traceback" not in line
    assert not marker.exists()


def test_weights_only_false_stays_the_users_explicit_opt_out(good_ckpt, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "marker"
    ckpt = _tampered(good_ckpt, tmp_path / "evil.ckpt", extra=_Payload(marker))
    main(["test", *SIMPLE, "--ckpt_path", str(ckpt), "--weights_only", "false"])
    assert marker.exists()  # the payload ran: that is what the user asked for
    assert "test/loss" in capsys.readouterr().out


@pytest.mark.parametrize(
    "config",
    [
        "weights_only: false\nckpt_path: {ckpt}\n",
        "weights_only: !!bool no\nckpt_path: {ckpt}\n",
        "fit:\n  weights_only: false\n",  # the top-level --config form, before the subcommand
    ],
    ids=["flat", "core-tag", "top-level"],
)
def test_a_config_file_cannot_switch_the_weights_only_load_off(
    config, good_ckpt, tmp_path, monkeypatch, capsys
):
    """A downloaded config with ``weights_only: false`` and a ``ckpt_path`` ran the checkpoint's pickled code
    (LightningCLI reads the key from files too); the switch is the command line's ``--weights_only false``
    alone (after every --config): one line, exit 2, nothing loaded."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "marker"
    ckpt = _tampered(good_ckpt, tmp_path / "evil.ckpt", extra=_Payload(marker))
    cfg = tmp_path / "downloaded.yaml"
    cfg.write_text(config.format(ckpt=ckpt))
    if config.startswith("fit:"):
        argv = ["--config", str(cfg), "fit", *SIMPLE, "--ckpt_path", str(ckpt)]
    else:
        argv = ["fit", *SIMPLE, "--config", str(cfg)]
    line = _one_line_exit_2(argv, capsys)
    assert "weights_only: false comes from a config file" in line and "--weights_only false" in line
    assert not marker.exists()
    if config.startswith("fit:"):
        return
    # typed before a --config that sets it again: the file has the last word, refused too
    line = _one_line_exit_2(["fit", *SIMPLE, "--weights_only", "false", "--config", str(cfg)], capsys)
    assert "comes from a config file" in line and not marker.exists()


def test_hparams_class_swap_is_refused_naming_both_classes(good_ckpt, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    swapped = {"_class_path": "lit_gpu.modules.ClassificationModule", "num_classes": 10}
    ckpt = _tampered(good_ckpt, tmp_path / "swap.ckpt", hyper_parameters=swapped)
    line = _one_line_exit_2(["test", *SIMPLE, "--ckpt_path", str(ckpt)], capsys)
    assert "saved from the model class lit_gpu.modules.ClassificationModule" in line
    assert "the config builds lit_gpu.modules.RegressionModule" in line


def test_hparams_class_path_never_imports_a_module(side_effect_pkg, good_ckpt, tmp_path, monkeypatch, capsys):
    name, marker = side_effect_pkg
    monkeypatch.chdir(tmp_path)
    ckpt = _tampered(good_ckpt, tmp_path / "evil.ckpt", hyper_parameters={"_class_path": f"{name}.Module"})
    for subcommand in ("test", "fit"):
        line = _one_line_exit_2([subcommand, *SIMPLE, "--ckpt_path", str(ckpt)], capsys)
        assert f"saved from the model class {name}.Module" in line
    assert not marker.exists() and name not in sys.modules


def test_test_and_predict_with_a_real_checkpoint_still_work(good_ckpt, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for subcommand in ("test", "predict"):
        main([subcommand, *SIMPLE, "--ckpt_path", str(good_ckpt)])  # returns: no SystemExit on success
    assert "test/loss" in capsys.readouterr().out
    run = good_ckpt.parent.parent  # the evaluations of a run's checkpoint are written into that run
    assert sorted(p.name for p in (run / "evaluations").iterdir())[-2:] == ["predict_0", "test_0"]
    with open(run / "evaluations" / "predict_0" / "predictions.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0][:2] == ["index", "output_0"] and len(rows) > 1


def test_pickle_payload_from_the_real_command_line(good_ckpt, tmp_path, cli_env):
    """The installed entry point, out of process: exit 2, one stderr line, no marker."""
    marker = tmp_path / "marker"
    ckpt = _tampered(good_ckpt, tmp_path / "evil.ckpt", extra=_Payload(marker))
    proc = subprocess.run(
        [sys.executable, "-m", "lit_gpu", "test", *SIMPLE, "--ckpt_path", str(ckpt)],
        cwd=tmp_path,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "holds pickled Python objects" in lines[0], lines
    assert not marker.exists()


# ---- LitModule.load_from_checkpoint (notebooks, user code) ------------------------------------------
def test_load_from_checkpoint_refuses_nested_class_paths_in_hparams(side_effect_pkg, good_ckpt, tmp_path):
    name, marker = side_effect_pkg
    evil_net = {"net": {"class_path": f"{name}.Net", "init_args": {}}}
    ckpt = _tampered(good_ckpt, tmp_path / "evil.ckpt", hyper_parameters=evil_net)
    with pytest.raises(safe_build.UnsafeBuildError) as exc:
        RegressionModule.load_from_checkpoint(ckpt)
    message = str(exc.value)
    assert f"{ckpt}: refusing to build hyper_parameters.init_args.net: importing '{name}'" in message
    assert not marker.exists() and name not in sys.modules
    # a net the caller passes replaces the file's entry: nothing from it is resolved
    module = RegressionModule.load_from_checkpoint(ckpt, net=SimpleModel())
    assert isinstance(module.net, SimpleModel) and not marker.exists()


def test_load_from_checkpoint_refuses_strings_that_jsonargparse_would_import(
    side_effect_pkg, good_ckpt, tmp_path
):
    name, marker = side_effect_pkg
    ckpt = _tampered(good_ckpt, tmp_path / "evil.ckpt", hyper_parameters={"optimizer": f"{name}.Net"})
    with pytest.raises(safe_build.UnsafeBuildError, match="init_args.optimizer: the string"):
        RegressionModule.load_from_checkpoint(ckpt, net=SimpleModel())
    assert not marker.exists() and name not in sys.modules


def test_load_from_checkpoint_of_a_real_run_still_works(good_ckpt):
    module = RegressionModule.load_from_checkpoint(good_ckpt, net=SimpleModel())
    state = torch.load(good_ckpt, weights_only=True)["state_dict"]
    assert torch.equal(module.net.fc.weight, state["net.fc.weight"])
