"""One-field changes of the shipped CPU configs end in a run or in one line, never in a traceback.

Each case takes a shipped config, replaces one field with a value of the wrong kind (``null``, ``{}``,
``[]``, a huge or negative number, a string, a float for an integer, a float beyond float32) and runs
``lit-gpu fit`` with ``--trainer.fast_dev_run 1`` (one batch: model, data and optimizer are all
built and used). The exit code must be 0 or 2, with no traceback. A seeded sample of the cases runs by
default; ``pytest -m slow tests/integration/test_config_fuzz.py`` runs every field with every kind.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lit_gpu.cli import main
from tests.helpers.paths import CONFIGS

KINDS: dict[str, Any] = {
    "null": None,
    "mapping": {},
    "list": [],
    "huge": 10**12,
    "negative": -1,
    "string": "x",
    "float": 2.5,
    "beyond_float32": 1e300,
}
# the shipped configs that train on a CPU (the *_gpu ones ask for CUDA-only levers); MNIST ones on fake data
CPU_CONFIGS = ("simple.yaml", "foonet.yaml", "mnist.yaml", "mnist_fast.yaml", "mnist_fastest.yaml")
SAMPLED_PER_CONFIG = 3  # default tier: ~15 runs of ~1 s


def _fields(config: dict, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for key, value in config.items():
        if isinstance(value, dict) and value:
            yield from _fields(value, (*prefix, key))
        else:
            yield (*prefix, key)


def _cases(name: str) -> list[tuple[str, tuple[str, ...], str]]:
    config = yaml.safe_load((CONFIGS / name).read_text())
    return [(name, field, kind) for field in _fields(config) for kind in KINDS]


ALL_CASES = [case for name in CPU_CONFIGS for case in _cases(name)]
SAMPLED = [c for name in CPU_CONFIGS for c in random.Random(name).sample(_cases(name), SAMPLED_PER_CONFIG)]


def _changed(name: str, field: tuple[str, ...], kind: str, folder: Path) -> Path:
    config = yaml.safe_load((CONFIGS / name).read_text())
    node = config
    for key in field[:-1]:
        node = node[key]
    node[field[-1]] = KINDS[kind]
    path = folder / "changed.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _run_changed(case: tuple[str, tuple[str, ...], str], mnist: Path, tmp_path, monkeypatch, capsys) -> None:
    name, field, kind = case
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])
    argv = [
        "fit",
        "--config",
        str(_changed(name, field, kind, tmp_path)),
        "--config",
        str(CONFIGS / "debug.yaml"),
    ]
    argv += ["--trainer.fast_dev_run", "1"]
    if "mnist" in name and field[-1] != "data_dir":  # never a download: the fake MNIST, or a mistake
        argv += ["--data.data_dir", str(mnist), "--data.download", "false", "--data.num_workers", "0"]
    try:
        main(argv)
        code = 0
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    changed = f"{name}: {'.'.join(field)} = {KINDS[kind]!r}"
    assert "Traceback" not in err and code in (0, 2, None), f"{changed}: exit {code}\n{err[-3000:]}"
    if code == 2:
        lines = [ln for ln in err.splitlines() if ln.startswith("lit-gpu: error:")]
        assert len(lines) == 1, f"{changed}\n{err[-3000:]}"


@pytest.mark.parametrize("case", SAMPLED, ids=lambda c: f"{c[0]}:{'.'.join(c[1])}={c[2]}")
def test_a_sample_of_one_field_changes_ends_in_a_run_or_one_line(
    case, fake_mnist_dir, tmp_path, monkeypatch, capsys
):
    _run_changed(case, fake_mnist_dir, tmp_path, monkeypatch, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: f"{c[0]}:{'.'.join(c[1])}={c[2]}")
def test_every_one_field_change_ends_in_a_run_or_one_line(
    case, fake_mnist_dir, tmp_path, monkeypatch, capsys
):
    _run_changed(case, fake_mnist_dir, tmp_path, monkeypatch, capsys)
