"""The benchmarks' noise gates (benchmarks/_recipe.py): when a speed ratio may be reported at all."""

from __future__ import annotations

import importlib.util

import pytest

from tests.helpers.paths import REPO_ROOT


@pytest.fixture(scope="module")
def recipe():
    spec = importlib.util.spec_from_file_location("_recipe", REPO_ROOT / "benchmarks" / "_recipe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("before", "after", "others", "noise"),
    [
        (0.7, 2.6, 0.01, None),  # the benchmark's own processes raised the load: a result
        (0.7, 1.1, 0.00, None),
        (1.6, 1.2, 0.00, "load 1.60 before the run"),  # the machine was busy when it started
        (0.5, 2.6, 0.40, "other processes used 0.40 cores"),  # someone else ran meanwhile
        (0.7, 1.4, None, None),  # no /proc/stat: the load before and after, as for one process
        (0.7, 1.6, None, "load 1.60"),
    ],
)
def test_a_ratio_is_noise_when_the_machine_was_busy_or_others_ran(recipe, before, after, others, noise):
    why = recipe.ratio_noise(before, after, others)
    assert why is None if noise is None else noise in why


def test_foreign_cpu_splits_the_busy_time_into_others_and_own(recipe, monkeypatch):
    ticks = iter([(100.0, 10.0, 0.0), (103.0, 11.5, 2.0)])  # busy s, own s, monotonic s
    monkeypatch.setattr(recipe.ForeignCpu, "_now", staticmethod(lambda: next(ticks)))
    others, own = recipe.ForeignCpu().split()
    assert (others, own) == pytest.approx((0.75, 0.75))  # 1.5 of the 3 busy seconds were not its own


def test_foreign_cpu_is_unknown_without_proc_stat(recipe, monkeypatch):
    monkeypatch.setattr(recipe.ForeignCpu, "_now", staticmethod(lambda: None))
    assert recipe.ForeignCpu().split() is None
