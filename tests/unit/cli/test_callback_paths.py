"""Default callbacks are recorded by their public names; configs naming where they used to live still load."""

from __future__ import annotations

import contextlib
import importlib.util

import yaml

import lit_gpu.callbacks
from lit_gpu.cli import LitGpuCLI
from lit_gpu.cli.lightning_cli import DEFAULT_CALLBACKS, STEP_PATH_CALLBACKS
from lit_gpu.run import store as class_paths
from lit_gpu.run import store as run_config
from tests.helpers.paths import CONFIGS

SIMPLE_DEBUG = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]

#: class paths earlier lit_gpu versions wrote into every run's config.yaml
OLD_PATHS = [
    "lit_gpu.runs.RunFolderSync",
    "lit_gpu.callbacks.rng_state.RNGStateCallback",
    "lit_gpu.callbacks.logging_state.LoggingStateCallback",
    "lit_gpu.callbacks.interrupt.CheckpointOnInterrupt",
    "lit_gpu.callbacks.oom_recovery.OOMLoopName",
    "lit_gpu.callbacks.step_path.SkipIdleHooks",
    "lit_gpu.callbacks.step_path.LeanOptimizerStep",
    "lit_gpu.callbacks.batch_path.LeanTrainingBatch",
    "lit_gpu.upstream.step_path.LeanOptimizerStep",
    "lit_gpu.upstream.batch_path.LeanTrainingBatch",
]


def test_a_runs_config_names_the_default_callbacks_by_their_public_names(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with contextlib.suppress(SystemExit):  # --print_config prints and exits
        LitGpuCLI(args=["fit", *SIMPLE_DEBUG, "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    paths = [entry["class_path"] for entry in printed["trainer"]["callbacks"]]
    assert paths == [f"lit_gpu.callbacks.{cls.__qualname__}" for cls in STEP_PATH_CALLBACKS]
    for cls in DEFAULT_CALLBACKS:  # each one the public name's class (the guarantees too)
        assert getattr(lit_gpu.callbacks, cls.__qualname__) is cls


def test_a_config_naming_the_old_paths_still_loads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    old = tmp_path / "config.yaml"
    old.write_text(yaml.safe_dump({"trainer": {"callbacks": [{"class_path": path} for path in OLD_PATHS]}}))
    cli = LitGpuCLI(args=[*SIMPLE_DEBUG, "--config", str(old)], run=False)
    names = [type(cb).__name__ for cb in cli.trainer.callbacks]
    for path in OLD_PATHS:
        assert path.rsplit(".", 1)[1] in names


def test_old_paths_are_one_table_and_no_module_lives_on_at_them(tmp_path):
    """No shim modules: the old paths are mapped (lit_gpu.run.store.MOVED) to the public names."""
    for module in ("step_path", "batch_path", "step_graph"):
        assert importlib.util.find_spec(f"lit_gpu.callbacks.{module}") is None
    for path in OLD_PATHS:
        public = class_paths.MOVED[path]
        module, name = public.rsplit(".", 1)
        assert module == "lit_gpu.callbacks" and name in lit_gpu.callbacks.__all__
    # a run's saved config read by lit_gpu (a continued run compares it with the new one) says the same
    saved = tmp_path / "config.yaml"
    saved.write_text(yaml.safe_dump({"trainer": {"callbacks": [{"class_path": path} for path in OLD_PATHS]}}))
    read = run_config.read_plain(saved)
    assert [entry["class_path"] for entry in read["trainer"]["callbacks"]] == [
        class_paths.MOVED[path] for path in OLD_PATHS
    ]
