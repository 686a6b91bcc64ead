"""NoProfiler: what lit-gpu gives a Trainer in place of Lightning's idle PassThroughProfiler."""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.profilers import PassThroughProfiler, SimpleProfiler

from lit_gpu.fastpath.hooks import NoProfiler, skip_idle_profiler


def _trainer(**kwargs) -> pl.Trainer:
    return pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, **kwargs)


def test_the_idle_default_is_replaced_and_a_chosen_profiler_kept():
    trainer = _trainer()
    assert skip_idle_profiler(trainer) is True
    assert type(trainer.profiler) is NoProfiler
    simple = _trainer(profiler="simple")
    assert skip_idle_profiler(simple) is False
    assert isinstance(simple.profiler, SimpleProfiler)


def test_no_profiler_profiles_nothing_nested_and_reports_nothing():
    profiler = NoProfiler()
    order = []
    with profiler.profile("outer"), profiler.profile("inner"):
        order.append("body")
    assert order == ["body"] and profiler.summary() == ""
    assert isinstance(profiler, PassThroughProfiler)  # Lightning's own checks treat it as the default


def test_cli_trainer_gets_no_profiler_unless_one_is_asked_for(tmp_path):
    from lit_gpu.cli import LitGpuCLI

    base = ["--model", "lit_gpu.modules.ClassificationModule", "--model.net", "lit_gpu.nets.FastMnistNet",
            "--trainer.default_root_dir", str(tmp_path)]  # fmt: skip
    assert type(LitGpuCLI(args=base, run=False).trainer.profiler) is NoProfiler
    chosen = LitGpuCLI(args=[*base, "--trainer.profiler", "simple"], run=False).trainer.profiler
    assert isinstance(chosen, SimpleProfiler)
