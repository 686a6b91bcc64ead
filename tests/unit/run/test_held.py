"""The chosen checkpoint's bytes are kept by the resolution: what is checked is what the load reads."""

from __future__ import annotations

import dataclasses
import io

import torch

from lit_gpu.run import store


def _lightning_ckpt(path, step: int):
    torch.save({"pytorch-lightning_version": "2.6.6", "global_step": step, "state_dict": {}}, path)
    return path


def test_a_file_resolution_keeps_the_bytes_it_checked(tmp_path):
    path = _lightning_ckpt(tmp_path / "a.ckpt", 3)
    found, data = store._held(path, {}, trust=False)
    assert found.step == 3 and isinstance(data, io.BytesIO)
    assert data.getvalue() == path.read_bytes()
    _lightning_ckpt(path, 4)  # replaced afterwards: the held bytes are still the ones checked
    assert torch.load(data, weights_only=True)["global_step"] == 3


def test_the_bytes_are_not_part_of_a_resolutions_identity(tmp_path):
    resolution = store.Resolution("fit.ckpt_path", "x.ckpt", data=io.BytesIO(b"1"))
    assert resolution == dataclasses.replace(resolution, data=None)
    assert "BytesIO" not in repr(resolution)
