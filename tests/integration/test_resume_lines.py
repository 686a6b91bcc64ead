"""Every line lit_gpu prints about a resume is true (issue 65, "lines are checked against the run").

* A checkpoint whose Adam state was forged (``exp_avg`` 1e30, ``exp_avg_sq`` 1e-30) blows the loss up in
  the first steps after the resume: NaNGuard's line names that checkpoint as the likely cause and the way
  out (``--fresh_optimizer true``, an earlier checkpoint), not the settings it trained with.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.integration.test_optimizer_matrix import _args, fit

CKPT = Path("runs") / "lit_gpu" / "version_0" / "checkpoints" / "last.ckpt"


def _errors(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("lit-gpu: error:")]


def test_a_forged_adam_state_is_blamed_on_the_checkpoint_not_the_settings(tmp_path):
    code, out = fit(tmp_path, _args("Adam", None, "--trainer.max_steps", "5"))
    assert code == 0, out[-3000:]
    path = tmp_path / CKPT
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    for state in checkpoint["optimizer_states"][0]["state"].values():
        state["exp_avg"].fill_(1e30)
        state["exp_avg_sq"].fill_(1e-30)
    torch.save(checkpoint, path)
    forged = path.read_bytes()

    code, out = fit(tmp_path, _args("Adam", None, "--ckpt_path", "last"))
    errors = _errors(out)
    assert code == 2 and len(errors) == 1, out[-3000:]
    line = errors[0]
    assert "loss became inf at step 6" in line and "1 optimizer step after resuming from " in line, line
    assert str(CKPT) in line and "left the checkpoint as it was" in line, line
    assert "--fresh_optimizer true" in line and "an earlier checkpoint" in line, line
    assert "learning rate" not in line and "gradient_clip_val" not in line, line  # not the settings
    assert path.read_bytes() == forged
