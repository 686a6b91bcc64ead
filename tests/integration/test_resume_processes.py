"""A user's restart, for real: the resume in a new process with real DataLoader worker processes, chains of
stops, and the epochs after the resumed one, compared with an uninterrupted run step by step.

Each case runs ``lit-gpu fit`` with :class:`tests.helpers.process_resume.Indexed` (a plain shuffled
``DataLoader`` of its own, 0, 1 or 2 workers, persistent or not, a ``prefetch_factor``, a validation
loader of the same kind) uninterrupted, then as a chain: SIGTERM after step k (exit 143, ``last.ckpt``),
``--ckpt_path last`` in a new process, maybe stopped again, to the end. Every step's batch indices, the
final weights and the optimizer state must equal the uninterrupted run's. The default tier runs each kind
once (persistent workers over two epochs after the resume among them); ``pytest -m full`` runs
:data:`FULL`. The runs are forked (tests/helpers/forked_cli.py): each resume is a new process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers.forked_cli import run_cli
from tests.helpers.process_resume import RECORDS, STOP_AT

pytestmark = pytest.mark.integration

EPOCHS = 3  # 4 batches an epoch: steps 0-11


def _fit(cwd: Path, env: dict, settings: dict, stop: int | None, resume: bool) -> str:
    args = ["fit", "--model", "tests.helpers.process_resume.Indexed", "--trainer.max_epochs", str(EPOCHS)]
    args += ["--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false"]
    for key, value in [(key, value) for key, value in settings.items() if value is not None]:
        args += [f"--model.{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    if resume:
        args += ["--ckpt_path", "last"]
    env = {**env, RECORDS: str(cwd / "records.jsonl"), STOP_AT: "" if stop is None else str(stop)}
    done = run_cli(args, cwd, env, timeout=300)
    assert done.returncode == (0 if stop is None else 143), done.stderr[-3000:]
    return done.stderr


def _ended(cwd: Path) -> tuple[list, dict]:
    records = [json.loads(line) for line in (cwd / "records.jsonl").read_text().splitlines()]
    (last,) = sorted(cwd.glob("runs/**/last.ckpt"))
    return records, torch.load(last, map_location="cpu", weights_only=True)


def _check(tmp_path: Path, env: dict, settings: dict, stops: tuple[int, ...]) -> list[str]:
    """The uninterrupted run and the chain stopped after each of ``stops``: equal; the lines said."""
    reference, chain = tmp_path / "reference", tmp_path / "chain"
    reference.mkdir()
    chain.mkdir()
    _fit(reference, env, settings, None, resume=False)
    said = []
    for index, stop in enumerate((*stops, None)):
        said += _fit(chain, env, settings, stop, resume=index > 0).splitlines()
    (want, want_ckpt), (got, got_ckpt) = _ended(reference), _ended(chain)
    assert got == want, f"{settings} stopped after {stops}: the batches differ"
    assert got_ckpt["global_step"] == want_ckpt["global_step"] == EPOCHS * 4
    for name, tensor in want_ckpt["state_dict"].items():
        assert torch.equal(got_ckpt["state_dict"][name], tensor), name
    assert _same(got_ckpt["optimizer_states"], want_ckpt["optimizer_states"])
    return [line for line in said if line.startswith("lit-gpu: resumed")]


def _same(got: object, want: object) -> bool:
    if isinstance(want, torch.Tensor):
        return isinstance(got, torch.Tensor) and torch.equal(got, want)
    if isinstance(want, dict):
        return (
            isinstance(got, dict) and got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
        )
    if isinstance(want, list | tuple):
        return isinstance(got, list | tuple) and len(got) == len(want) and all(map(_same, got, want))
    return got == want


PERSISTENT = {"workers": 2, "persistent": True}
#: each kind once: the issue-65 case (2 persistent workers, stopped in epoch 1, two epochs after) and one
#: worker with prefetch_factor 3 in a chain of two stops, the second at an epoch's last batch (no workers and
#: the rest: FULL)
SAMPLE = [
    pytest.param(PERSISTENT, (6,), id="persistent-2-workers-epoch-1"),
    pytest.param({"workers": 1, "prefetch_factor": 3}, (2, 7), id="1-worker-prefetch-3-chain"),
]
KINDS = {
    "0": {"workers": 0},
    "1": {"workers": 1},
    "2": {"workers": 2},
    "1p": {"workers": 1, "persistent": True},
    "2p": PERSISTENT,
    "2p-noval": {**PERSISTENT, "validate": False},
    "2-prefetch-4": {"workers": 2, "prefetch_factor": 4},
    "2p-prefetch-4": {**PERSISTENT, "prefetch_factor": 4},
}
#: every kind, stopped in epoch 1 (two epochs after it) and in a chain of two stops (epochs 0 and 2)
FULL = [
    pytest.param(settings, stops, marks=pytest.mark.full, id=f"{name}-{'-'.join(map(str, stops))}")
    for name, settings in KINDS.items()
    for stops in ((5,), (3, 9))
]


@pytest.mark.parametrize(("settings", "stops"), [*SAMPLE, *FULL])
def test_a_resume_in_a_new_process_continues_every_step_exactly(settings, stops, tmp_path, cli_env):
    lines = _check(tmp_path, cli_env, settings, stops)
    if not settings.get("persistent"):
        assert lines == [], lines  # exact: nothing to say
    for line in lines:  # persistent workers stopped after their first epoch restart their random streams
        assert "every batch comes in the uninterrupted run's order" in line, line


def test_a_logged_value_of_the_wrong_shape_is_one_line_before_anything_trains(tmp_path, cli_env):
    """An epoch accumulator of shape (3,) where Lightning keeps one number: one line naming the key, exit 2,
    no step trained (it was Lightning's ValueError traceback at the first log)."""
    args = ["fit", "--model", "tests.helpers.process_resume.Indexed", "--trainer.accelerator", "cpu"]
    env = {**cli_env, RECORDS: str(tmp_path / "records.jsonl"), STOP_AT: "6"}
    assert run_cli(args, tmp_path, env, timeout=300).returncode == 143  # last.ckpt in epoch 1
    (last,) = tmp_path.glob("runs/**/last.ckpt")
    checkpoint = torch.load(last, map_location="cpu", weights_only=True)
    (entry,) = [e for e in checkpoint["lit_gpu_logging_state"]["results"] if e["key"].endswith("train/loss")]
    entry["value"] = torch.tensor([1.0, 2.0, 3.0])
    forged = tmp_path / "forged.ckpt"
    torch.save(checkpoint, forged)
    trained = (tmp_path / "records.jsonl").read_text()
    done = run_cli([*args, "--ckpt_path", str(forged)], tmp_path, {**env, STOP_AT: ""}, timeout=300)
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert done.returncode == 2 and len(errors) == 1, done.stderr[-3000:]
    assert "train/loss" in errors[0] and "shape (3,)" in errors[0] and "Traceback" not in done.stderr
    assert (tmp_path / "records.jsonl").read_text() == trained  # nothing trained
