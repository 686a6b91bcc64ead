"""Which run, which checkpoint: runs matched by their saved config, the config of a checkpoint's run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from jsonargparse import dict_to_namespace

from lit_gpu.errors import LitGpuError
from lit_gpu.files import locate
from lit_gpu.files.run_config import Signature, config_of_checkpoint, root_of_checkpoint

SIMPLE = {
    "model": {
        "class_path": "lit_gpu.modules.RegressionModule",
        "init_args": {
            "net": {"class_path": "lit_gpu.nets.SimpleModel", "init_args": {"in_features": 10}},
            "optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.05}},
        },
    },
    "data": {"class_path": "lit_gpu.data.SyntheticRegressionDataModule", "init_args": {}},
}
FOONET = {
    "model": {
        "class_path": "lit_gpu.modules.RegressionModule",
        "init_args": {
            "net": {"class_path": "lit_gpu.nets.FooNet"},
            "optimizer": {"class_path": "torch.optim.Adam"},
        },
    },
    "data": {"class_path": "lit_gpu.data.SyntheticRegressionDataModule"},
}


def _run(parent: Path, n: int, config: dict | None, ckpts: dict[str, float] | None = None) -> Path:
    folder = parent / f"version_{n}"
    (folder / "checkpoints").mkdir(parents=True)
    if config is not None:
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
    for name, mtime in (ckpts or {}).items():
        path = folder / "checkpoints" / name
        path.write_bytes(b"x")
        os.utime(path, (mtime, mtime))
    return folder


# ---- matching runs by their saved config ---------------------------------------------------------
def test_signature_reads_model_and_net_classes_not_optimizers():
    sig = Signature.of(SIMPLE)
    assert sig.model == ("lit_gpu.modules.RegressionModule", "lit_gpu.nets.SimpleModel")
    assert sig.data == "lit_gpu.data.SyntheticRegressionDataModule"
    assert sig.describe() == "RegressionModule(SimpleModel) + SyntheticRegressionDataModule"
    other_optimizer = yaml.safe_load(yaml.safe_dump(SIMPLE))
    other_optimizer["model"]["init_args"]["optimizer"]["class_path"] = "torch.optim.Adam"
    assert Signature.of(other_optimizer).matches(sig)
    assert not Signature.of(FOONET).matches(sig)
    assert not Signature.of({}).matches(Signature.of({}))


def test_pick_takes_the_newest_matching_run_not_the_newest_run(tmp_path):
    parent = tmp_path / "lit_gpu"
    _run(parent, 0, SIMPLE, {"last.ckpt": 100, "best-epoch01-step8.ckpt": 90})
    _run(parent, 1, SIMPLE, {"last.ckpt": 200})
    _run(parent, 2, FOONET, {"last.ckpt": 300})  # newest, other model
    _run(parent, 3, None, {"last.ckpt": 400})  # no config.yaml: never matched
    pick = locate.pick_checkpoint([parent], Signature.of(SIMPLE), "last")
    assert pick.checkpoint == parent / "version_1" / "checkpoints" / "last.ckpt"
    best = locate.pick_checkpoint([parent], Signature.of(SIMPLE), "best")
    assert best.checkpoint == parent / "version_0" / "checkpoints" / "best-epoch01-step8.ckpt"
    assert locate.pick_checkpoint([parent], Signature.of(FOONET)).run.folder.name == "version_2"


def test_no_match_lists_what_is_there(tmp_path):
    parent = tmp_path / "lit_gpu"
    _run(parent, 0, FOONET, {"last.ckpt": 100})
    _run(parent, 1, SIMPLE)
    (parent / "version_2").mkdir()
    (parent / "version_2" / "config.yaml").write_text("model: [unclosed")  # unreadable: listed, not matched
    mnist = {"model": {"class_path": "lit_gpu.modules.ClassificationModule"}}
    pick = locate.pick_checkpoint([parent], Signature.of(mnist))
    assert pick.checkpoint is None
    listing = pick.listing()
    assert "version_0 (RegressionModule(FooNet) + SyntheticRegressionDataModule; last.ckpt)" in listing
    assert "version_1 (RegressionModule(SimpleModel) + Synthetic" in listing and "; no checkpoint)" in listing
    assert "version_2 (no config.yaml; no checkpoint)" in listing
    assert locate.pick_checkpoint([tmp_path / "nothing"], Signature.of(mnist)).listing() == "no runs"


# ---- the config of a checkpoint's run ----------------------------------------------------------
def test_config_and_root_only_in_the_runs_own_version_folder(tmp_path):
    folder = _run(tmp_path / "exp1" / "lit_gpu", 3, SIMPLE, {"last.ckpt": 1})
    ckpt = folder / "checkpoints" / "last.ckpt"
    assert config_of_checkpoint(ckpt) == folder / "config.yaml"
    assert root_of_checkpoint(ckpt) == tmp_path / "exp1"
    loose = tmp_path / "elsewhere" / "sub" / "model.ckpt"  # vector 4: a config.yaml in a shared parent
    loose.parent.mkdir(parents=True)
    loose.write_bytes(b"x")
    (tmp_path / "elsewhere" / "config.yaml").write_text(yaml.safe_dump(SIMPLE))
    (loose.parent / "config.yaml").write_text(yaml.safe_dump(SIMPLE))
    assert config_of_checkpoint(loose) is None and root_of_checkpoint(loose) is None


def test_args_with_saved_config_takes_model_and_data_only(tmp_path):
    saved = yaml.safe_load(yaml.safe_dump(SIMPLE))
    saved["data"]["init_args"] = {"data_dir": "/elsewhere", "batch_size": 8, "download": True}
    saved.update(weights_only=False, predict_out="/tmp/x.csv", ckpt_path="/tmp/evil.ckpt")
    saved["trainer"] = {"logger": {"class_path": "x.Y"}, "callbacks": [{"class_path": "this.Anything"}]}
    folder = _run(tmp_path / "exp1" / "lit_gpu", 3, saved, {"last.ckpt": 1})
    ckpt = str(folder / "checkpoints" / "last.ckpt")
    argv, used = locate.args_with_saved_config(["fit", "--ckpt_path", ckpt, "--trainer.max_epochs", "3"])
    assert used.source == folder / "config.yaml"
    assert used.left_out == ["data.init_args.data_dir", "data.init_args.download"]
    assert used.describe() == "model RegressionModule(SimpleModel) and data SyntheticRegressionDataModule"
    data = {"class_path": SIMPLE["data"]["class_path"], "init_args": {"batch_size": 8}}
    assert argv == [
        "fit",
        "--model",
        json.dumps(SIMPLE["model"]),
        "--data",
        json.dumps(data),
        "--trainer.default_root_dir",
        str(tmp_path / "exp1"),
        "--ckpt_path",
        ckpt,
        "--trainer.max_epochs",
        "3",
    ]
    assert locate.args_with_saved_config(["test", f"--ckpt_path={ckpt}"])[1].model == used.model
    for unchanged in (
        ["fit", "--config", "x.yaml", "--ckpt_path", ckpt],
        ["fit", "--model", "my.Module", "--ckpt_path", ckpt],
        ["fit", "--ckpt_path", "last"],
        ["env", "--json"],
    ):
        assert locate.args_with_saved_config(unchanged) == (unchanged, None)


def test_checkpoint_without_config_is_one_line(tmp_path):
    ckpt = tmp_path / "model.ckpt"
    ckpt.write_bytes(b"x")
    with pytest.raises(LitGpuError, match=r"no config.yaml for .*version_N.*--config FILE") as info:
        locate.args_with_saved_config(["predict", "--ckpt_path", str(ckpt)])
    assert "\n" not in str(info.value)


def test_links_leading_out_of_a_run_folder_are_found(tmp_path):
    """A continued run writes into its folder: links there that lead outside (dangling too) are named."""
    from lit_gpu.files.locate import escaping_links, refuse_links_out_of

    run = tmp_path / "runs" / "lit_gpu" / "version_0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.csv").write_text("step\n")
    (run / "inner.txt").symlink_to(run / "metrics.csv")  # inside: fine
    refuse_links_out_of(run)
    outside = tmp_path / "outside"
    outside.mkdir()
    (run / "hparams.yaml").symlink_to(outside / "victim.txt")  # dangling: a write would create it
    (run / "checkpoints" / "best.ckpt").symlink_to(outside / "x.ckpt")
    assert escaping_links(run) == [
        f"hparams.yaml -> {outside / 'victim.txt'}",
        f"checkpoints/best.ckpt -> {outside / 'x.ckpt'}",
    ]
    with pytest.raises(LitGpuError, match="not continuing the run in .*--new_run true"):
        refuse_links_out_of(run)
    linked_root = tmp_path / "scratch_link"  # runs/ reached through a link (a scratch disk): fine
    linked_root.symlink_to(tmp_path / "runs")
    (run / "hparams.yaml").unlink()
    (run / "checkpoints" / "best.ckpt").unlink()
    assert escaping_links(linked_root / "lit_gpu" / "version_0") == []


@pytest.mark.parametrize("how", ["last", "file", "dirpath"])
def test_symlinked_last_ckpt_leaving_its_run_is_refused_naming_the_target(tmp_path, how):
    """``last.ckpt`` planted as a link to a file elsewhere is not read, whichever way it is named."""
    parent = tmp_path / "runs" / "lit_gpu"
    run = _run(parent, 0, SIMPLE)
    elsewhere = tmp_path / "elsewhere.ckpt"
    elsewhere.write_bytes(b"not read")
    link = run / "checkpoints" / "last.ckpt"
    link.symlink_to(elsewhere)
    which = str(link) if how == "file" else "last"
    config = dict_to_namespace(
        {"subcommand": "test", "test": {**SIMPLE, "ckpt_path": which, "weights_only": None}}
    )
    where = locate.Where(dirpath=str(run / "checkpoints") if how == "dirpath" else None, parents=[parent])
    with pytest.raises(LitGpuError, match="is a symlink to .*elsewhere.ckpt, outside its run folder") as info:
        locate.resolve(config, where)
    assert "\n" not in str(info.value)


def test_a_version_folder_planted_as_a_link_elsewhere_is_not_a_run_here(tmp_path):
    """Found attacking the doors: ``runs/lit_gpu/version_0 -> /elsewhere`` was continued and written."""
    from lit_gpu.files.locate import escaping_links, find_runs

    elsewhere = _run(tmp_path / "elsewhere", 0, SIMPLE, {"last.ckpt": 1000.0})
    parent = tmp_path / "runs" / "lit_gpu"
    parent.mkdir(parents=True)
    (parent / "version_0").symlink_to(elsewhere)
    assert find_runs(parent) == []  # neither `last` nor `best` picks it
    assert escaping_links(parent / "version_0") == [f"version_0 itself -> {elsewhere}"]
    linked_root = tmp_path / "scratch"  # a runs/ that is itself a link (a scratch disk) is fine
    linked_root.symlink_to(tmp_path / "elsewhere")
    assert [r.folder.name for r in find_runs(linked_root)] == ["version_0"]


def test_a_hard_linked_file_in_a_run_folder_is_named(tmp_path):
    """Found attacking the doors: Lightning writes hparams.yaml in place, so through a hard link too."""
    from lit_gpu.files.locate import escaping_links

    run = _run(tmp_path / "runs" / "lit_gpu", 0, SIMPLE)
    victim = tmp_path / "victim.txt"
    victim.write_text("x")
    os.link(victim, run / "hparams.yaml")
    assert escaping_links(run) == ["hparams.yaml (a hard link: 2 names)"]
