"""RNGStateCallback's per-step snapshot of numpy's global generator: cheap, always what get_state() says."""

from __future__ import annotations

import random

import numpy as np
import pytest

from lit_gpu.callbacks import rng_state
from lit_gpu.callbacks.rng_state import _NumpyState


def _equal(a: tuple, b: tuple) -> bool:
    return a[0] == b[0] and np.array_equal(a[1], b[1]) and a[2:] == b[2:]


def test_the_snapshot_equals_get_state_after_any_sequence_of_draws():
    """Random mixes of uniform and Gaussian draws (the cached Gaussian too), seeding and set_state."""
    rng = random.Random(0)
    np.random.seed(0)
    saved = np.random.get_state()
    snapshot = _NumpyState()
    ops = [
        lambda: None,
        lambda: np.random.rand(),
        lambda: np.random.normal(),  # draws two, caches one: the next call uses the cache only
        lambda: np.random.standard_normal(3),
        lambda: np.random.randint(0, 10, size=rng.randint(1, 700)),
        lambda: np.random.seed(rng.randint(0, 100)),
        lambda: np.random.set_state(saved),
    ]
    for _ in range(600):
        for _ in range(rng.randint(0, 2)):
            rng.choice(ops)()
        assert _equal(snapshot.get(), np.random.get_state())


def test_steps_that_draw_nothing_reuse_the_last_read(monkeypatch):
    snapshot = _NumpyState()
    np.random.seed(1)
    first = snapshot.get()
    calls = []
    monkeypatch.setattr(rng_state.np.random, "get_state", lambda: calls.append(1) or first)
    assert snapshot.get() is first and calls == []  # nothing moved: no full read
    np.random.rand()
    snapshot.get()
    assert calls == [1]


def test_without_an_mt19937_every_step_reads_in_full(monkeypatch):
    monkeypatch.setattr(rng_state, "_mt19937_view", lambda bit_generator: None)
    snapshot = _NumpyState()
    np.random.seed(2)
    np.random.normal()
    assert _equal(snapshot.get(), np.random.get_state())
    np.random.normal()  # used the cached Gaussian
    assert _equal(snapshot.get(), np.random.get_state())


@pytest.mark.parametrize("draw", [lambda: None, np.random.rand])
def test_the_raw_state_is_the_key_and_position_get_state_reports(draw):
    """Pins numpy's ``mt19937_state`` layout that ``_mt19937_view`` reads (``key[624]``, then ``pos``)."""
    np.random.seed(3)
    draw()
    view = rng_state._mt19937_view(rng_state._global_bit_generator())
    state = np.random.get_state()
    assert view is not None
    raw = bytes(view)
    assert len(raw) == 2500
    assert np.array_equal(np.frombuffer(raw[:2496], dtype=np.uint32), state[1])
    assert int.from_bytes(raw[2496:], "little", signed=True) == state[2]
