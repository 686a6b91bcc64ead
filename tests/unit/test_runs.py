"""Run folders: atomic claim, failed-start cleanup, runs found by saved config, config beside a ckpt."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import pytest
import yaml

from lit_gpu import runs
from lit_gpu.errors import LitGpuError

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


# ---- claiming ---------------------------------------------------------------------------------------
def test_claim_takes_the_next_number_and_skips_taken_ones(tmp_path):
    assert runs.claim_version(tmp_path).name == "version_0"
    (tmp_path / "lit_gpu" / "version_5").mkdir()
    assert runs.claim_version(tmp_path).name == "version_6"
    names = [p.name for p in runs.list_versions(tmp_path / "lit_gpu")]
    assert names == ["version_0", "version_5", "version_6"]


def _claim_many(root: str, n: int, queue) -> None:
    queue.put([runs.claim_version(root).name for _ in range(n)])


def test_concurrent_claims_never_share_a_folder(tmp_path):
    ctx = mp.get_context("fork")  # children inherit the imports: they start at once, together
    queue = ctx.Queue()
    procs = [ctx.Process(target=_claim_many, args=(str(tmp_path), 10, queue)) for _ in range(3)]
    for p in procs:
        p.start()
    claimed = [name for _ in procs for name in queue.get(timeout=120)]
    for p in procs:
        p.join(timeout=60)
    assert len(claimed) == 30 and len(set(claimed)) == 30


def test_run_folder_claims_lazily_once_on_rank_zero(tmp_path, monkeypatch):
    folder = runs.RunFolder(tmp_path / "exp")
    assert not (tmp_path / "exp").exists()  # building loggers claims nothing
    loggers = runs.make_loggers(["csv", "tensorboard"], folder)
    assert [type(lg).__name__ for lg in loggers] == ["RunCSVLogger", "RunTensorBoardLogger"]
    assert loggers[0].log_dir == loggers[1].log_dir == str(tmp_path / "exp" / "lit_gpu" / "version_0")
    assert runs.list_versions(tmp_path / "exp" / "lit_gpu") == [folder.claimed]

    other = runs.RunFolder(tmp_path / "exp")
    monkeypatch.setattr(runs.rank_zero_only, "rank", 1)
    assert other.version.startswith("version_pending")  # a non-zero rank creates nothing
    other.adopt("version_0")
    assert other.path == folder.path
    assert len(runs.list_versions(tmp_path / "exp" / "lit_gpu")) == 1


def test_unknown_logger_kind_is_refused(tmp_path):
    with pytest.raises(ValueError, match="csv, tensorboard"):
        runs.make_loggers(["wandb"], runs.RunFolder(tmp_path))


def test_remove_if_unused_keeps_runs_with_results(tmp_path):
    startup = tmp_path / "a"
    (startup / "checkpoints").mkdir(parents=True)
    for name in ("config.yaml", "hparams.yaml", "events.out.tfevents.1.host.1.0"):
        (startup / name).write_text("x")
    assert runs.remove_if_unused(startup) and not startup.exists()
    for keep in ("metrics.csv", "checkpoints/last.ckpt", "notes.txt"):
        folder = tmp_path / keep.replace("/", "_")
        (folder / "checkpoints").mkdir(parents=True)
        (folder / keep).write_text("x")
        assert not runs.remove_if_unused(folder) and (folder / keep).is_file()


# ---- matching runs by their saved config ---------------------------------------------------------
def test_signature_reads_model_and_net_classes_not_optimizers():
    sig = runs.Signature.of(SIMPLE)
    assert sig.model == ("lit_gpu.modules.RegressionModule", "lit_gpu.nets.SimpleModel")
    assert sig.data == "lit_gpu.data.SyntheticRegressionDataModule"
    assert sig.describe() == "RegressionModule(SimpleModel) + SyntheticRegressionDataModule"
    other_optimizer = yaml.safe_load(yaml.safe_dump(SIMPLE))
    other_optimizer["model"]["init_args"]["optimizer"]["class_path"] = "torch.optim.Adam"
    assert runs.Signature.of(other_optimizer).matches(sig)
    assert not runs.Signature.of(FOONET).matches(sig)
    assert not runs.Signature.of({}).matches(runs.Signature.of({}))


def test_pick_takes_the_newest_matching_run_not_the_newest_run(tmp_path):
    parent = tmp_path / "lit_gpu"
    _run(parent, 0, SIMPLE, {"last.ckpt": 100, "best-epoch01-step8.ckpt": 90})
    _run(parent, 1, SIMPLE, {"last.ckpt": 200})
    _run(parent, 2, FOONET, {"last.ckpt": 300})  # newest, other model
    _run(parent, 3, None, {"last.ckpt": 400})  # no config.yaml: never matched
    pick = runs.pick_checkpoint([parent], runs.Signature.of(SIMPLE), "last")
    assert pick.checkpoint == parent / "version_1" / "checkpoints" / "last.ckpt"
    best = runs.pick_checkpoint([parent], runs.Signature.of(SIMPLE), "best")
    assert best.checkpoint == parent / "version_0" / "checkpoints" / "best-epoch01-step8.ckpt"
    assert runs.pick_checkpoint([parent], runs.Signature.of(FOONET)).run.folder.name == "version_2"


def test_no_match_lists_what_is_there(tmp_path):
    parent = tmp_path / "lit_gpu"
    _run(parent, 0, FOONET, {"last.ckpt": 100})
    _run(parent, 1, SIMPLE)
    (parent / "version_2").mkdir()
    (parent / "version_2" / "config.yaml").write_text("model: [unclosed")  # unreadable: listed, not matched
    mnist = {"model": {"class_path": "lit_gpu.modules.ClassificationModule"}}
    pick = runs.pick_checkpoint([parent], runs.Signature.of(mnist))
    assert pick.checkpoint is None
    listing = pick.listing()
    assert "version_0 (RegressionModule(FooNet) + SyntheticRegressionDataModule; last.ckpt)" in listing
    assert "version_1 (RegressionModule(SimpleModel) + Synthetic" in listing and "; no checkpoint)" in listing
    assert "version_2 (no config.yaml; no checkpoint)" in listing
    assert runs.pick_checkpoint([tmp_path / "nothing"], runs.Signature.of(mnist)).listing() == "no runs"


# ---- the config beside a checkpoint --------------------------------------------------------------
def test_config_beside_and_root_of_a_checkpoint(tmp_path):
    folder = _run(tmp_path / "exp1" / "lit_gpu", 3, SIMPLE, {"last.ckpt": 1})
    ckpt = folder / "checkpoints" / "last.ckpt"
    assert runs.config_beside(ckpt) == folder / "config.yaml"
    assert runs.root_of_checkpoint(ckpt) == tmp_path / "exp1"
    loose = tmp_path / "elsewhere" / "model.ckpt"
    loose.parent.mkdir()
    loose.write_bytes(b"x")
    assert runs.config_beside(loose) is None and runs.root_of_checkpoint(loose) is None


def test_args_with_saved_config_puts_it_before_the_users_flags(tmp_path):
    folder = _run(tmp_path / "exp1" / "lit_gpu", 3, SIMPLE, {"last.ckpt": 1})
    ckpt = str(folder / "checkpoints" / "last.ckpt")
    argv, used = runs.args_with_saved_config(["fit", "--ckpt_path", ckpt, "--trainer.max_epochs", "3"])
    assert used == folder / "config.yaml"
    assert argv == [
        "fit",
        "--config",
        str(folder / "config.yaml"),
        "--trainer.default_root_dir",
        str(tmp_path / "exp1"),
        "--ckpt_path",
        ckpt,
        "--trainer.max_epochs",
        "3",
    ]
    assert runs.args_with_saved_config(["test", f"--ckpt_path={ckpt}"])[1] == used
    for unchanged in (
        ["fit", "--config", "x.yaml", "--ckpt_path", ckpt],
        ["fit", "--model", "my.Module", "--ckpt_path", ckpt],
        ["fit", "--ckpt_path", "last"],
        ["env", "--json"],
    ):
        assert runs.args_with_saved_config(unchanged) == (unchanged, None)


def test_checkpoint_without_config_is_one_line(tmp_path):
    ckpt = tmp_path / "model.ckpt"
    ckpt.write_bytes(b"x")
    with pytest.raises(LitGpuError, match=r"no config.yaml beside .*--config FILE") as info:
        runs.args_with_saved_config(["predict", "--ckpt_path", str(ckpt)])
    assert "\n" not in str(info.value)
