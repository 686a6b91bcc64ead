"""Which run, which checkpoint: runs matched by their saved config, the config of a checkpoint's run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from jsonargparse import dict_to_namespace

from lit_gpu.errors import LitGpuError
from lit_gpu.run import folder as rebuild
from lit_gpu.run import layout, store
from lit_gpu.run import layout as claim
from lit_gpu.run.store import Signature, config_of_checkpoint, root_of_checkpoint
from tests.helpers.run_store import FOONET, SIMPLE, version_folder


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


def _ckpt(path: Path, step: int, score: float | None = None, mtime: float | None = None) -> Path:
    """A small real checkpoint: its header says the step (and the monitored value it was saved for)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"monitor": "val/loss", "current_score": None if score is None else torch.tensor(score)}
    torch.save({"global_step": step, "epoch": step // 4, "callbacks": {"ModelCheckpoint{}": state}}, path)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def _resolve(parent: Path, config: dict, which: str, sub: str = "test", **where) -> store.Resolution | None:
    namespace = dict_to_namespace(
        {"subcommand": sub, sub: {**config, "ckpt_path": which, "weights_only": True}}
    )
    return store.resolve(namespace, store.Where(dirpath=None, parents=[parent], **where))


def test_last_is_the_highest_step_of_the_newest_matching_run_never_the_newest_file(tmp_path):
    parent = tmp_path / "lit_gpu"
    old = version_folder(parent, 0, SIMPLE)
    _ckpt(old / "checkpoints" / "last.ckpt", 40, mtime=9e9)  # touched later: times do not choose
    run = version_folder(parent, 1, SIMPLE)
    _ckpt(run / "checkpoints" / "last.ckpt", 8, mtime=300)
    _ckpt(run / "checkpoints" / "last-v1.ckpt", 12, mtime=100)  # the higher step, written earlier
    (run / "checkpoints" / "last-v2.ckpt").write_bytes(b"PK\x03\x04 truncated")  # a save cut short
    _ckpt(version_folder(parent, 2, FOONET) / "checkpoints" / "last.ckpt", 99)  # newer, other model
    version_folder(parent, 3, SIMPLE)  # newer, no checkpoint yet
    got = _resolve(parent, SIMPLE, "last")
    assert got.path == str(run / "checkpoints" / "last-v1.ckpt") and got.header.step == 12
    assert got.run is not None and got.run.path == run and got.run.mine  # the run, found once and handed on
    chosen = "step 11, epoch 3; the highest step of 2 complete last*.ckpt; 1 incomplete left out"
    assert chosen in got.line
    assert "run version_1, the newest of yours with RegressionModule(SimpleModel)" in got.line
    assert (
        "passed over newer version_3: no last*.ckpt yet; version_2: another model (RegressionModule(FooNet)"
        in (got.line)
    )
    assert got.line.count("\n") == 0


@pytest.mark.parametrize(("mode", "expected"), [("min", "best-b.ckpt"), ("max", "best-a.ckpt")])
def test_best_is_the_best_monitored_value_by_the_configs_mode(tmp_path, mode, expected):
    run = version_folder(tmp_path / "lit_gpu", 0, SIMPLE)
    _ckpt(run / "checkpoints" / "best-a.ckpt", 4, score=0.5)
    _ckpt(run / "checkpoints" / "best-b.ckpt", 8, score=0.3)
    got = _resolve(tmp_path / "lit_gpu", SIMPLE, "best", mode=mode, monitor="val/loss")
    assert Path(got.path).name == expected and f"the {mode} of 2 best*.ckpt" in got.line


def test_no_match_lists_what_is_there(tmp_path):
    parent = tmp_path / "lit_gpu"
    _ckpt(version_folder(parent, 0, FOONET) / "checkpoints" / "last.ckpt", 4)
    version_folder(parent, 1, SIMPLE)
    (parent / "version_2").mkdir()
    (parent / "version_2" / "config.yaml").write_text("model: [unclosed")  # unreadable: listed, not matched
    mnist = {"model": {"class_path": "lit_gpu.modules.ClassificationModule"}}
    with pytest.raises(LitGpuError) as info:
        _resolve(parent, mnist, "last")
    listing = str(info.value)
    assert "version_0 (RegressionModule(FooNet) + SyntheticRegressionDataModule; last.ckpt)" in listing
    assert "version_1 (RegressionModule(SimpleModel) + Synthetic" in listing and "; no checkpoint)" in listing
    assert "version_2 (no config.yaml; no checkpoint)" in listing
    fit = _resolve(tmp_path / "nothing", mnist, "last", sub="fit")  # fit starts from scratch, says so
    assert fit.path is None and "(there: no runs)" in fit.line and "training from scratch" in fit.line


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
def test_another_users_newer_run_in_a_shared_root_is_never_chosen_and_the_line_says_why(tmp_path):
    parent = tmp_path / "lit_gpu"
    mine = version_folder(parent, 0, SIMPLE)
    _ckpt(mine / "checkpoints" / "last.ckpt", 4)
    _ckpt(mine / "checkpoints" / "best-x.ckpt", 4, score=0.9)
    theirs = version_folder(parent, 1, SIMPLE)
    _ckpt(theirs / "checkpoints" / "last.ckpt", 400)
    _ckpt(theirs / "checkpoints" / "best-y.ckpt", 400, score=0.1)
    for path in [theirs, *theirs.rglob("*")]:
        os.chown(path, 65534, 65534)
    for which in ("last", "best"):
        got = _resolve(parent, SIMPLE, which)
        assert Path(got.path).parent.parent == mine
        assert "passed over newer version_1: owned by" in got.line and "(uid 65534), not by you" in got.line


def test_names_lit_gpu_did_not_make_are_ignored_never_fatal(tmp_path):
    parent = tmp_path / "lit_gpu"
    for name in (
        "version_99999999999999999999",
        "version_abc",
        "version_\u0663",
        "version_01",
        "version_" + "9" * 5000,
    ):
        (parent / name[:250]).mkdir(parents=True)
    (parent / "version_7").write_text("")  # an empty file where a run would be
    run = version_folder(parent, 3, SIMPLE)
    _ckpt(run / "checkpoints" / "last.ckpt", 4)
    assert [r.name for r in layout.list_runs(parent)] == ["version_3"]
    assert _resolve(parent, SIMPLE, "last").path == str(run / "checkpoints" / "last.ckpt")
    claims = [claim.claim_run(tmp_path) for _ in range(5)]
    assert [c.folder.name for c in claims] == [
        "version_4",
        "version_5",
        "version_6",
        "version_8",
        "version_9",
    ]
    assert (parent / "version_7").is_file() and not any(
        p.name.startswith(".claim-") for p in parent.iterdir()
    )


def test_a_file_name_cannot_forge_a_line(tmp_path):
    run = version_folder(tmp_path / "lit_gpu", 0, SIMPLE)
    _ckpt(run / "checkpoints" / "last\n\x1b[2Klit-gpu: forged.ckpt", 4)
    got = _resolve(tmp_path / "lit_gpu", SIMPLE, "last")
    assert "\n" not in got.line and "\x1b" not in got.line and "\\x1b[2Klit-gpu: forged" in got.line


# ---- the config of a checkpoint's run ----------------------------------------------------------
def test_config_and_root_only_in_the_runs_own_version_folder(tmp_path):
    folder = version_folder(tmp_path / "exp1" / "lit_gpu", 3, SIMPLE, {"last.ckpt": 1})
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
    folder = version_folder(tmp_path / "exp1" / "lit_gpu", 3, saved, {"last.ckpt": 1})
    ckpt = str(folder / "checkpoints" / "last.ckpt")
    argv, used = rebuild.args_with_saved_config(["fit", "--ckpt_path", ckpt, "--trainer.max_epochs", "3"])
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
    assert rebuild.args_with_saved_config(["test", f"--ckpt_path={ckpt}"])[1].model == used.model
    for unchanged in (
        ["fit", "--config", "x.yaml", "--ckpt_path", ckpt],
        ["fit", "--model", "my.Module", "--ckpt_path", ckpt],
        ["fit", "--ckpt_path", "last"],
        ["env", "--json"],
    ):
        assert rebuild.args_with_saved_config(unchanged) == (unchanged, None)


def test_checkpoint_without_config_is_one_line(tmp_path):
    ckpt = tmp_path / "model.ckpt"
    ckpt.write_bytes(b"x")
    with pytest.raises(LitGpuError, match=r"no config.yaml for .*version_N.*--config FILE") as info:
        rebuild.args_with_saved_config(["predict", "--ckpt_path", str(ckpt)])
    assert "\n" not in str(info.value)


def test_links_leading_out_of_a_run_folder_are_found(tmp_path):
    """A continued run writes into its folder: links there that lead outside (dangling too) are named."""
    from lit_gpu.run.layout import escaping_links, refuse_links_out_of

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
    run = version_folder(parent, 0, SIMPLE)
    elsewhere = tmp_path / "elsewhere.ckpt"
    elsewhere.write_bytes(b"not read")
    link = run / "checkpoints" / "last.ckpt"
    link.symlink_to(elsewhere)
    which = str(link) if how == "file" else "last"
    config = dict_to_namespace(
        {"subcommand": "test", "test": {**SIMPLE, "ckpt_path": which, "weights_only": None}}
    )
    where = store.Where(dirpath=str(run / "checkpoints") if how == "dirpath" else None, parents=[parent])
    with pytest.raises(LitGpuError, match="is a symlink to .*elsewhere.ckpt, outside its run folder") as info:
        store.resolve(config, where)
    assert "\n" not in str(info.value)


def test_a_version_folder_planted_as_a_link_elsewhere_is_not_a_run_here(tmp_path):
    """Found attacking the doors: ``runs/lit_gpu/version_0 -> /elsewhere`` was continued and written."""
    from lit_gpu.run.layout import escaping_links

    elsewhere = version_folder(tmp_path / "elsewhere", 0, SIMPLE, {"last.ckpt": 1000.0})
    parent = tmp_path / "runs" / "lit_gpu"
    parent.mkdir(parents=True)
    (parent / "version_0").symlink_to(elsewhere)
    assert layout.list_runs(parent) == []  # neither `last` nor `best` picks it
    assert escaping_links(parent / "version_0") == [f"version_0 itself -> {elsewhere}"]
    linked_root = tmp_path / "scratch"  # a runs/ that is itself a link (a scratch disk) is fine
    linked_root.symlink_to(tmp_path / "elsewhere")
    assert [r.name for r in layout.list_runs(linked_root)] == ["version_0"]


def test_a_hard_linked_file_in_a_run_folder_is_named(tmp_path):
    """Found attacking the doors: Lightning writes hparams.yaml in place, so through a hard link too."""
    from lit_gpu.run.layout import escaping_links

    run = version_folder(tmp_path / "runs" / "lit_gpu", 0, SIMPLE)
    victim = tmp_path / "victim.txt"
    victim.write_text("x")
    os.link(victim, run / "hparams.yaml")
    assert escaping_links(run) == ["hparams.yaml (a hard link: 2 names)"]


@pytest.mark.parametrize("kind", ["state_dict", "safetensors"])
def test_a_file_that_is_not_a_lightning_checkpoint_is_one_line_naming_what_it_is(tmp_path, kind):
    """``--ckpt_path model.pt`` (what ``lit-gpu export`` writes) or a ``.safetensors`` file: refused when its
    header is read, naming what it is and ``load_into``; Lightning's own hand-back of weights (ddp_spawn's
    ``.temp.ckpt``, a plain state_dict) still loads through the resume reader."""
    from safetensors.torch import save_file

    from lit_gpu.checkpoints.read import read_for_resume

    weights = {"net.weight": torch.ones(2, 2), "net.bias": torch.zeros(2)}
    if kind == "state_dict":
        path = tmp_path / "model.pt"
        torch.save(weights, path)
        assert set(read_for_resume(path)) == set(weights)
    else:
        path = tmp_path / "model.safetensors"
        save_file(weights, path)
    sub = dict_to_namespace({"model": {"class_path": "lit_gpu.modules.RegressionModule"}})
    with pytest.raises(LitGpuError, match="not a Lightning checkpoint.*load_into") as info:
        store.check_checkpoint(path, sub)
    assert ("plain state_dict of 2 tensors" if kind == "state_dict" else "safetensors file") in str(
        info.value
    )
