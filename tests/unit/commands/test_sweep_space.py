"""Search-space files of ``lit-gpu sweep``: checks, sampling and the flags handed to each trial."""

from __future__ import annotations

import optuna
import pytest

from lit_gpu.commands.sweep.space import format_value, load_space
from lit_gpu.errors import LitGpuError
from tests.helpers.paths import CONFIGS

LR = "model.init_args.optimizer.init_args.lr"


def _load(tmp_path, text: str):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return load_space(path)


@pytest.mark.parametrize("name", ["simple.yaml", "mnist_fast.yaml"])
def test_shipped_spaces_load(name):
    space = load_space(CONFIGS / "sweeps" / name)
    assert space.params and all(p.type in ("float", "int", "categorical") for p in space.params)


def test_distributions_sample_within_bounds_and_become_flags(tmp_path):
    space = _load(
        tmp_path,
        f"{LR}: {{type: float, low: 1.0e-4, high: 0.1, log: true}}\n"
        "trainer.max_epochs: {type: int, low: 2, high: 8, step: 2}\n"
        "data.init_args.batch_size: {type: categorical, choices: [32, 64]}\n"
        "trainer.limit_val_batches: 1.0\n",
    )
    assert space.fixed == {"trainer.limit_val_batches": 1.0}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        values = space.sample(study.ask())
        assert 1e-4 <= values[LR] <= 0.1
        assert values["trainer.max_epochs"] in (2, 4, 6, 8)
        assert values["data.init_args.batch_size"] in (32, 64)
    flags = space.flags({LR: 0.01, "trainer.max_epochs": 4, "data.init_args.batch_size": 64})
    assert flags == [
        "--trainer.limit_val_batches=1.0",
        f"--{LR}=0.01",
        "--trainer.max_epochs=4",
        "--data.init_args.batch_size=64",
    ]
    assert space.first_values() == {LR: 1e-4, "trainer.max_epochs": 2, "data.init_args.batch_size": 32}


@pytest.mark.parametrize(
    ("value", "text"), [("adam", "adam"), (True, "true"), (None, "null"), (3, "3"), ([0, 1], "[0, 1]")]
)
def test_values_are_written_as_the_cli_reads_them(value, text):
    assert format_value(value) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"{LR}: {{type: floaty, low: 0, high: 1}}\n", "unknown type 'floaty'"),
        (f"{LR}: {{low: 0, high: 1}}\n", "unknown type None"),
        (f"{LR}: {{type: float, low: 0}}\n", "type float needs high"),
        (f"{LR}: {{type: float, low: 0, high: 1, lg: true}}\n", "unknown field(s) lg"),
        (f"{LR}: {{type: float, low: 1, high: 0}}\n", "low (1) is above high (0)"),
        (f"{LR}: {{type: float, low: 0, high: 1, log: true}}\n", "log: true needs low > 0"),
        (f"{LR}: {{type: float, low: a, high: 1}}\n", "'low' must be a number"),
        ("trainer.max_epochs: {type: int, low: 1.5, high: 3}\n", "'low' must be an integer"),
        ("trainer.max_epochs: {type: int, low: 1, high: 3, step: 0}\n", "'step' must be positive"),
        (f"{LR}: {{type: categorical, choices: []}}\n", "'choices' must be a non-empty list"),
        (f"{LR}: {{type: categorical, choices: [[1]]}}\n", "choices must be plain values"),
        ("trainer..max_epochs: {type: int, low: 1, high: 3}\n", "keys must be dotted config keys"),
        ("- a\n- b\n", "must be a non-empty mapping"),
        ("trainer.max_epochs: 3\n", "no key has a distribution"),
        ("a: [\n", "cannot read it"),
    ],
)
def test_bad_spaces_are_one_line_errors(tmp_path, text, message):
    with pytest.raises(LitGpuError) as info:
        _load(tmp_path, text)
    assert message in str(info.value)
    assert "\n" not in str(info.value) and str(tmp_path / "space.yaml") in str(info.value)


def test_missing_space_file(tmp_path):
    with pytest.raises(LitGpuError, match="not found; pass e.g. --search lit_gpu:sweeps/simple"):
        load_space(tmp_path / "nope.yaml")


def test_a_space_reads_numbers_and_dates_as_jsonargparse_reads_a_config(tmp_path):
    """``low: 1e-4`` was the string '1e-4' (PyYAML's YAML 1.1 resolver) and the space refused; a search space
    is read with jsonargparse's loader, as the ``--config`` it sweeps: 1e-4 a float, a date a string."""
    from jsonargparse._loaders_dumpers import yaml_load

    text = (
        f"{LR}: {{type: float, low: 1e-4, high: 3E-1, log: true}}\n"
        "data.init_args.tag: {type: categorical, choices: [2024-01-01, 1e3, 0x10]}\n"
        "trainer.gradient_clip_val: 1e0\n"
    )
    space = _load(tmp_path, text)
    assert space.params[0].args == {"low": 1e-4, "high": 0.3, "log": True}
    assert space.params[1].args == {"choices": ["2024-01-01", 1000.0, 16]}
    assert space.fixed == {"trainer.gradient_clip_val": 1.0}
    assert yaml_load(text)[LR] == {"type": "float", "low": 1e-4, "high": 0.3, "log": True}


@pytest.mark.parametrize("key", ["weights_only", "ckpt_path", "config", "trust_modules", "predict_out"])
def test_a_space_cannot_set_a_safety_switch_or_what_a_trial_resumes_from(tmp_path, key):
    """A space holding ``weights_only: false`` and ``ckpt_path: evil.ckpt`` became ``--weights_only=false
    --ckpt_path=...`` flags of every trial, and the trial ran the checkpoint's pickled code."""
    with pytest.raises(LitGpuError, match=f"{key}: a search space cannot set"):
        _load(tmp_path, f"{LR}: {{type: float, low: 0.01, high: 0.1}}\n{key}: false\n")
