"""lit_gpu.resume.plain without a Trainer: what can be replayed, the state's contract, the replay itself."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, SequentialSampler, TensorDataset

from lit_gpu.errors import LitGpuError
from lit_gpu.resume.loaders import ResumableDataLoader
from lit_gpu.resume.plain import (
    ReplayDataLoader,
    check_replay_state,
    make_replayable,
    order_settings,
    why_not_replayable,
)

DATA = TensorDataset(torch.arange(40.0))


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(4))


class MyLoader(DataLoader):
    pass


@pytest.mark.parametrize(
    ("loader", "why"),
    [
        (DataLoader(DATA, batch_size=4, shuffle=True), None),
        (DataLoader(DATA, batch_size=4), None),
        (DataLoader(DATA, batch_size=None), None),
        (ResumableDataLoader(DATA, batch_size=4), None),  # a state of its own
        (DataLoader(Stream(), batch_size=2), "its dataset is an IterableDataset"),
        (MyLoader(DATA, batch_size=4), "it is a MyLoader, not a plain DataLoader"),
        (DataLoader(DATA, sampler=[1, 2, 3]), "its sampler list has no state"),
    ],
)
def test_why_not_replayable(loader, why):
    assert why_not_replayable(loader) == why
    assert isinstance(make_replayable([loader])[0], ReplayDataLoader) == (
        why is None and type(loader) is not ResumableDataLoader
    )


def _epoch(loader: DataLoader) -> list[torch.Tensor]:
    return [batch[0] for batch in loader]


def test_a_replayed_epoch_continues_the_saved_one_and_the_rng_is_left_as_found():
    torch.manual_seed(0)
    loader = make_replayable([DataLoader(DATA, batch_size=4, shuffle=True)])[0]
    _epoch(loader)  # epoch 0
    it = iter(loader)
    first = [next(it)[0] for _ in range(3)]
    state, after = loader.state_dict(), torch.get_rng_state()
    rest = [batch[0] for batch in it]

    torch.manual_seed(123)  # another process: its own RNG, restored to the checkpoint's below
    again = make_replayable([DataLoader(DATA, batch_size=4, shuffle=True)])[0]
    again.load_state_dict(state)
    torch.set_rng_state(after)
    assert again.resume_at(3) is None
    replayed = _epoch(again)
    assert len(replayed) == len(rest) and all(map(torch.equal, replayed, rest))
    assert again.batches_handed_out == 3 + len(rest)
    assert not any(torch.equal(a, b) for a, b in zip(first, replayed, strict=False))
    assert torch.equal(
        torch.get_rng_state(), after
    )  # the replay drew from the saved states, not the live one
    assert check_replay_state(state, [torch.default_generator.get_state().numel()]) is None


def test_another_epoch_length_is_named_and_not_replayed():
    loader = make_replayable([DataLoader(DATA, batch_size=4, shuffle=True)])[0]
    _epoch(loader)
    state = loader.state_dict()
    other = make_replayable([DataLoader(DATA, batch_size=8, shuffle=True)])[0]
    other.load_state_dict(state)
    assert other.resume_at(3) == "it changed since the checkpoint: batch_size 4 -> 8"
    assert len(_epoch(other)) == 5  # the whole epoch, from its start
    fresh = make_replayable([DataLoader(DATA, batch_size=4)])[0]
    assert fresh.resume_at(0) is None and fresh.resume_at(2) == "the checkpoint holds no state of it"


ORDER = order_settings(DataLoader(DATA, batch_size=4), SequentialSampler(DATA))
V2 = {
    "replay_state": 2, "generators": [], "batches": 10, "order": ORDER, "handed_out": 0, "offset": 0,
    "workers_seed": None, "made_iterator": True,
}  # fmt: skip


def test_a_version_1_state_is_still_read():
    loader = make_replayable([DataLoader(DATA, batch_size=4, shuffle=True)])[0]
    next(iter(loader))
    state = {k: v for k, v in loader.state_dict().items() if k in ("replay_state", "generators", "batches")}
    again = make_replayable([DataLoader(DATA, batch_size=4, shuffle=True)])[0]
    again.load_state_dict({**state, "replay_state": 1})
    assert again.changes() is None and again.resume_at(3) is None


@pytest.mark.parametrize(
    ("state", "problem"),
    [
        ([], "not a replay state"),
        ({"replay_state": 3, "generators": [], "batches": 1}, "replay state version 3"),
        ({"replay_state": 2, "generators": [], "batches": 1}, "not a version 2 replay state"),
        ({**V2, "order": {**ORDER, "batch_size": "4"}}, "loader setting batch_size is a str"),
        ({**V2, "order": {**ORDER, "shuffle": 1}}, "loader setting shuffle is a int"),
        ({**V2, "order": {**ORDER, "samples": True}}, "loader setting samples is a bool"),
        ({**V2, "order": {**ORDER, "sampler": "x" * 201}}, "longer than 200"),
        ({**V2, "order": {"samples": 40}}, "loader settings are not the keys"),
        ({**V2, "offset": -1}, "offset batch count"),
        ({**V2, "handed_out": 2**63}, "handed_out batch count"),
        ({**V2, "workers_seed": bytes(7)}, "the workers' seed state is not 5056 bytes"),
        ({**V2, "made_iterator": 1}, "made_iterator is not a bool"),
        ({"replay_state": True, "generators": [], "batches": 1}, "replay state version True"),
        ({"replay_state": 1, "generators": [], "batches": -1}, "batch count"),
        (
            {"replay_state": 1, "generators": [bytes(3)], "batches": 1},
            "not 5056 bytes",
        ),
        (
            {"replay_state": 1, "generators": [torch.zeros(5056, dtype=torch.uint8)], "batches": 1},
            "not 5056 bytes",
        ),
        ({"replay_state": 1, "generators": [1, 2], "batches": 1}, "1 generator states expected"),
        # the right length, content torch's generator refuses ("Invalid mt19937 state" at the resume's batch)
        ({"replay_state": 1, "generators": [b"\xff" * 5056], "batches": 1}, "torch refuses"),
        ({"replay_state": 1, "generators": [bytes(5056)], "batches": 1}, "torch refuses"),
    ],
)
def test_a_malformed_state_is_one_line_and_changes_nothing(state, problem):
    loader = make_replayable([DataLoader(DATA, batch_size=4)])[0]
    with pytest.raises(LitGpuError, match="training-loader state is malformed") as info:
        loader.load_state_dict(state)
    assert problem in str(info.value)
    assert loader.resume_at(2) == "the checkpoint holds no state of it"


def test_an_invalid_generator_state_is_refused_by_the_static_contract_before_any_restore():
    """The checkpoint-level contract (run before Lightning restores anything) refuses what set_state would."""
    from lit_gpu.checkpoints.contracts import ContractError, check_contracts

    loader = make_replayable([DataLoader(DATA, batch_size=4, shuffle=True)])[0]
    next(iter(loader))
    state = loader.state_dict()
    checkpoint = {"loops": {"fit_loop": {"state_dict": {"combined_loader": [state]}}}}
    check_contracts(checkpoint, loader.restore_contract(), "x")
    state["generators"] = [b"\xff" * len(state["generators"][0])]
    with pytest.raises(ContractError, match="torch refuses"):
        check_contracts(checkpoint, loader.restore_contract(), "x")


@pytest.mark.parametrize("version", [[], {}, [2], {"a": 1}])
def test_an_unhashable_replay_state_version_is_a_problem_not_a_type_error(version):
    """Red team wt-rt2 (a seeded fuzz of the saved state). Before: ``replay_state: []`` ended the contract
    check in ``TypeError: unhashable type: 'list'`` (a traceback) instead of its one line."""
    from lit_gpu.resume.plain import saved_replay_problem

    state = {"replay_state": version, "generators": [], "batches": 1}
    assert "replay state version" in saved_replay_problem(state)
    assert "replay state version" in check_replay_state(state, [])
