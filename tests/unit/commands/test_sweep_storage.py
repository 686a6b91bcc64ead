"""``lit_gpu.commands.sweep.storage``: trial attributes and owner records are checked data."""

from __future__ import annotations

import json
import os
from pathlib import Path

import optuna
import pytest

from lit_gpu.commands.sweep import storage as sweep_storage
from lit_gpu.commands.sweep import worker as owners
from lit_gpu.commands.sweep.space import load_space
from lit_gpu.errors import LitGpuError

LR = "model.init_args.optimizer.init_args.lr"


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(
        f"{LR}: {{type: float, low: 1.0e-4, high: 0.3, log: true}}\n"
        "data.init_args.batch_size: {type: categorical, choices: [16, 32]}\n"
        "trainer.max_epochs: {type: int, low: 2, high: 8, step: 2}\n"
    )
    return load_space(path)


def _trial(**attrs):
    trial = optuna.trial.create_trial(
        params={LR: 0.01},
        distributions={LR: optuna.distributions.FloatDistribution(1e-4, 0.3, log=True)},
        value=1.0,
        user_attrs=attrs,
    )
    trial.number = 0  # the first trial of a study (create_trial leaves -1 until a study adds it)
    return trial


def test_a_run_dir_inside_the_sweep_folder_is_read(tmp_path, space):
    sweep_dir = tmp_path / "runs/sweeps/s"
    record = sweep_storage.read_trial(_trial(run_dir=str(sweep_dir / "version_0")), sweep_dir, space, "j")
    assert record.run_dir == sweep_dir / "version_0" and record.params == {LR: 0.01}
    missing = sweep_storage.read_trial(_trial(), sweep_dir, space, "j")
    assert missing.run_dir == sweep_dir / f"version_{missing.number}"  # not yet set: from its number


RUN_DIR_FORMS = [
    "absolute", "dotdot", "symlink", "not-a-string", "the-sweep-folder", "another-trials-folder",
    "its-folder-links-out", "tilde", "url", "nul", "not-version-digits",
]  # fmt: skip


@pytest.mark.parametrize("form", RUN_DIR_FORMS)
def test_a_run_dir_other_than_the_trials_own_folder_is_refused(form, tmp_path, space, monkeypatch):
    """A tampered storage names a folder lit_gpu would write to (sweep attacker pass, round 8)."""
    sweep_dir = tmp_path / "runs/sweeps/s"
    sweep_dir.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    (sweep_dir / "version_1").mkdir()
    os.symlink(victim, sweep_dir / "version_9")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    value = {
        "absolute": str(victim),
        "dotdot": str(sweep_dir / ".." / ".." / ".." / "victim"),
        "symlink": str(sweep_dir / "version_9"),
        "not-a-string": ["x"],
        "the-sweep-folder": str(sweep_dir) + "/.",
        "another-trials-folder": str(sweep_dir / "version_1"),
        "its-folder-links-out": str(sweep_dir / "version_0"),
        # version_0 with ~ expanded (how it was checked), <cwd>/<sweep>/version_0 as written (how it was used)
        "tilde": "~/.." + str(sweep_dir / "version_0"),
        "url": f"file://{sweep_dir / 'version_0'}",
        "nul": str(sweep_dir / "version_0") + "\0",
        "not-version-digits": str(sweep_dir / "version_\u0660"),  # an Arabic-Indic zero
    }[form]
    if form == "its-folder-links-out":
        os.symlink(victim, sweep_dir / "version_0")
    with pytest.raises(LitGpuError, match="is not its own folder version_0 in the sweep folder") as err:
        sweep_storage.read_trial(_trial(run_dir=value), sweep_dir, space, "j")
    assert "\n" not in str(err.value)


def test_a_run_dir_that_resolves_to_the_trials_folder_gives_that_folder_as_lit_gpu_built_it(tmp_path, space):
    sweep_dir = tmp_path / "runs/sweeps/s"
    (sweep_dir / "version_0").mkdir(parents=True)
    fd = os.open(sweep_dir, os.O_RDONLY)
    try:
        # /proc/self/fd/N means another folder once N is reused: the record is compared, never used
        spellings = (
            str(sweep_dir / "x" / ".." / "version_0"),
            f"{sweep_dir}//version_0/",
            f"/proc/self/fd/{fd}/version_0",
        )
        for value in spellings:
            record = sweep_storage.read_trial(_trial(run_dir=value), sweep_dir, space, "j")
            assert record.run_dir == sweep_dir / "version_0"
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("key", "value", "ok"),
    [
        (LR, 0.01, True),
        (LR, 5.0, False),
        (LR, float("nan"), False),
        (LR, "0.01", False),
        ("data.init_args.batch_size", 32, True),
        ("data.init_args.batch_size", 64, False),
        ("data.init_args.batch_size", 32.0, False),
        ("trainer.max_epochs", 4, True),
        ("trainer.max_epochs", 5, False),  # off the step grid
        ("trainer.max_epochs", True, False),
        ("trainer.callbacks", "x", False),  # not a key of the space
    ],
)
def test_values_outside_the_search_space_are_refused(key, value, ok, space):
    if ok:
        assert sweep_storage.check_params({key: value}, space, 3, "j") == {key: value}
    else:
        with pytest.raises(LitGpuError, match=r"trial 3 has .* the search space"):
            sweep_storage.check_params({key: value}, space, 3, "j")


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"pid": "1", "host": "h", "beat": 1}',
        '{"pid": 1, "host": "h", "beat": 1, "state": "x"}',
    ],
)
def test_a_malformed_owner_record_counts_as_absent(text, tmp_path):
    path = tmp_path / "o.json"
    path.write_text(text)
    assert sweep_storage.read_owner(path) is None


def test_owner_records_round_trip(tmp_path):
    owner = sweep_storage.Owner(pid=12, host="h", beat=3.5, child_pid=13)
    path = tmp_path / ".owners" / "version_1.json"
    owners.write_owner(path, owner)
    assert sweep_storage.read_owner(path) == owner
    assert json.loads(path.read_text())["state"] == "running"
    owners.remove_owner(path)
    assert not path.exists() and sweep_storage.owner_path(Path("s"), Path("s/version_1")) == Path(
        "s/.owners/version_1.json"
    )
