"""Runs of a CLI built with ``model_class=`` (issue 64): found by the classes they record, never passed over
silently where an older one may be this model's."""

from __future__ import annotations

import pytest
from jsonargparse import Namespace

from lit_gpu.errors import LitGpuError
from lit_gpu.run import store
from lit_gpu.run.store import resolve_ckpt_path
from tests.helpers.run_store import run_folder


class MyModel:  # the classes a script's CLI fixed (never built here)
    pass


class MyData:
    pass


MyModel.__module__ = MyData.__module__ = "mymodels"
#: a CLI as LightningCLI keeps what it was built with
CLI = Namespace(
    model_class=MyModel, subclass_mode_model=False, datamodule_class=MyData, subclass_mode_data=False
)


def _fixed(root, ckpt_path: str, command: str = "fit") -> Namespace:
    """The parsed config of ``python train.py COMMAND`` whose CLI fixed the classes: init args only."""
    sub = Namespace(
        ckpt_path=ckpt_path,
        new_run=False,
        model=Namespace(hidden=8),
        data=Namespace(batch_size=4),
        trainer=Namespace(default_root_dir=str(root), logger=None),
        checkpoint=Namespace(dirpath=None),
    )
    return Namespace(subcommand=command, **{command: sub})


def _script_run(root, version: int = 0, recorded: bool = True):
    run = run_folder(root, version)
    (run / "config.yaml").write_text("model:\n  hidden: 8\ndata:\n  batch_size: 4\n")
    if recorded:
        (run / "classes.yaml").write_text("model: mymodels.MyModel\ndata: mymodels.MyData\n")
    return run


def test_built_classes_are_those_a_cli_fixed():
    cli = Namespace(model_class=Namespace, subclass_mode_model=False, datamodule_class=None)
    assert store.built_classes(cli) == {"model": "jsonargparse._namespace.Namespace"}
    cli.subclass_mode_model = True  # --model picks a subclass: the config names it
    assert store.built_classes(cli) == {}


@pytest.mark.parametrize("command", ["fit", "test"])
def test_last_finds_the_run_by_the_classes_it_recorded(tmp_path, command):
    run = _script_run(tmp_path)
    resolution = resolve_ckpt_path(_fixed(tmp_path, "last", command), CLI)
    assert resolution is not None and resolution.path == str(run / "checkpoints" / "last.ckpt")
    assert "MyModel + MyData" in resolution.line


def test_a_stopped_run_that_names_no_class_is_said_and_never_trained_over(tmp_path):
    _script_run(tmp_path, recorded=False)  # written before runs recorded the classes
    with pytest.raises(LitGpuError, match="name no model class.*leave --ckpt_path out"):
        resolve_ckpt_path(_fixed(tmp_path, "last"), CLI)
    with pytest.raises(LitGpuError, match="version_0 hold a last.*name no model class"):
        resolve_ckpt_path(_fixed(tmp_path, "last", "test"), CLI)
    # a class-path CLI (another model, surely): a new run, with the line saying what is there
    resolution = resolve_ckpt_path(_fixed(tmp_path, "last"))
    assert resolution is not None and resolution.path is None
    assert "name no model class" in resolution.line and "training from scratch" in resolution.line


def test_export_and_rebuild_read_the_recorded_classes(tmp_path):
    run = _script_run(tmp_path)
    boring = "lightning.pytorch.demos.boring_classes"
    (run / "config.yaml").write_text("model: {}\ndata: {}\n")
    (run / "classes.yaml").write_text(f"model: {boring}.BoringModel\ndata: {boring}.BoringDataModule\n")
    fields = store.rebuild_fields(run / "config.yaml")
    assert fields.model == {"class_path": f"{boring}.BoringModel", "init_args": {}}
    assert fields.data == {"class_path": f"{boring}.BoringDataModule", "init_args": {}}


def test_a_checkpoint_alone_gives_a_model_class_cli_the_init_args_only(tmp_path):
    from lit_gpu.run.folder import args_with_saved_config

    run = _script_run(tmp_path)
    ckpt = str(run / "checkpoints" / "last.ckpt")
    argv, used = args_with_saved_config(["test", "--ckpt_path", ckpt], fixed=store.built_classes(CLI))
    assert argv[:5] == ["test", "--model", '{"hidden": 8}', "--data", '{"batch_size": 4}']
    assert used is not None and used.describe() == "model MyModel and data MyData"
