"""lit-gpu export: plain-net weights + class path/init args; torch-only round trip is identical."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
import yaml
from safetensors import safe_open

from lit_gpu.cli import main
from lit_gpu.commands.export import export_checkpoint
from lit_gpu.errors import LitGpuError
from lit_gpu.modules import ClassificationModule
from lit_gpu.nets import MnistCNN
from tests.helpers.paths import REPO_ROOT

SPEC = {"class_path": "lit_gpu.nets.MnistCNN", "init_args": {"channels": 4, "dropout": 0.0}}


@pytest.fixture
def cnn_checkpoint(tmp_path):
    torch.manual_seed(0)
    module = ClassificationModule(MnistCNN(channels=4, dropout=0.0))
    module.net(torch.randn(8, 1, 28, 28))  # move BatchNorm running stats off their init values
    module.eval()
    ckpt = {"state_dict": module.state_dict(), "lit_gpu_net": SPEC, "epoch": 0}
    torch.save(ckpt, tmp_path / "last.ckpt")
    return tmp_path / "last.ckpt", module.net


TORCH_ONLY = textwrap.dedent(
    """
    import importlib, json, sys
    import torch
    x_path = sys.argv[1]
    for weights in sys.argv[2:]:
        meta = json.load(open(weights + ".json"))
        module, _, name = meta["class_path"].rpartition(".")
        net = getattr(importlib.import_module(module), name)(**meta["init_args"])
        if weights.endswith(".safetensors"):
            from safetensors.torch import load_file
            state = load_file(weights)
        else:
            state = torch.load(weights, map_location="cpu", weights_only=True)
        net.load_state_dict(state)
        net.eval()
        with torch.no_grad():
            torch.save(net(torch.load(x_path)), weights + ".out")
    used = [m for m in ("lit_gpu.cli", "lit_gpu.modules", "lit_gpu.checkpoints", "lit_gpu.commands.export")
            if m in sys.modules]
    assert not used, f"lit_gpu training code was imported: {used}"
    """
)


@pytest.mark.integration
def test_export_round_trip_is_identical_with_torch_alone(cnn_checkpoint, tmp_path):
    ckpt, net = cnn_checkpoint
    outs = [tmp_path / "model.pt", tmp_path / "model.safetensors"]
    for out in outs:
        with pytest.raises(SystemExit) as exit_info:
            main(["export", str(ckpt), "--out", str(out)])
        assert exit_info.value.code == 0
        meta = json.loads(out.with_name(out.name + ".json").read_text())
        assert meta["class_path"] == SPEC["class_path"] and meta["init_args"] == SPEC["init_args"]
    with safe_open(str(outs[1]), "pt") as f:
        assert f.metadata()["class_path"] == SPEC["class_path"]
        assert json.loads(f.metadata()["init_args"]) == SPEC["init_args"]

    x = torch.randn(5, 1, 28, 28)
    torch.save(x, tmp_path / "x.pt")
    script = tmp_path / "load.py"
    script.write_text(TORCH_ONLY)
    subprocess.run(
        [sys.executable, str(script), str(tmp_path / "x.pt"), *map(str, outs)],
        check=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
        timeout=120,
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # same float reduction order as the OMP_NUM_THREADS=1 subprocess
    try:
        with torch.no_grad():
            expected = net.eval()(x)
    finally:
        torch.set_num_threads(threads)
    for out in outs:
        assert torch.equal(torch.load(f"{out}.out"), expected)


def test_export_falls_back_to_run_config_yaml(tmp_path):
    run = tmp_path / "version_0"
    (run / "checkpoints").mkdir(parents=True)
    module = ClassificationModule(MnistCNN(channels=4))
    torch.save({"state_dict": module.state_dict()}, run / "checkpoints" / "last.ckpt")
    config = {"model": {"class_path": "lit_gpu.modules.ClassificationModule", "init_args": {"net": SPEC}}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    weights, _ = export_checkpoint(run / "checkpoints" / "last.ckpt", tmp_path / "m.pt")
    state = torch.load(weights, weights_only=True)
    expected = module.net.state_dict()
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[k], expected[k]) for k in expected)


def test_export_refuses_unknown_net_and_wrong_suffix(tmp_path):
    torch.save({"state_dict": ClassificationModule(MnistCNN(4)).state_dict()}, tmp_path / "x.ckpt")
    with pytest.raises(LitGpuError, match="does not say which net"):
        export_checkpoint(tmp_path / "x.ckpt", tmp_path / "m.pt")
    with pytest.raises(LitGpuError, match="must end in"):
        export_checkpoint(tmp_path / "x.ckpt", tmp_path / "m.onnx")
