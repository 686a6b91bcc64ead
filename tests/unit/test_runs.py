"""Run folders: atomic claim, failed-start cleanup (finding runs again: tests/unit/files/test_locate.py)."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import pytest
import yaml

from lit_gpu import runs

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
