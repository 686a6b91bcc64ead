"""Run folders: atomic claim, failed-start cleanup (finding runs again: tests/unit/files/test_locate.py)."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import pytest
import torch

from lit_gpu.run import folder as folders
from lit_gpu.run import folder as run_config
from lit_gpu.run import layout, loggers, store
from lit_gpu.run import layout as claims
from lit_gpu.run import store as run_header
from lit_gpu.run.store import config_of_checkpoint
from tests.helpers.run_store import SIMPLE, version_folder


# ---- claiming ---------------------------------------------------------------------------------------
def _claim_version(root) -> Path:
    """A new ``version_N`` claimed, its lock let go (no take-over)."""
    claim = claims.claim_run(root)
    claim.lock.release()
    return claim.folder


def _versions(parent) -> list[Path]:
    return [run.path for run in layout.list_runs(parent)]


def test_claim_takes_the_next_number_and_skips_taken_ones(tmp_path):
    assert _claim_version(tmp_path).name == "version_0"
    (tmp_path / "lit_gpu" / "version_5").mkdir()
    assert _claim_version(tmp_path).name == "version_6"
    names = [p.name for p in _versions(tmp_path / "lit_gpu")]
    assert names == ["version_0", "version_5", "version_6"]


def _claim_many(root: str, n: int, queue) -> None:
    queue.put([_claim_version(root).name for _ in range(n)])


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
    folder = folders.RunFolder(tmp_path / "exp")
    assert not (tmp_path / "exp").exists()  # building loggers claims nothing
    made = loggers.make_loggers(["csv", "tensorboard"], folder)
    # TensorBoard's first, as in stock Lightning: the module's self.logger has add_image & co
    assert [type(lg).__name__ for lg in made] == ["RunTensorBoardLogger", "RunCSVLogger"]
    assert made[0].log_dir == made[1].log_dir == str(tmp_path / "exp" / "lit_gpu" / "version_0")
    assert _versions(tmp_path / "exp" / "lit_gpu") == [folder.claimed]

    other = folders.RunFolder(tmp_path / "exp")
    monkeypatch.setattr(loggers.rank_zero_only, "rank", 1)
    assert other.version.startswith("version_pending")  # a non-zero rank creates nothing
    other.adopt("version_0")
    assert other.path == folder.path
    assert len(_versions(tmp_path / "exp" / "lit_gpu")) == 1


def test_unknown_logger_kind_is_refused(tmp_path):
    with pytest.raises(ValueError, match="csv, tensorboard"):
        loggers.make_loggers(["wandb"], folders.RunFolder(tmp_path))


def test_remove_if_unused_keeps_runs_with_results(tmp_path):
    startup = tmp_path / "a"
    (startup / "checkpoints").mkdir(parents=True)
    for name in ("config.yaml", "hparams.yaml", "events.out.tfevents.1.host.1.0"):
        (startup / name).write_text("x")
    assert folders.remove_if_unused(startup) and not startup.exists()
    for keep in ("metrics.csv", "checkpoints/last.ckpt", "notes.txt"):
        folder = tmp_path / keep.replace("/", "_")
        (folder / "checkpoints").mkdir(parents=True)
        (folder / keep).write_text("x")
        assert not folders.remove_if_unused(folder) and (folder / keep).is_file()


# ---- continuing a run in its folder --------------------------------------------------------------
METRICS = """epoch,step,train/loss_step,val/loss
0,0,1.0,
0,1,0.9,
0,1,,0.95
1,2,0.8,
1,3,0.7,
"""


def _header(stepped: int, at_batch_end: bool, global_step: int) -> dict:
    done = 5 if at_batch_end else 6
    total = {"ready": 6, "started": 6, "processed": 6, "completed": done}
    loop = {
        "epoch_loop.state_dict": {"_batches_that_stepped": stepped},
        "epoch_loop.batch_progress": {"total": total},
    }
    return {"global_step": global_step, "loops": {"fit_loop": loop}}


def test_resume_log_step_is_where_lightning_logs_again():
    # saved at a training batch end (every_n_train_steps): the counter has not moved yet
    assert run_header.resume_log_step(_header(5, True, 6)) == 6
    # saved after the batch (epoch end, SIGTERM stop): the counter already moved
    assert run_header.resume_log_step(_header(4, False, 4)) == 4
    # two optimizers step per batch (manual optimization): the logged step counts batches
    assert run_header.resume_log_step(_header(5, True, 12)) == 6
    assert run_header.resume_log_step({"global_step": 7}) == 7  # no loop state: global_step
    assert run_header.resume_log_step({}) is None


def test_continuation_is_found_from_where_the_checkpoint_is(tmp_path):
    folder = version_folder(tmp_path / "copied" / "lit_gpu", 4, SIMPLE)
    ckpt = folder / "checkpoints" / "last.ckpt"
    # paths inside the checkpoint name another machine's folder; only the file's place counts
    torch.save({**_header(5, True, 6), "callbacks": {"dirpath": "/other/machine/runs"}}, ckpt)
    assert folders.continuation(ckpt) == folders.Continuation(folder, 6)
    loose = tmp_path / "loose.ckpt"
    torch.save({"global_step": 3}, loose)
    assert folders.continuation(loose) is None and folders.continuation(None) is None
    assert folders.continuation(tmp_path / "missing" / "checkpoints" / "last.ckpt") is None
    (folder / "checkpoints" / "bad.ckpt").write_bytes(b"not a checkpoint")
    assert folders.continuation(folder / "checkpoints" / "bad.ckpt") is None  # Lightning reports it


def test_continue_run_drops_the_rows_logged_after_the_checkpoint(tmp_path):
    (tmp_path / "metrics.csv").write_text(METRICS)
    assert folders.continue_run(tmp_path, 2) == 2
    assert (tmp_path / "metrics.csv").read_text().splitlines() == METRICS.splitlines()[:4]
    assert folders.continue_run(tmp_path, 2) == 0  # nothing left to drop
    assert folders.continue_run(tmp_path / "nothing_here", 2) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.csv"]  # no temp file left


def _scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    """What TensorBoard shows: the event files of a folder read as TensorBoard reads them (purges applied)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)]


def test_continued_run_folder_appends_to_its_metrics(tmp_path, capsys):
    from torch.utils.tensorboard import SummaryWriter

    folder = version_folder(tmp_path / "lit_gpu", 2, SIMPLE)
    (folder / "metrics.csv").write_text(METRICS)
    killed = SummaryWriter(str(folder))  # the stopped attempt logged steps 0..3
    for step, value in enumerate((1.0, 0.9, 0.8, 0.7)):
        killed.add_scalar("train/loss_step", value, step)
    killed.close()
    run = folders.RunFolder(tmp_path / "elsewhere", continues=folders.Continuation(folder, 2))
    tb_logger, csv_logger = loggers.make_loggers(["csv", "tensorboard"], run)
    assert csv_logger.log_dir == tb_logger.log_dir == str(folder)  # no new version_N, no claim
    assert run.claimed is None and _versions(tmp_path / "lit_gpu") == [folder]
    assert not (tmp_path / "elsewhere").exists()
    err = capsys.readouterr().err
    assert f"lit-gpu: continuing the run in {folder} from step 2 (dropped 2 metrics.csv rows" in err
    csv_logger.log_metrics({"train/loss_step": 0.5}, step=2)
    csv_logger.log_metrics({"train/acc": 0.25}, step=3)  # a new column: the file is rewritten
    csv_logger.finalize("success")
    lines = (folder / "metrics.csv").read_text().splitlines()
    assert lines[0] == "epoch,step,train/acc,train/loss_step,val/loss"
    assert lines[1:] == ["0,0,,1.0,", "0,1,,0.9,", "0,1,,,0.95", ",2,,0.5,", ",3,0.25,,"]
    tb_logger.log_metrics({"train/loss_step": 0.5}, step=2)
    tb_logger.log_metrics({"train/loss_step": 0.4}, step=3)
    tb_logger.finalize("success")
    # the events the stopped attempt logged from step 2 on are purged: each step once, the new values
    assert _scalars(folder, "train/loss_step") == [(0, 1.0), (1, 0.9), (2, 0.5), (3, 0.4)]
    assert not run.remove_if_unused()  # a continued folder is never removed


def test_saved_configs_and_changes(tmp_path):
    folder = version_folder(tmp_path, 0, {"trainer": {"max_epochs": 3}, "ckpt_path": None})
    ckpt = folder / "checkpoints" / "last.ckpt"
    ckpt.write_bytes(b"x")
    assert run_config.next_config_path(folder) == folder / "config.1.yaml"
    (folder / "config.1.yaml").write_text("trainer: {max_epochs: 5}\n")
    (folder / "config.10.yaml").write_text("trainer: {max_epochs: 6}\n")
    (folder / "config.old.yaml").write_text("ignored\n")
    assert [p.name for p in run_config.saved_configs(folder)] == [
        "config.yaml",
        "config.1.yaml",
        "config.10.yaml",
    ]
    assert config_of_checkpoint(ckpt) == folder / "config.10.yaml"  # the newest config ran last
    assert run_config.next_config_path(folder) == folder / "config.11.yaml"
    old = {"trainer": {"max_epochs": 3, "default_root_dir": "/other/machine"}, "ckpt_path": None, "a": 1}
    new = {"trainer": {"max_epochs": 5, "default_root_dir": "runs"}, "ckpt_path": "x.ckpt", "b": 2}
    assert run_config.config_changes(old, new) == [
        "trainer.max_epochs: 3 -> 5",
        "a: 1 -> None",
        "b: None -> 2",
    ]
    assert run_config.config_changes(old, new, limit=1) == ["trainer.max_epochs: 3 -> 5", "and 2 more"]
    assert run_config.config_changes(old, {**old, "ckpt_path": "y", "new_run": True}) == []


# ---- one run, one folder: a start that died before its first checkpoint is taken over ---------------
def _start_and_die(root: str, write: tuple[str, ...]) -> None:
    """A start killed before its first checkpoint: the folder is claimed, files written, no clean end."""
    claim = claims.claim_run(root)  # a new folder each time
    for name in write:
        (claim.folder / name).write_text("from the dead start")
    os._exit(0)  # the kernel lets go of the lock, the lock file stays (as after SIGKILL)


def _dead_start(root: Path, write: tuple[str, ...] = ("config.yaml", "metrics.csv")) -> None:
    child = mp.get_context("fork").Process(target=_start_and_die, args=(str(root), write))
    child.start()
    child.join(timeout=60)


def test_the_next_start_takes_over_the_folder_of_a_start_that_died_before_its_first_checkpoint(tmp_path):
    _dead_start(tmp_path)
    folder = tmp_path / "lit_gpu" / "version_0"
    assert (folder / layout.LOCK_NAME).is_file() and (folder / "metrics.csv").is_file()
    claim = claims.claim_run(tmp_path, same_model=lambda _: True)
    assert claim.taken_over and claim.folder == folder
    assert sorted(p.name for p in folder.iterdir()) == [layout.LOCK_NAME]  # the dead start's files are gone
    # while it runs (lock held) no other start takes it: a second start gets a new folder
    second = claims.claim_run(tmp_path, same_model=lambda _: True)
    assert not second.taken_over and second.folder.name == "version_1"
    second.lock.release()  # a clean end: the lock file goes, so a finished run is never taken over
    assert not (second.folder / layout.LOCK_NAME).exists()
    third = claims.claim_run(tmp_path, same_model=lambda _: True)
    assert third.folder.name == "version_2"
    claim.lock.release()
    third.lock.release()


def test_only_an_abandoned_folder_of_the_same_model_without_checkpoints_is_taken_over(tmp_path):
    _dead_start(tmp_path)  # version_0: another model
    _dead_start(tmp_path)  # version_1: this one's, with a checkpoint (resumed from, not taken over)
    ckpt = tmp_path / "lit_gpu" / "version_1" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"x")
    claim = claims.claim_run(tmp_path, same_model=lambda folder: folder.name != "version_0")
    assert not claim.taken_over and claim.folder.name == "version_2"
    claim.lock.release()
    assert claims.claim_run(tmp_path, same_model=None).folder.name == "version_3"  # never asked: never


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
def test_another_users_folders_are_never_taken_over_continued_or_written(tmp_path, capsys):
    _dead_start(tmp_path)
    theirs = tmp_path / "lit_gpu" / "version_0"
    ckpt = theirs / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir()
    torch.save(_header(5, True, 6), ckpt)
    (theirs / "checkpoints" / "last.ckpt").unlink()  # an abandoned start of theirs, no checkpoint
    for path in [theirs, *theirs.rglob("*")]:
        os.chown(path, 65534, 65534)
    claim = claims.claim_run(tmp_path, same_model=lambda _: True)
    assert not claim.taken_over and claim.folder.name == "version_1"
    claim.lock.release()
    torch.save(_header(5, True, 6), ckpt)
    os.chown(ckpt, 65534, 65534)
    before = sorted(p.name for p in theirs.rglob("*"))
    assert folders.continuation(ckpt) is None  # a fit from their checkpoint logs into a folder of yours
    assert "is owned by" in capsys.readouterr().err
    assert folders.evaluation("test", ckpt).run is None  # so does an evaluation of it
    assert sorted(p.name for p in theirs.rglob("*")) == before


def test_each_evaluation_gets_its_own_folder_in_its_run_and_logs_at_the_checkpoints_step(tmp_path):
    folder = version_folder(tmp_path / "lit_gpu", 0, SIMPLE)
    ckpt = folder / "checkpoints" / "last.ckpt"
    torch.save({"global_step": 12}, ckpt)
    for k in range(2):
        evaluates = folders.evaluation("test", ckpt)
        assert evaluates == folders.Evaluation("test", folder, 11)
        run = folders.RunFolder(tmp_path, evaluates=evaluates)
        (csv_logger,) = loggers.make_loggers(["csv"], run)
        assert csv_logger.log_dir == str(folder / "evaluations" / f"test_{k}")
        csv_logger.log_metrics({"test/loss": 0.5}, step=0)
        csv_logger.finalize("success")
        assert (folder / "evaluations" / f"test_{k}" / "metrics.csv").read_text().splitlines()[1] == "11,0.5"
    loose = tmp_path / "loose.ckpt"
    torch.save({"global_step": 3}, loose)
    outside = folders.RunFolder(tmp_path, evaluates=folders.evaluation("predict", loose))
    assert outside.path == tmp_path / "lit_gpu" / "evaluations" / "predict_0"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
@pytest.mark.parametrize("planted", ["link", "their_folder", "file"])
def test_a_planted_lit_gpu_folder_in_a_shared_root_is_refused_and_nothing_written_there(tmp_path, planted):
    from lit_gpu.errors import LitGpuError

    root, elsewhere = tmp_path / "shared", tmp_path / "elsewhere"
    root.mkdir()
    root.chmod(0o1777)
    elsewhere.mkdir()
    os.chown(elsewhere, 65534, 65534)
    if planted == "link":
        (root / "lit_gpu").symlink_to(elsewhere)
        os.chown(root / "lit_gpu", 65534, 65534, follow_symlinks=False)
    elif planted == "their_folder":
        (root / "lit_gpu").mkdir()
        os.chown(root / "lit_gpu", 65534, 65534)
    else:
        (root / "lit_gpu").write_text("")
    for claim in (lambda: claims.claim_run(root), lambda: claims.claim_evaluation(root / "lit_gpu", "test")):
        with pytest.raises(LitGpuError) as err:
            claim()
        message = str(err.value)
        assert "\n" not in message and "--trainer.default_root_dir" in message and "lit_gpu" in message
        assert ("uid 65534" in message) == (planted == "their_folder")
    assert list(elsewhere.iterdir()) == []
    if planted == "their_folder":
        assert list((root / "lit_gpu").iterdir()) == []
    mine = tmp_path / "mine"
    claim = claims.claim_run(mine)  # made fresh: a real folder of this user
    assert claim.folder.parent == mine / "lit_gpu" and not (mine / "lit_gpu").is_symlink()
    claim.lock.release()


def test_the_run_a_resolution_found_is_used_not_looked_up_again(tmp_path, monkeypatch):
    """The CLI hands on the run folder its ``--ckpt_path`` resolution found: continuing the run or placing
    an evaluation looks at the layout no second time."""
    folder = version_folder(tmp_path / "lit_gpu", 2, SIMPLE)
    ckpt = folder / "checkpoints" / "last.ckpt"
    torch.save(_header(5, True, 6), ckpt)
    found = layout.run_of_checkpoint(ckpt)

    def looked_up_again(path):
        raise AssertionError(f"the run of {path} was looked up a second time")

    monkeypatch.setattr(layout, "run_of_checkpoint", looked_up_again)
    header = run_header.CheckpointHeader.of(ckpt, torch.load(ckpt, weights_only=True))
    resolved = store.Resolution("fit.ckpt_path", str(ckpt), header, None, found)
    assert folders.continuation(resolved) == folders.Continuation(folder, 6)
    assert folders.evaluation("test", resolved).run == folder
    outside = store.Resolution("fit.ckpt_path", str(ckpt), header, None, None)
    assert folders.continuation(outside) is None  # resolved: not inside a run folder
