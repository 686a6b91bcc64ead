"""The gradient scaler's state (``precision: 16-mixed``) against what ``torch.amp.GradScaler`` takes (red
team wt-rt2): before, no contract read it, and ``GradScaler.load_state_dict`` took a string scale (a
traceback at ``fill_``) or a NaN/0/inf scale (every step skipped, silently)."""

from __future__ import annotations

import pytest
import torch

from lit_gpu.checkpoints.contracts import (
    SCALER_STATE_KEYS,
    ContractError,
    check_contracts,
    lightning_contract,
    scaler_problem,
)


def _saved() -> dict:
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=7)
    return dict(scaler.state_dict())


@pytest.mark.parametrize("key", SCALER_STATE_KEYS)
def test_a_scalers_own_state_fits_under_each_key_lightning_saves_it(key):
    check_contracts({key: _saved()}, lightning_contract(), "ckpt")
    check_contracts({}, lightning_contract(), "ckpt")  # no scaler: nothing to check


FORGED = {
    "scale a string": ("scale", "x"),
    "scale NaN": ("scale", float("nan")),
    "scale 0": ("scale", 0.0),
    "scale inf": ("scale", float("inf")),
    "growth_factor 1": ("growth_factor", 1.0),
    "backoff_factor 1": ("backoff_factor", 1.0),
    "backoff_factor 0": ("backoff_factor", 0.0),
    "growth_interval 0": ("growth_interval", 0),
    "growth_tracker negative": ("_growth_tracker", -1),
    "growth_tracker a float": ("_growth_tracker", 1.5),
    "a key more": ("step", 1),
}


@pytest.mark.parametrize("case", sorted(FORGED))
def test_a_forged_scaler_state_is_one_line(case):
    key, value = FORGED[case]
    state = {**_saved(), key: value}
    assert scaler_problem(state) is not None
    with pytest.raises(ContractError, match="MixedPrecision") as raised:
        check_contracts({"MixedPrecision": state}, lightning_contract(), "ckpt")
    assert "\n" not in str(raised.value)


def test_a_scale_a_run_reached_loads_into_a_scaler():
    state = {**_saved(), "scale": 0.5, "_growth_tracker": 6}  # backed off below 1: legitimate
    assert scaler_problem(state) is None
    torch.amp.GradScaler("cpu").load_state_dict(state)
